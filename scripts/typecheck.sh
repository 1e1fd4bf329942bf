#!/usr/bin/env bash
# mypy --strict over the installed layout: build/typecheck/gpulens links gpulens/*.py and the
# layer folders (core/, collectors/, ipc/, agent/, sources/, store/, analysis/, tui/) as gpulens.<layer>, so
# cross-package imports resolve (an editable install's import hook is invisible to mypy).
set -euo pipefail
cd "$(dirname "$0")/.."
root=build/typecheck/gpulens
rm -rf build/typecheck && mkdir -p "$root"
for f in gpulens/*.py; do ln -s "../../../$f" "$root/"; done
ln -s ../../../gpulens/commands "$root/commands"
for d in core collectors ipc agent sources store analysis tui; do ln -s "../../../$d" "$root/$d"; done
exec "${MYPY:-.venv/bin/mypy}" --strict --ignore-missing-imports --python-version 3.11 "$root"
