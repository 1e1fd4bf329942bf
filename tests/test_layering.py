"""collectors/ and ipc/ never import textual or rich (STYLE.md rule 1)."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import importlib, json, pkgutil, sys
import gpulens.collectors, gpulens.ipc
names, failed = [], {}
for pkg in (gpulens.collectors, gpulens.ipc):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        try:
            importlib.import_module(info.name)
            names.append(info.name)
        except Exception as err:
            failed[info.name] = repr(err)
ui = sorted(m for m in sys.modules if m.split(".")[0] in ("textual", "rich"))
print(json.dumps({"names": names, "failed": failed, "ui": ui}))
"""


def test_core_packages_do_not_import_ui() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "gpulens.collectors.sampler" in result["names"]
    assert "gpulens.collectors.jobs" in result["names"]
    assert result["failed"] == {}, result["failed"]
    assert result["ui"] == [], f"UI modules imported by the core: {result['ui']}"
