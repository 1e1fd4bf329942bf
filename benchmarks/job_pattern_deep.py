"""CPU seconds per job-scan tick beside a 500-deep chain of shells (issue 27 item 4).

Any user can fork a chain of shells and name each ``systemdpythonsh`` (a
symlink to ``/bin/sh`` of that name; ``comm`` is the name exec'd). Every
shell is re-read each tick (exec may turn it into Python), and its tree ID
was matched again against the default job pattern with Python's ``re``, in
time cubic in the depth.

Figures, measured in the same run on the same live chain:
* now: ``JobScanner`` as the sampler runs it (the tree ID cut to the
  nearest ``MAX_TREE_DEPTH`` names, RE2, a steady tree not matched again),
  the median over 20 ticks, and the first tick (every tree ID matched once);
* peer: the same scanner with the matching it had before (the whole tree ID,
  matched with Python's ``re`` on every re-read), one tick: its priming scan.
CPU time is ``time.process_time()`` (user + sys of this process). Both sides
run ``--runs`` times (default 3) in turns; printed: median (min-max) per side
and the ratios of the medians.

Run: ``.venv/bin/python benchmarks/job_pattern_deep.py [--depth 500] [--runs 3]``
(about 100 s a run at depth 500: the peer's one tick).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from gpulens.collectors import jobs as jobs_mod
from gpulens.collectors.jobs import MAX_DEPTH, JobScanner, _Entry
from gpulens.core.jobs_pattern import DEFAULT_JOB_PATTERN

CHAIN_SH = """\
n=$1
if [ "$n" -gt 0 ]; then
  "$SH" "$0" $((n - 1)) &
  wait
else
  echo ready >&4
  read _ <&3
fi
"""


class OldMatching(JobScanner):
    """The scanner with the matching of commit 8145585: whole tree IDs, ``re``, every re-read."""

    def __init__(self, *args: object, **kw: object) -> None:
        self._old = re.compile(DEFAULT_JOB_PATTERN)
        super().__init__(*args, **kw)  # type: ignore[arg-type]

    def _place(self, name: str, entry: _Entry, depth: int = 0) -> None:
        ppid = entry.stat.ppid
        parent_name = str(ppid)
        parent = self._cache.get(parent_name) if ppid > 0 else None
        if parent is None and ppid > 0 and depth < MAX_DEPTH:
            parent = self._load(parent_name)
            if parent is not None:
                self._place(parent_name, parent, depth + 1)
        if parent is None or depth >= MAX_DEPTH:
            entry.tree_id, entry.ancestors = entry.stat.comm, ()
        else:
            entry.tree_id = f"{parent.tree_id}/{entry.stat.comm}"
            entry.ancestors = (*parent.ancestors, ppid)
        entry.matched = entry.stat.state != "Z" and self._old.search(entry.tree_id) is not None
        if entry.matched:
            self._matched.add(name)
        else:
            self._matched.discard(name)


def start_chain(depth: int, where: Path) -> tuple[subprocess.Popen[bytes], int]:
    """The chain of ``depth`` shells named systemdpythonsh; returns it and the write end that holds it."""
    sh = where / "systemdpythonsh"
    sh.symlink_to(shutil.which("sh") or "/bin/sh")
    script = where / "chain.sh"
    script.write_text(CHAIN_SH)
    hold_r, hold_w = os.pipe()
    ready_r, ready_w = os.pipe()

    def fds() -> None:  # dash redirects only one-digit fds
        os.dup2(hold_r, 3)
        os.dup2(ready_w, 4)

    top = subprocess.Popen([str(sh), str(script), str(depth)], env={"PATH": "/usr/bin:/bin", "SH": str(sh)},
                           preexec_fn=fds, pass_fds=(3, 4), start_new_session=True)
    os.close(hold_r)
    os.close(ready_w)
    with os.fdopen(ready_r, "rb") as ready:
        if ready.readline() != b"ready\n":
            raise SystemExit("the chain's leaf never started")
    return top, hold_w


def cpu_s(fn: object) -> float:
    start = time.process_time()
    fn()  # type: ignore[operator]
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3, help="runs of each side, in turns (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gl-deep-") as tmp:
        top, hold_w = start_chain(args.depth, Path(tmp))
        try:
            time.sleep(jobs_mod.YOUNG_S + 0.5)  # old processes: only the shells are re-read, as in steady state
            firsts, steady, peers = [], [], []
            box: list[JobScanner] = []
            for _ in range(args.runs):  # in turns, so load bursts hit both
                firsts.append(cpu_s(lambda: box.append(JobScanner())))
                scanner = box[-1]
                steady.append(statistics.median(cpu_s(scanner.scan) for _ in range(20)))
                peers.append(cpu_s(OldMatching))
            longest = max(len(e.tree_id) for e in scanner._cache.values())
            now, first, peer = (statistics.median(x) for x in (steady, firsts, peers))
            print(f"chain of {args.depth} shells named systemdpythonsh; {len(scanner._shells)} shells re-read a tick; "
                  f"median (min-max) of {args.runs} runs, in turns")
            print(f"now:  {now * 1e3:.1f} ms CPU per tick (median of 20 a run; runs {min(steady) * 1e3:.1f}-"
                  f"{max(steady) * 1e3:.1f}), first tick {first * 1e3:.1f} ms ({min(firsts) * 1e3:.1f}-"
                  f"{max(firsts) * 1e3:.1f}); longest tree ID {longest} characters; engine {scanner._pattern.engine}")
            print(f"peer: {peer:.1f} s CPU for one tick ({min(peers):.1f}-{max(peers):.1f}; whole tree IDs, "
                  "Python's re on every re-read)")
            print(f"ratio of medians: {peer / now:,.0f}x per steady tick, {peer / first:,.0f}x against the first tick")
        finally:
            os.close(hold_w)  # the leaf reads end of file; the chain unwinds
            top.wait(timeout=60)


if __name__ == "__main__":
    main()
