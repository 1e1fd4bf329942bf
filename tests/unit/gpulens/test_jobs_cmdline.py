"""``gpulens jobs`` prints each process on its own lines: a ``python -c`` script's newlines become spaces."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.paths import ROOT

SCRIPT = "import time\nmarker = 'gpulens-jobs-test'\ntime.sleep(60)"


def test_a_multiline_python_c_script_stays_on_one_line() -> None:
    child = subprocess.Popen([sys.executable, "-c", SCRIPT])
    try:
        time.sleep(0.3)
        run = subprocess.run([sys.executable, "-m", "gpulens", "jobs", "--pattern", "python"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
    finally:
        child.kill()
        child.wait()
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    mine = [ln for ln in lines if "gpulens-jobs-test" in ln]
    assert mine, run.stdout
    assert "import time marker = 'gpulens-jobs-test'" in mine[0]  # was three lines, two at column 0
    assert not any(ln.startswith(("marker =", "time.sleep(60)")) for ln in lines)
