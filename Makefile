# gpulens: two commands for a fresh machine.
#   make run   - create .venv, install gpulens, start it on this machine
#   make test  - same venv plus test dependencies (pytest, torch CPU build), run the suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH := torch==2.13.0

.PHONY: run test test-floor lint screenshots bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml setup.py collectors/nvml/nvbatch.c
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

# The oldest Textual pyproject.toml allows, installed for real, with the TUI tests
# that do not compare pixels (snapshots are pinned to the current Textual).
FLOOR_VENV := .venv-floor
TEXTUAL_FLOOR = $(shell sed -n 's/.*"textual>=\([0-9.]*\)".*/\1/p' pyproject.toml)

test-floor:
	test -x $(FLOOR_VENV)/bin/python || $(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/pip install -q --upgrade pip
	$(FLOOR_VENV)/bin/pip install -q -e . "textual==$(TEXTUAL_FLOOR)" "pytest>=7,<9" pytest-timeout hypothesis
	$(FLOOR_VENV)/bin/python -c 'import textual; assert textual.__version__ == "$(TEXTUAL_FLOOR)", textual.__version__; print("textual", textual.__version__)'
	$(FLOOR_VENV)/bin/python -m pytest -q -p no:cacheprovider -m "not torch" tests/unit/tui

lint: $(VENV)/.installed-test
	$(BIN)/ruff check gpulens core collectors ipc agent sources store analysis tui tests benchmarks
	scripts/typecheck.sh

screenshots: $(VENV)/.installed-test
	$(BIN)/python scripts/make_screenshots.py

clean:
	rm -rf $(VENV) $(FLOOR_VENV) build *.egg-info
