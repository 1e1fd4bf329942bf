"""Parse time of large foreign profiles: speedscope (sampled, evented) and a torch memory snapshot.

Each input is built in memory (seeded): speedscope sampled, 100,000 samples of
30 frames; speedscope evented, 600,000 open/close events; a memory snapshot,
200,000 live blocks of 12 frames each, every block its own frame list. The
figure is the best of 3 parses in one process (wall, ``perf_counter``), each
side in its own process, the two sides in turns for ``--runs`` rounds; the
median per side and the ratio are printed.

Peer, same run: git revision ``--before`` (default 4f989ce, before the parsers
named places as values), copied with ``git archive`` into a temporary folder
and imported from there. No other tool reads these three formats in Python
(speedscope is a browser app; torch's own ``_memory_viz`` renders HTML).

Usage: ``.venv/bin/python benchmarks/flame_formats.py [--before REV] [--runs N]``
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, random, sys, time
sys.path.insert(0, sys.argv[1])
from gpulens.analysis.flame.snapshot import snapshot_profile
from gpulens.analysis.flame.speedscope import speedscope_group

random.seed(1)
frames = [{"name": f"f{i}", "file": "a.py", "line": i} for i in range(200)]
samples = [[random.randrange(200) for _ in range(30)] for _ in range(100_000)]
sampled = {"shared": {"frames": frames}, "profiles": [{"type": "sampled", "name": "p", "unit": "none",
           "startValue": 0, "endValue": 100_000, "samples": samples, "weights": [1] * len(samples)}]}
events, t = [], 0
for _ in range(150_000):
    a, b = random.randrange(200), random.randrange(200)
    events += [{"type": "O", "frame": a, "at": t}, {"type": "O", "frame": b, "at": t + 1},
               {"type": "C", "frame": b, "at": t + 2}, {"type": "C", "frame": a, "at": t + 3}]
    t += 4
evented = {"shared": {"frames": frames}, "profiles": [{"type": "evented", "name": "p", "unit": "none",
           "startValue": 0, "endValue": t, "events": events}]}
blocks = [{"size": 512, "state": "active_allocated",
           "frames": [{"name": f"fn{random.randrange(300)}", "filename": "x.py", "line": random.randrange(1, 99)}
                      for _ in range(12)]} for _ in range(200_000)]
snapshot = {"segments": [{"blocks": blocks[i:i + 1000]} for i in range(0, len(blocks), 1000)], "device_traces": []}

def best(fn):
    out = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)

print(json.dumps({
    "speedscope sampled": best(lambda: speedscope_group(sampled).pick()),
    "speedscope evented": best(lambda: speedscope_group(evented).pick()),
    "memory snapshot": best(lambda: snapshot_profile(snapshot, file_bytes=10**9)),
}))
"""


def before_tree(rev: str, into: Path) -> Path:
    """Revision ``rev`` of the repository, unpacked under ``into``."""
    tar = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as archive:
        archive.extractall(into, filter="data")
    return into


def run(tree: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(tree)], capture_output=True, text=True, check=True,
                         timeout=600)
    figures: dict[str, float] = json.loads(out.stdout)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--before", default="4f989ce", help="the peer: a git revision (default 4f989ce)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpulens-before-") as scratch:
        old = before_tree(args.before, Path(scratch))
        now: list[dict[str, float]] = []
        then: list[dict[str, float]] = []
        for _ in range(args.runs):  # in turns
            now.append(run(ROOT))
            then.append(run(old))
    print(f"{'input':<20} {'now (s)':>22} {args.before + ' (s)':>22} {'now / before':>13}")
    for name in now[0]:
        a = [r[name] for r in now]
        b = [r[name] for r in then]
        print(f"{name:<20} {statistics.median(a):>8.3f} ({min(a):.3f}-{max(a):.3f}) "
              f"{statistics.median(b):>8.3f} ({min(b):.3f}-{max(b):.3f}) "
              f"{statistics.median(a) / statistics.median(b):>12.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
