# gpulens: two commands for a fresh machine.
#   make run   - create .venv, install gpulens, start it on this machine
#   make test  - same venv plus test dependencies (pytest, torch CPU build), run the suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH := torch==2.13.0

.PHONY: run test lint screenshots bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml setup.py
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q $(TORCH)
	touch $@

run: $(VENV)/.installed
	$(BIN)/gpulens $(ARGS)

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check gpulens core collectors ipc agent sources store analysis tui tests benchmarks
	scripts/typecheck.sh

screenshots: $(VENV)/.installed-test
	$(BIN)/python scripts/make_screenshots.py

clean:
	rm -rf $(VENV) build *.egg-info
