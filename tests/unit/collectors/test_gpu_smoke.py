"""scripts/gpu_smoke.sh: its shell parses, and its JSON checker accepts a good
sample and rejects a null field (fed samples built from the fake NVML test double).
The script itself needs an NVIDIA GPU; see docs/gpu-verification.md."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from gpulens.collectors.nvml.collector import NvmlCollector
from gpulens.ipc.serialize import to_dict
from tests.fakes.fake_nvml import make_fake_nvml
from tests.paths import SCRIPTS

SCRIPT = SCRIPTS / "gpu_smoke.sh"


def _checker() -> str:
    text = SCRIPT.read_text()
    found = re.search(r'samples\.jsonl" <<\'EOF\'\n(.*?)\nEOF\n', text, re.S)
    assert found, "the python checker heredoc moved"
    return found.group(1)


def _run_checker(tmp_path: Path, gpm: bool) -> subprocess.CompletedProcess[str]:
    fake = make_fake_nvml(2, gpm=gpm)
    collector = NvmlCollector(fake, clock=fake.clock)  # type: ignore[arg-type]
    fake.advance(1.0)
    gpus = [to_dict(g) for g in collector.read().gpus]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"gpus": gpus, "unavailable": {}}) + "\n"
                               for _ in range(3)))
    return subprocess.run([sys.executable, "-c", _checker(), str(samples)],
                          capture_output=True, text=True, timeout=60)


def test_script_parses_and_keeps_the_profiler_section() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)
    assert "# PROFILER CHECKS" in SCRIPT.read_text()


def test_checker_passes_good_hopper_sample(tmp_path: Path) -> None:
    done = _run_checker(tmp_path, gpm=True)
    assert done.returncode == 0, done.stderr
    assert "NVML checks passed on NVIDIA H100 80GB HBM3" in done.stdout


def test_checker_fails_hopper_without_sm_activity(tmp_path: Path) -> None:
    done = _run_checker(tmp_path, gpm=False)
    assert done.returncode == 1
    assert "GPU SMOKE FAILED: sm_activity_percent is null" in done.stderr
