"""How long a ``gpulens agent`` takes to own the Kineto endpoint when a TUI already holds it.

Times, from ``Popen`` until ``/proc`` shows the agent holding the Kineto name
(polled every 20 ms), a real ``gpulens agent --listen 127.0.0.1:0`` in three
cases, measured in the same run:

- peer "free": nobody holds the name (what the agent always did);
- "hand-over": the TUI's in-process owner (``gpulens.launch._trace_service``
  on a LocalSource, in this process) holds it and hands it over; also timed:
  until that TUI traces through the agent (its service switched to remote);
- "retry" (``--claim-retry 1``): a ``gpulens trace``-style owner that does not
  hand over holds it and is stopped 1 s after the agent started: the agent
  takes the name at its next retry.

The figure that matters is hand-over minus free (the cost of asking and
binding after the release), printed with the ratio.

Usage: .venv/bin/python benchmarks/endpoint_handover.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _holder(sock: Path) -> int | None:
    from gpulens.ipc.kineto.endpoint import holder_of

    held = holder_of(str(sock))
    return None if held is None else held[0]


def _agent(sock: Path, work: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KINETO")}
    env.update(KINETO_IPC_SOCKET_DIR=str(sock), HOME=str(work), GPULENS_NO_PRUNE="1")
    exe = Path(sys.executable).parent / "gpulens"
    return subprocess.Popen([str(exe), "agent", "--listen", "127.0.0.1:0", "--simulated-gpus", "0", "--quiet",
                             *extra], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _until(pred: object, timeout: float = 60.0) -> float:
    start = time.monotonic()
    while not pred():  # type: ignore[operator]
        if time.monotonic() - start > timeout:
            raise SystemExit("timed out")
        time.sleep(0.02)
    return time.monotonic() - start


def one_run(base: Path) -> tuple[float, float, float, float]:
    from gpulens.agent.agent import endpoint_owner
    from gpulens.core.config import Config
    from gpulens.launch import _trace_service
    from gpulens.sources.local import LocalSource

    sock = Path(tempfile.mkdtemp(prefix="gb", dir="/tmp")) / "s"
    sock.mkdir()
    try:
        proc = _agent(sock, base)
        free = _until(lambda: _holder(sock) == proc.pid)
        proc.terminate()
        proc.wait()
        _until(lambda: _holder(sock) is None)

        os.environ["KINETO_IPC_SOCKET_DIR"] = str(sock)
        service, error, release = _trace_service(LocalSource(Config(), lambda: None))  # type: ignore[arg-type, return-value]
        assert service is not None, error
        proc = _agent(sock, base)
        handed = _until(lambda: _holder(sock) == proc.pid)
        switched = handed + _until(lambda: getattr(service, "state", "") == "remote")
        release()
        proc.terminate()
        proc.wait()
        _until(lambda: _holder(sock) is None)

        own = endpoint_owner(socket.gethostname(), str(sock))
        proc = _agent(sock, base, "--claim-retry", "1")
        time.sleep(1.0)
        own.stop()
        retried = 1.0 + _until(lambda: _holder(sock) == proc.pid)
        proc.terminate()
        proc.wait()
        return free, handed, switched, retried
    finally:
        os.environ.pop("KINETO_IPC_SOCKET_DIR", None)
        shutil.rmtree(sock.parent, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="gpulens-handover-bench"))
    try:
        runs = [one_run(base) for _ in range(args.runs)]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    cols = list(zip(*runs, strict=True))
    free, handed, switched, retried = (statistics.median(col) for col in cols)

    def rng(i: int) -> str:
        return f"({min(cols[i]):.2f}-{max(cols[i]):.2f})"

    print(f"median (min-max) of {args.runs} runs, each case in turn within a run")
    print(f"agent owns the name, name free (peer):        {free:.2f} s {rng(0)}")
    print(f"agent owns the name, TUI hands over:          {handed:.2f} s {rng(1)}  ({handed / free:.2f}x the peer, "
          f"+{handed - free:.2f} s)")
    print(f"TUI traces through the agent:                 {switched:.2f} s {rng(2)}")
    print(f"agent owns the name, holder exits after 1 s:  {retried:.2f} s {rng(3)}  (retry every 1 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
