"""Security soak: 64 legitimate viewers against one agent under connection and registry floods.

One real ``gpulens agent --listen 127.0.0.1:0 --token-file T`` (SIMULATED
8-GPU samples at 1 Hz) owns a Kineto endpoint in a private socket dir. 64
real viewers (one ``StreamSource`` with 64 links, each proving the token)
stay connected for the whole run. At the same time, from this process:

- a **connection flood**: up to ``--flood`` sockets kept open that never
  authenticate (half send nothing, half declare a 16 MiB frame and trickle
  bytes), reopened as the agent closes them;
- a **registry flood**: spoofed Kineto polls (random pids, 4,096 ancestors
  each) and ``ctxt`` registrations with fresh job ids, as fast as one thread
  sends them, from a client socket that never reads its replies.

A **control agent** (same flags, same 64 viewers, no flood) runs beside it:
the peer, measured in the same run. Reports, per agent: samples each viewer
received (a locked-out viewer gets none: must be 0 such viewers), down events,
the agent's RSS after 1 min and at the end, and its thread count.

Usage: python benchmarks/security_soak.py [--minutes 5] [--viewers 64] [--flood 300]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.fakes

from gpulens.core.events import HostStatusEvent, SampleEvent
from gpulens.ipc import auth
from gpulens.ipc.kineto import codec as kineto_codec
from gpulens.sources.stream.source import LinkOptions, StreamSource, tcp_target
from tests.fakes.agent_helpers import make_token_file
from tests.fakes.kineto_client import encode_context, encode_request

EXE = str(Path(sys.executable).parent / "gpulens")


def proc_status(pid: int) -> tuple[int, int]:
    """(VmRSS bytes, threads) of ``pid``."""
    rss = threads = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, threads


def spawn(name: str, workdir: Path, token: Path) -> tuple[subprocess.Popen[bytes], int, Path]:
    pf = workdir / f"{name}.port"
    sockdir = workdir / f"{name}-kineto"
    env = dict(os.environ, KINETO_IPC_SOCKET_DIR=str(sockdir))
    proc = subprocess.Popen(
        [EXE, "agent", "--listen", "127.0.0.1:0", "--port-file", str(pf), "--hostname", name,
         "--interval", "1", "--simulated-gpus", "8", "--token-file", str(token), "--quiet"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )
    deadline = time.monotonic() + 120
    while not pf.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"agent {name} failed to start")
        time.sleep(0.05)
    return proc, int(pf.read_text()), sockdir


class ConnectionFlood:
    """Keeps up to ``n`` unauthenticated sockets open against ``port``."""

    def __init__(self, port: int, n: int) -> None:
        self.port, self.n = port, n
        self.opened = self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        socks: list[socket.socket] = []
        while not self._stop.is_set():
            alive = []
            for s in socks:
                try:
                    s.setblocking(False)
                    data = s.recv(65536)
                    if data == b"":
                        s.close()
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    s.close()
                    continue
                alive.append(s)
            socks = alive
            while len(socks) < self.n and not self._stop.is_set():
                try:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
                except OSError:
                    self.refused += 1
                    break
                self.opened += 1
                if self.opened % 2:
                    # declare a 16 MiB frame, send a few bytes of it
                    with_header = struct.pack(">I", 16 * 1024 * 1024) + b"\x81" * 64
                    try:
                        s.sendall(with_header)
                    except OSError:
                        s.close()
                        continue
                socks.append(s)
            self._stop.wait(0.2)
        for s in socks:
            s.close()


class RegistryFlood:
    """Spoofed Kineto polls and ctxt registrations, never reading replies."""

    def __init__(self, sockdir: Path) -> None:
        self.target = str(sockdir / "dynolog")
        self.sent = self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        me = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        me.bind(b"\0gpulens-soak-flood-" + os.urandom(8).hex().encode())
        me.setblocking(False)
        rng = random.Random(1)
        ancestors = tuple(range(2, 4098))
        job = 0
        while not self._stop.is_set():
            job += 1
            if job % 2:
                pid = rng.randrange(2, 4_000_000)
                dgram = encode_request(
                    kineto_codec.ConfigRequest(config_type=3, job_id=job, pids=(pid, *ancestors[:4095]))
                )
            else:
                dgram = encode_context(
                    kineto_codec.ContextRegistration(gpu=job % 8, pid=rng.randrange(2, 4_000_000), job_id=job)
                )
            try:
                me.sendto(dgram, self.target)
                self.sent += 1
            except BlockingIOError:
                self.failed += 1
                self._stop.wait(0.001)
            except OSError:
                self.failed += 1
                self._stop.wait(0.05)
        me.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--viewers", type=int, default=64)
    ap.add_argument("--flood", type=int, default=300, help="unauthenticated sockets kept open")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="gpulens-secsoak-"))
    token = make_token_file(workdir / "token")
    secret = auth.load_token(token)
    agents: dict[str, tuple[subprocess.Popen[bytes], int, Path]] = {}
    for name in ("flooded", "control"):
        agents[name] = spawn(name, workdir, token)
    per_viewer: Counter[tuple[str, int]] = Counter()  # (agent, viewer index) -> samples
    downs: Counter[str] = Counter()
    lock = threading.Lock()
    sources: list[StreamSource] = []
    for name, (_p, port, _d) in agents.items():
        # one StreamSource per viewer: each is a separate authenticated connection
        for idx in range(args.viewers):
            def emit(ev: Any, name: str = name, idx: int = idx) -> None:
                with lock:
                    if isinstance(ev, SampleEvent):
                        per_viewer[(name, idx)] += 1
                    elif isinstance(ev, HostStatusEvent) and not ev.up:
                        downs[name] += 1

            src = StreamSource([tcp_target(f"127.0.0.1:{port}")], LinkOptions(token=secret))
            src.start(emit)
            sources.append(src)
    # The flood starts once every viewer is up, so "down events" counts lockouts caused by it.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with lock:
            if all(per_viewer[(n, i)] > 0 for n in agents for i in range(args.viewers)):
                break
        time.sleep(0.2)
    with lock:
        downs.clear()
    flood = ConnectionFlood(agents["flooded"][1], args.flood)
    reg = RegistryFlood(agents["flooded"][2])
    flood.start()
    reg.start()
    t0 = time.monotonic()
    end = t0 + 60 * args.minutes
    trace: dict[str, list[tuple[float, int, int]]] = {n: [] for n in agents}
    try:
        while time.monotonic() < end:
            time.sleep(min(10.0, max(0.0, end - time.monotonic())))
            for name, (p, _port, _d) in agents.items():
                if p.poll() is not None:
                    raise SystemExit(f"agent {name} died (rc {p.returncode})")
                rss, threads = proc_status(p.pid)
                trace[name].append((time.monotonic() - t0, rss, threads))
    finally:
        flood.stop()
        reg.stop()
        for src in sources:
            src.stop()
        for p, _port, _d in agents.values():
            p.terminate()
        for p, _port, _d in agents.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    minutes = (time.monotonic() - t0) / 60
    print(f"security soak: {minutes:.1f} min, {args.viewers} token viewers per agent, "
          f"flood of {args.flood} unauthenticated sockets ({flood.opened} opened, {flood.refused} refused "
          f"at connect) and {reg.sent} spoofed Kineto datagrams ({reg.failed} not sent) at the flooded agent")
    ok = True
    for name in agents:
        counts = [per_viewer[(name, i)] for i in range(args.viewers)]
        samples = sum(counts)
        starved = sum(1 for c in counts if c == 0)
        rows = trace[name]
        base = next((r for r in rows if r[0] >= 60), rows[0])
        last = rows[-1]
        peak_threads = max(r[2] for r in rows)
        print(f"{name:8s}: samples received {samples} (expected about {int(args.viewers * minutes * 60)}), "
              f"viewers with no samples {starved}, down events {downs[name]}, RSS after 1 min {base[1] / 2**20:.1f} MiB, end {last[1] / 2**20:.1f} MiB "
              f"(end/1-min {last[1] / base[1]:.3f}), threads peak {peak_threads}")
        print(f"{'':8s}  rss trace (s, MiB, threads): "
              + " ".join(f"{t:.0f}:{r / 2**20:.1f}:{th}" for t, r, th in rows[:: max(1, len(rows) // 10)]))
        ok = ok and starved == 0 and downs[name] == 0 and samples >= 0.9 * args.viewers * minutes * 60
    flooded, control = trace["flooded"][-1][1], trace["control"][-1][1]
    print(f"flooded / control agent RSS at the end: {flooded / control:.2f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
