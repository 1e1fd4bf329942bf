"""Replay seek on a 1 h recording of 16 demo hosts x 8 GPUs: decode time, and how long a seek takes to show.

Makes (or reuses, ``--file``) a recording of ``--minutes`` of the demo source,
then measures, in this process:

- the index build (one scan of the file, as ``--replay`` does at start);
- decoding the whole history window (the store's ``history_s``, 1 h) with
  ``RecordingIndex.events_between`` in 30 s chunks, and feeding it to a store;
- a seek in the real app (headless, 160x45, paused): the time until the first
  pass (the last 5 min) is shown, the time until the whole hour is swapped in,
  and the longest the app's event loop went without running a 50 ms timer
  meanwhile (its stall: how frozen the UI is). The peer, measured in the same
  run: the same hour rebuilt in one pass on the app's thread, which freezes
  the UI for all of it. ``--runs`` seeks (default 3), each in a fresh app
  with its peer right after; printed: median (min-max), ratios of medians.
- peak RSS of this process (the recording's decoded records never all live at once).

Usage: .venv/bin/python benchmarks/replay_seek.py [--file PATH] [--minutes 60] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def make_recording(path: Path, minutes: float) -> None:
    from gpulens.core.events import SampleEvent
    from gpulens.sources.demo import DemoSource
    from gpulens.sources.local import Recorder

    end = 1_800_000_000.0
    demo = DemoSource(hosts=16, clock=lambda: end)
    rec = Recorder(str(path), "demo", True)
    seconds = int(minutes * 60)
    for k in range(seconds):
        for h in range(16):
            rec.write(SampleEvent(demo.sample(h, end - seconds + k)))
    rec.close()


def decode(path: Path) -> tuple[float, float, float, int]:
    """Index build, decode of the last hour and feeding it to a store (seconds), and records."""
    from gpulens.sources.replay import RecordingIndex
    from gpulens.store.store import Store

    index = RecordingIndex(str(path))
    t0 = time.perf_counter()
    index.build()
    built = time.perf_counter() - t0
    store = Store()
    at, dec, app, n = index.end - store.history_s, 0.0, 0.0, 0
    while at < index.end:
        t0 = time.perf_counter()
        events = index.events_between(at, min(index.end, at + 30))
        t1 = time.perf_counter()
        store.apply_many(events)
        dec, app, n, at = dec + t1 - t0, app + time.perf_counter() - t1, n + len(events), at + 30
    index.close()
    return built, dec, app, n


async def seek(path: Path) -> dict[str, float]:
    from gpulens.sources.replay import ReplaySource
    from gpulens.store.store import Store
    from gpulens.tui.app import GpulensApp

    app = GpulensApp(source=ReplaySource(str(path)))
    out: dict[str, float] = {}
    async with app.run_test(size=(160, 45)) as pilot:
        while app.replay is None or not app.replay.ready:
            await asyncio.sleep(0.1)
        control = app.replay
        control.toggle()  # paused: nothing but the seek runs
        await pilot.pause()
        control.seek_to(control.index.end - 120)  # from the start to 2 min before the end: a rebuild
        gaps: list[float] = []
        last = time.perf_counter()

        def beat() -> None:
            nonlocal last
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

        timer = app.set_interval(0.05, beat)
        t0 = time.perf_counter()
        while control.seeking:
            await asyncio.sleep(0.01)
        out["first pass shown s"] = time.perf_counter() - t0
        while control.filling is not None:
            await asyncio.sleep(0.05)
        out["whole hour swapped in s"] = time.perf_counter() - t0
        timer.stop()
        out["longest UI stall during it s"] = max(gaps, default=0.0)
        t0 = time.perf_counter()  # the peer: one pass on the app's thread (the UI frozen meanwhile)
        store = Store(resolution_s=app.store.resolution_s, history_s=app.store.history_s)
        at, end = control.position - store.history_s, control.position
        while at < end:
            store.apply_many(control.index.events_between(at, min(end, at + 30)))
            at += 30
        out["peer: one pass on the UI thread s"] = time.perf_counter() - t0
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--file", type=Path, help="a recording to reuse (made if missing)")
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--runs", type=int, default=3, help="decodes and seeks (each with its peer; default 3)")
    args = parser.parse_args()
    path = args.file or Path(tempfile.mkdtemp()) / "demo-1h.gpulens"
    if not path.exists():
        t0 = time.perf_counter()
        make_recording(path, args.minutes)
        print(f"made {path} ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t0:.0f} s")
    decodes = [decode(path) for _ in range(args.runs)]
    built, dec, app = (statistics.median(d[i] for d in decodes) for i in range(3))
    n = decodes[0][3]
    print(f"index build: {built:.1f} s; the last hour: {n} records, decode {dec:.1f} s + store {app:.1f} s "
          f"= {dec + app:.1f} s ({n / (dec + app):.0f} records/s); medians of {args.runs} runs, decode + store "
          f"{min(d[1] + d[2] for d in decodes):.1f}-{max(d[1] + d[2] for d in decodes):.1f} s")
    seeks = [asyncio.run(seek(path)) for _ in range(args.runs)]  # each a fresh app, its peer right after
    got = {k: statistics.median(r[k] for r in seeks) for k in seeks[0]}
    print(f"seek to end - 2 min, median (min-max) of {args.runs} runs, a fresh app each:")
    for name, v in got.items():
        print(f"  {name:34s} {v:6.2f}  ({min(r[name] for r in seeks):.2f}-{max(r[name] for r in seeks):.2f})")
    peer = got["peer: one pass on the UI thread s"]
    print(f"=> ratio of medians: shown after {got['first pass shown s'] / peer:.2f}x the one-pass freeze; "
          f"longest stall {got['longest UI stall during it s'] / peer:.3f}x of it; "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
