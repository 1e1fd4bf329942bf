"""Benchmark ``gpulens analyze DIR`` on 8 ranks against HTA's ``TraceAnalysis`` on the same directory.

Builds N copies (default 8) of HTA's df_index_resolver trace (54 MB
unpacked each, read from ../shared; the script stops with a message when it
is absent) in a temporary directory, uncompressed, with
``distributedInfo.rank`` set to 0..N-1 and ``world_size`` to N. Then runs,
each in its own fresh process:

* ``gpulens analyze DIR --json`` (the command line, as a user runs it);
* HTA from its own venv (default /tmp/hta-venv: ``python -m venv
  /tmp/hta-venv && /tmp/hta-venv/bin/pip install HolisticTraceAnalysis``):
  ``TraceAnalysis(trace_dir=DIR, include_last_profiler_step=True)`` (all
  steps, as gpulens counts them) + temporal breakdown + comm/comp overlap +
  ``get_potential_stragglers()`` (its late-arrival stragglers, which gpulens
  reports as ``late_arrival``).

Wall time is the child's whole life (interpreter start and imports
included). Peak RSS: the largest single process (``ru_maxrss`` of the
children) and the peak of the whole process tree (parent plus workers,
sampled with psutil every 10 ms). Then prints both tools' numbers side by
side: step time per rank, comm/comp overlap per rank, temporal breakdown.

Usage: .venv/bin/python benchmarks/analyze_ranks.py [--ranks 8] [--hta-python PATH] [--no-hta] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DF = ROOT.parent / "shared" / "fixtures" / "traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
INFO = re.compile(rb'"distributedInfo":\s*\{[^}]*\}')

WRAP = r"""
import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:]).returncode
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print("CPU", ru.ru_utime + ru.ru_stime, "MAXRSS", ru.ru_maxrss, file=sys.stderr)
sys.exit(rc)
"""

HTA = r"""
import json, logging, sys, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
tb = a.get_temporal_breakdown(visualize=False)
ov = a.get_comm_comp_overlap(visualize=False)
t = a.t
sym = t.symbol_table.get_sym_id_map()
step_ids = [v for k, v in sym.items() if k.startswith("ProfilerStep#")]
steps = {}
for rank, df in t.traces.items():
    rows = df[df["name"].isin(step_ids)].sort_values("ts")
    steps[int(rank)] = [float(d) / 1000.0 for d in rows["dur"]]
try:
    late = [int(r) for r in a.get_potential_stragglers(num_candidates=2)]
except Exception as err:
    late = f"{type(err).__name__}: {err}"
out = {"temporal": tb.to_dict("records"), "overlap": ov.to_dict("records"), "steps_ms": steps, "late": late}
print("HTA-JSON " + json.dumps(out, default=float))
"""


def build(dest: Path, ranks: int) -> int:
    """Write ``ranks`` copies of df_index_resolver with their rank fields changed; total bytes."""
    data = gzip.decompress(DF.read_bytes())
    if not INFO.search(data):
        sys.exit(f"{DF}: no distributedInfo to rewrite")
    total = 0
    for r in range(ranks):
        info = b'"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d}' % (r, ranks)
        out = INFO.sub(info, data, count=1)
        (dest / f"rank-{r}.pt.trace.json").write_bytes(out)
        total += len(out)
    return total


def measure(cmd: list[str]) -> tuple[float, float, float, float, str]:
    """Run ``cmd``: wall s, CPU s (user + system, all processes), peak RSS MB of its largest
    process, peak RSS MB of its process tree, stdout.

    RSS is sampled every 10 ms with psutil (the parent plus every descendant);
    the largest process's figure is also checked against ``ru_maxrss`` of
    its descendants, reported by a small wrapper process around ``cmd``.
    """
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-c", WRAP, *cmd], stdout=out, stderr=err)
        tree_peak = single_peak = 0
        ps = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                sizes = [ps.memory_info().rss] + [c.memory_info().rss for c in ps.children(recursive=True)]
                tree_peak = max(tree_peak, sum(sizes))
                single_peak = max(single_peak, *sizes)
            except psutil.Error:
                pass
            time.sleep(0.01)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if proc.returncode != 0:
        sys.exit(f"{cmd[0]} exited {proc.returncode}: {errors[-2000:]}")
    tail = errors.rsplit("CPU ", 1)[1].split()
    cpu, maxrss = float(tail[0]), int(tail[2]) * 1024
    return wall, cpu, max(single_peak, maxrss) / 2**20, tree_peak / 2**20, text


def side_by_side(ours: dict[str, Any], hta: dict[str, Any]) -> None:
    """Print both tools' per-rank numbers."""
    temporal = {int(r["rank"]): r for r in hta["temporal"]}
    overlap = {int(r["rank"]): r["comp_comm_overlap_pctg"] for r in hta["overlap"]}
    steps = {int(k): v for k, v in hta["steps_ms"].items()}
    print("\nper rank: gpulens | HTA")
    print(f"{'rank':>4}  {'mean step ms':>25}  {'overlap %':>15}  {'idle %':>15}  {'compute %':>15}  {'non-compute %':>15}")
    for r in ours["ranks"]:
        k = r["rank"]
        t = temporal.get(k, {})
        s = r["split"]
        w = s["window_us"] or 1.0
        hs = steps.get(k, [])
        hmean = sum(hs) / len(hs) if hs else float("nan")
        print(
            f"{k:>4}  {r['mean_step_ms'] or float('nan'):>11.3f} | {hmean:>11.3f}  "
            f"{r['overlap_pct'] if r['overlap_pct'] is not None else float('nan'):>6.2f} | {overlap.get(k, float('nan')):>6.2f}  "
            f"{100 * s['idle_us'] / w:>6.2f} | {t.get('idle_time_pctg', float('nan')):>6.2f}  "
            f"{100 * s['compute_us'] / w:>6.2f} | {t.get('compute_time_pctg', float('nan')):>6.2f}  "
            f"{100 * (s['exposed_comm_us'] + s['other_us']) / w:>6.2f} | {t.get('non_compute_time_pctg', float('nan')):>6.2f}"
        )
        print(f"      step times ms gpulens {[round(x, 3) for x in r['step_times_ms']]}")
        print(f"      step times ms HTA     {[round(x, 3) for x in hs]}")
    la = ours.get("late_arrival") or {}
    print(f"late-arrival stragglers (k=2): gpulens {la.get('stragglers')} ({la.get('note') or la.get('kernel', '')[:40]}, "
          f"flagged steps {[r['flagged_steps'] for r in la.get('ranks', [])]}) | HTA {hta.get('late')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--hta-python", default="/tmp/hta-venv/bin/python")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--keep", metavar="DIR", help="build the copies here and keep them")
    ap.add_argument("--build-only", metavar="DIR", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build_only:
        print(build(Path(args.build_only), args.ranks))
        return
    if not DF.exists():
        sys.exit(f"skipped: {DF} is not here (the shared fixtures are needed)")
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpulens-ranks-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        size = int(subprocess.check_output([sys.executable, __file__, "--ranks", str(args.ranks),
                                            "--build-only", str(tmp)]))
        print(f"{args.ranks} ranks of {DF.name}: {size / 1e6:.0f} MB unpacked in {tmp}; "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
        wall, cpu, single, tree, text = measure([sys.executable, "-m", "gpulens", "analyze", str(tmp), "--json"])
        ours = json.loads(text)
        print(f"gpulens analyze DIR: {wall:.2f} s wall, {cpu:.2f} s CPU, peak RSS {single:.0f} MB (largest process), "
              f"{tree:.0f} MB (whole process tree)")
        if args.no_hta:
            return
        if not Path(args.hta_python).exists():
            print(f"HTA skipped: {args.hta_python} is not here (python -m venv /tmp/hta-venv && "
                  "/tmp/hta-venv/bin/pip install HolisticTraceAnalysis)")
            return
        hwall, hcpu, hsingle, htree, htext = measure([args.hta_python, "-c", HTA, str(tmp)])
        line = next(x for x in htext.splitlines() if x.startswith("HTA-JSON "))
        hta = json.loads(line[len("HTA-JSON "):])
        print(f"HTA TraceAnalysis:   {hwall:.2f} s wall, {hcpu:.2f} s CPU, peak RSS {hsingle:.0f} MB (largest process), "
              f"{htree:.0f} MB (whole process tree)")
        print(f"ratio HTA/gpulens: wall {hwall / wall:.1f}x, CPU {hcpu / cpu:.1f}x, peak RSS {hsingle / single:.1f}x (largest), "
              f"{htree / tree:.1f}x (tree)")
        side_by_side(ours, hta)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
