"""Soak: 64 real agents, one killed (-9) and restarted every 10 s; one viewer.

Each agent is a real ``gpulens agent --listen`` process serving SIMULATED
samples (``--simulated-gpus 8``, 1 Hz), whose sample k has time
``start + k`` exactly: inside one agent instance consecutive samples are
exactly 1 s apart, so a step of 2, 3, ... seconds is a lost sample, and a
non-integer step is a restart (a new instance). The viewer is a real
StreamSource in this process.

Reports: samples received, backfilled, lost (holes inside an instance), the
live agents' kept history missing from the viewer at the end (must be 0),
and the viewer's RSS over time (must stay flat). Peer: RSS growth against
the RSS after the first minute.

Usage: python benchmarks/soak.py [--minutes 10] [--agents 64] [--every 10]
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from gpulens.core.events import HostStatusEvent, SampleEvent
from gpulens.ipc import stream
from gpulens.ipc.stream_decode import FrameDecoder
from gpulens.sources.stream.source import LinkOptions, StreamSource, tcp_target

EXE = str(Path(sys.executable).parent / "gpulens")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def spawn(name: str, port: int, workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    pf = workdir / f"{name}.{time.monotonic_ns()}.port"
    proc = subprocess.Popen(
        [EXE, "agent", "--listen", f"127.0.0.1:{port}", "--port-file", str(pf), "--hostname", name,
         "--interval", "1", "--simulated-gpus", "8", "--no-trace", "--quiet"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not pf.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"agent {name} failed to start")
        time.sleep(0.05)
    return proc, int(pf.read_text())


def ring_times(port: int) -> list[float]:
    """Every sample time an agent keeps."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    dec = FrameDecoder()
    msgs: list[Any] = []
    try:
        while not any(isinstance(m, stream.Hello) for m in msgs):
            msgs += dec.feed(s.recv(65536))
        s.sendall(stream.encode(stream.Hello(proto=1, role="viewer", since=0.0)))
        times: list[float] = []
        msgs = []
        while True:
            while not msgs:
                data = s.recv(1 << 20)
                if not data:
                    return times
                msgs += dec.feed(data)
            m = msgs.pop(0)
            if isinstance(m, stream.History):
                times += [x.time for x in m.samples]
                if m.last:
                    return times
    finally:
        s.close()


def holes(times: list[float], interval: float = 1.0) -> tuple[int, int]:
    """(lost samples inside instances, instance boundaries) of one host's series."""
    lost = boundaries = 0
    for a, b in itertools.pairwise(times):
        steps = (b - a) / interval
        n = round(steps)
        if abs(steps - n) < 1e-5 and n >= 1:
            lost += n - 1
        else:
            boundaries += 1
    return lost, boundaries


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--every", type=float, default=10.0, help="seconds between kills")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="gpulens-soak-"))
    names = [f"soak{i:02d}" for i in range(args.agents)]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    ports: dict[str, int] = {}
    for n in names:
        procs[n], ports[n] = spawn(n, 0, workdir)
    times: dict[str, list[float]] = defaultdict(list)
    backfilled = [0]
    downs = [0]
    lock = threading.Lock()

    def emit(ev: Any) -> None:
        with lock:
            if isinstance(ev, SampleEvent):
                times[ev.sample.host].append(ev.sample.time)
                backfilled[0] += ev.backfill
            elif isinstance(ev, HostStatusEvent) and not ev.up:
                downs[0] += 1

    src = StreamSource([tcp_target(f"127.0.0.1:{ports[n]}") for n in names], LinkOptions())
    src.start(emit)
    t0 = time.monotonic()
    end = t0 + 60 * args.minutes
    rss: list[tuple[float, int]] = []
    kills = 0
    try:
        next_kill = t0 + args.every
        while time.monotonic() < end:
            time.sleep(max(0.0, min(next_kill, end) - time.monotonic()))
            rss.append((time.monotonic() - t0, rss_bytes()))
            if time.monotonic() >= end:
                break
            victim = names[kills % len(names)]
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait()
            procs[victim], _ = spawn(victim, ports[victim], workdir)
            kills += 1
            next_kill += args.every
        time.sleep(8)  # let the last restarted agent reconnect and backfill
        missing = 0
        kept_total = 0
        for n in names:
            with lock:
                seen = set(times[n])
                first = min(times[n]) if times[n] else 0.0
                last = max(times[n]) if times[n] else 0.0
            # Samples an agent took before the viewer's very first connection
            # are not owed (a first connect asks for no history); everything
            # after it, across every restart, is.
            kept = [t for t in ring_times(ports[n]) if first <= t <= last]
            kept_total += len(kept)
            missing += sum(1 for t in kept if t not in seen)
    finally:
        src.stop()
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    with lock:
        total = sum(len(v) for v in times.values())
        lost = boundaries = 0
        for n in names:
            series = sorted(times[n])
            assert series == times[n], f"{n}: samples out of order"
            lo, bo = holes(series)
            lost += lo
            boundaries += bo
    base = next((r for t, r in rss if t >= 60), rss[0][1] if rss else 0)
    peak = max(r for _t, r in rss) if rss else 0
    final = rss[-1][1] if rss else 0
    minutes = (time.monotonic() - t0) / 60
    print(f"soak: {args.agents} agents x 8 GPUs at 1 Hz for {minutes:.1f} min, kill -9 + restart every "
          f"{args.every:g} s ({kills} kills), {os.cpu_count()} CPUs shared with other work")
    print(f"samples received {total}, backfilled {backfilled[0]}, down events {downs[0]}, "
          f"restart boundaries seen {boundaries}")
    print(f"lost inside an agent instance: {lost}; kept by the live agents (since the viewer's first sample) "
          f"but missing at the end: {missing} of {kept_total}")
    print(f"viewer RSS: after 1 min {base / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB, end {final / 2**20:.1f} MiB "
          f"(end/1-min = {final / max(base, 1):.3f})")
    print("rss trace (s, MiB): " + " ".join(f"{t:.0f}:{r / 2**20:.1f}" for t, r in rss[:: max(1, len(rss) // 12)]))
    return 0 if lost == 0 and missing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
