"""Another user's 500-deep process chain does not stop the sampler (issue 27 item 4).

The attacker, an unprivileged second uid, forks a chain of 500 shells, each
named ``systemdpythonsh`` (a symlink to ``/bin/sh`` of that name: ``comm`` is
the name exec'd). Under the old matching every tick re-matched every shell's
tree ID with Python's ``re`` in time cubic in its depth (0.7 s for one ID at
depth 512): the root agent went a minute without a sample. Here the real
``gpulens sample`` runs as root beside the chain and must keep its cadence:
at least half the samples its interval asks for arrive in a window.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.security_helpers import User, call_as, two_users

__all__ = ["two_users"]  # the fixture, used by name

DEPTH = 500
INTERVAL_S = 0.25
WINDOW_S = 4.0
CHAIN_SH = """\
n=$1
if [ "$n" -gt 0 ]; then
  "$SH" "$0" $((n - 1)) &
  wait
else
  echo ready >&"$READY"
  read _ <&"$HOLD"
fi
"""


def _start_chain(hold_r: int, hold_w: int, sh: str, script: str) -> int:
    """As the attacker: start the chain in its own session; returns its top pid once the leaf runs."""
    os.close(hold_w)  # only the test holds the write end: closing it ends the chain
    ready_r, ready_w = os.pipe()
    env = {"PATH": "/usr/bin:/bin", "SH": sh, "HOLD": "3", "READY": "4"}  # dash: one-digit fds

    def fds() -> None:
        os.dup2(hold_r, 3)
        os.dup2(ready_w, 4)

    top = subprocess.Popen([sh, script, str(DEPTH)], env=env, preexec_fn=fds, pass_fds=(3, 4),
                           start_new_session=True, cwd="/")
    os.close(ready_w)
    with os.fdopen(ready_r, "rb") as ready:
        if ready.readline() != b"ready\n":
            raise RuntimeError("the chain's leaf never started")
    return top.pid


@pytest.fixture
def deep_chain(two_users: tuple[User, User]) -> Iterator[int]:
    """The attacker's chain of DEPTH shells; yields the top pid."""
    _victim, attacker = two_users
    where = Path(tempfile.mkdtemp(prefix="gl-deep-"))
    try:
        where.chmod(0o755)
        sh = where / "systemdpythonsh"
        sh.symlink_to(shutil.which("sh") or "/bin/sh")
        script = where / "chain.sh"
        script.write_text(CHAIN_SH)
        script.chmod(0o644)
        hold_r, hold_w = os.pipe()
        try:
            top = call_as(attacker, _start_chain, hold_r, hold_w, str(sh), str(script), timeout=120)
            yield top
        finally:
            os.close(hold_r)
            os.close(hold_w)  # the leaf reads end of file; every shell's wait returns
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _depth_below(top: int) -> int:
    """Processes from ``top`` down its first children to a childless one."""
    depth, pid = 0, top
    while kids := Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        depth, pid = depth + 1, int(kids[0])
    return depth


@pytest.mark.slow
def test_sample_cadence_holds_beside_a_deep_chain(deep_chain: int, gpulens_exe: str, tmp_path: Path) -> None:
    assert _depth_below(deep_chain) == DEPTH  # the chain is really there, as deep as meant
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}  # no config file: the default job pattern
    sampler = subprocess.Popen([gpulens_exe, "sample", "--json", "--count", "0", "--interval", str(INTERVAL_S)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    arrivals: list[tuple[float, dict[str, object]]] = []

    def read() -> None:
        assert sampler.stdout is not None
        for line in sampler.stdout:
            arrivals.append((time.monotonic(), json.loads(line)))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 30  # start-up: imports and the priming scan of the chain
        while not arrivals and time.monotonic() < deadline and sampler.poll() is None:
            time.sleep(0.05)
        assert arrivals, f"no sample in 30 s beside the chain (exit {sampler.poll()})"
        start = arrivals[0][0]
        time.sleep(WINDOW_S + INTERVAL_S)
        in_window = [a for a in arrivals if start < a[0] <= start + WINDOW_S]
        asked = WINDOW_S / INTERVAL_S
        assert len(in_window) >= asked / 2, f"{len(in_window)} samples in {WINDOW_S} s; the interval asks {asked:g}"
        unavailable = arrivals[-1][1].get("unavailable")
        assert isinstance(unavailable, dict) and "jobs.pattern" not in unavailable
    finally:
        sampler.kill()
        sampler.wait()

