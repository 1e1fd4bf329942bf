"""Recording size (issue 31 item 20): MB/h of format version 1 and 2, and what replay costs on each.

Records ``--minutes`` (default 60) of the demo fleet (16 hosts x 8 GPUs, one
sample per host per second) into two files from the same records: version 1
(each record as is) and version 2 (compressed in blocks, what ``--record``
writes). Then, for each file, in this process:

- its size as MB per hour of recording, and what version 2's compression
  costs the recorder (CPU per event);
- the index build (one scan, as ``--replay`` does at start; ``--repeat`` times),
  with the file in the page cache, and once more after dropping it from the
  cache (``posix_fadvise(DONTNEED)``: a file read from disk);
- a random seek: at ``--seeks`` random places, the records of the 300 s before
  it read back in 30 s chunks (``RecordingIndex.events_between``, as the first
  pass of a seek in the TUI does; tui/replay.py SEEK_HISTORY_S, CHUNK_S), median;
- a playback tick at a random place, cold (the 1 s of records after it, read
  with nothing kept: version 2 decompresses its block up to there), median, and
  the next one, warm (its block kept, as when playing on after a seek);
- the whole hour before the end read back in 30 s chunks (a seek's second pass).

For reference, the same records as one zlib stream and as one zlib stream
each (neither can seek by block). The two files are measured in turns (v1, v2,
v1, ...; a seek at the same place in both), so both see the same machine load. Usage:
``.venv/bin/python benchmarks/recording_size.py [--minutes 60] [--seeks 20] [--dir DIR]``
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HOSTS = 16
END = 1_800_000_000.0


def make_recordings(v1: Path, v2: Path, minutes: float) -> dict[str, float]:
    """Both files from the same records; the reference sizes and version 2's compression time."""
    from gpulens.core.events import SampleEvent
    from gpulens.ipc.recording import EventEncoder, encode_event, header
    from gpulens.sources.demo import DemoSource

    demo = DemoSource(hosts=HOSTS, clock=lambda: END)
    encoder = EventEncoder(2)
    stream = zlib.compressobj(6)
    seconds = int(minutes * 60)
    out = {"events": 0.0, "v2 encode s": 0.0, "one zlib stream": 0.0, "zlib per record": 0.0}
    with v1.open("wb") as f1, v2.open("wb") as f2:
        f1.write(header("demo", True, END - seconds, version=1))
        f2.write(header("demo", True, END - seconds, version=2))
        for k in range(seconds):
            for h in range(HOSTS):
                event = SampleEvent(demo.sample(h, END - seconds + k))
                record = encode_event(event)
                f1.write(record)
                t0 = time.perf_counter()
                f2.write(encoder.encode(event, record))
                out["v2 encode s"] += time.perf_counter() - t0
                out["one zlib stream"] += len(stream.compress(record))
                out["zlib per record"] += len(zlib.compress(record, 6))
                out["events"] += 1
    out["one zlib stream"] += len(stream.flush())
    return out


def drop_from_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def measure(paths: dict[str, Path], seeks: int, repeat: int) -> dict[str, dict[str, list[float]]]:
    """Each figure for each file, measured in turns (v1, v2, v1, ...: both see the same machine load)."""
    from gpulens.sources.replay import RecordingIndex

    got: dict[str, dict[str, list[float]]] = {name: {} for name in paths}

    def note(name: str, key: str, value: float) -> None:
        got[name].setdefault(key, []).append(value)

    for k in range(repeat + 1):
        for name, path in paths.items():
            if k == repeat:
                drop_from_page_cache(path)
            index = RecordingIndex(str(path))
            t0 = time.perf_counter()
            index.build()
            note(name, "index build s" if k < repeat else "index build, not cached s", time.perf_counter() - t0)
            assert index.error is None, index.error
            index.close()
    indexes = {name: RecordingIndex(str(path)) for name, path in paths.items()}
    for index in indexes.values():
        index.build()
    first = next(iter(indexes.values()))
    rng = random.Random(20)
    for _ in range(seeks):
        t = rng.uniform(first.start + 300, first.end - 3)  # the same places in both files
        for name, index in indexes.items():
            index.close()  # nothing kept from the last seek: it read elsewhere
            t0 = time.perf_counter()
            at, n = t - 300, 0
            while at < t:
                n += len(index.events_between(at, min(t, at + 30)))
                at += 30
            note(name, "seek (300 s read back) s", time.perf_counter() - t0)
            assert n == index.count_between(t - 300, t), n
            index.close()
            t0 = time.perf_counter()
            n = len(index.events_between(t, t + 1))
            note(name, "tick, cold ms", (time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            n += len(index.events_between(t + 1, t + 2))
            note(name, "tick, warm ms", (time.perf_counter() - t0) * 1e3)
            assert n == 2 * HOSTS, n
    for name, index in indexes.items():
        index.close()
        t0 = time.perf_counter()
        at = index.end - 3600
        while at < index.end:
            index.events_between(at, min(index.end, at + 30))
            at += 30
        note(name, "the last hour read back s", time.perf_counter() - t0)
        index.close()
    return got


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--seeks", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3, help="index builds per file (in the page cache)")
    parser.add_argument("--dir", type=Path, help="where to write the two recordings (default: a new temp dir)")
    args = parser.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp())
    v1, v2 = folder / "demo-v1.gpulens", folder / "demo-v2.gpulens"
    t0 = time.perf_counter()
    made = make_recordings(v1, v2, args.minutes)
    hours = args.minutes / 60
    print(f"{args.minutes:g} min of the demo ({HOSTS} hosts x 8 GPUs, 1 Hz): {made['events']:.0f} events, "
          f"made in {time.perf_counter() - t0:.0f} s")
    rows = [("version 1", v1.stat().st_size), ("version 2", v2.stat().st_size),
            ("(one zlib stream, no seek)", made["one zlib stream"]),
            ("(zlib per record)", made["zlib per record"])]
    for name, size in rows:
        print(f"  {name:28s} {size / 1e6 / hours:7.1f} MB/h  {size / made['events']:7.0f} B/event")
    print(f"  version 2 compression: {made['v2 encode s'] / made['events'] * 1e6:.0f} us/event "
          f"({made['v2 encode s'] / (args.minutes * 60) * 100:.2f} % of a core at 1 Hz)")
    got = measure({"v1": v1, "v2": v2}, args.seeks, args.repeat)
    print(f"  {'(median of the runs; v2/v1: median of paired ratios)':58s} {'v1':>8s} {'v2':>8s} {'v2/v1':>6s}")
    for key, a in got["v1"].items():
        b = got["v2"][key]
        ratio = statistics.median(y / x for x, y in zip(a, b, strict=True))
        print(f"  {key:30s} ({len(a):2d} runs, min v1 {min(a):7.3f} v2 {min(b):7.3f}) "
              f"{statistics.median(a):8.3f} {statistics.median(b):8.3f} {ratio:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
