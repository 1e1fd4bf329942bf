#!/usr/bin/env bash
# mypy --strict from the repository root, as a developer runs it: the links gpulens/<layer> -> ../<layer>
# give each layer folder (core/, collectors/, ipc/, agent/, sources/, store/, analysis/, tui/) its installed
# name gpulens.<layer>, so cross-package imports resolve with no generated tree. The tests are checked too
# (pyproject.toml [tool.mypy] says the few relaxations, for fakes that call untyped torch and grpc code).
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${MYPY:-.venv/bin/mypy}" --strict --ignore-missing-imports --python-version 3.11 gpulens tests "$@"
