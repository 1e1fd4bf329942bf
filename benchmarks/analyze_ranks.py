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

HTA runs once per trace parser of ``--hta-backend`` (default both): ``json``
(HTA 0.5's default) and ``ijson_batch_and_compress`` (what HTA's docs name as
giving the best results; ``pip install ijson`` in its venv); its ranks are
parsed by its own process pool (one worker per rank, at most one per CPU), as
HTA does by default. gpulens' time is compared with HTA's faster backend and
its memory with HTA's smaller, each by the ratio of the medians.

Wall time is the child's whole life (interpreter start and imports
included). Peak RSS: the largest single process (``ru_maxrss`` of the
children) and the peak of the whole process tree (parent plus workers,
sampled with psutil every 10 ms). Both sides run ``--repeat`` times (default
3) in turns (gpulens, HTA, gpulens, ...); printed per side: the median, min
and max of each figure, and the ratios of the medians. Then prints both
tools' numbers side by side (from the last run; they are the same every
run): step time per rank, comm/comp overlap per rank, temporal breakdown.

Usage: .venv/bin/python benchmarks/analyze_ranks.py [--ranks 8] [--repeat 3] [--hta-python PATH]
       [--hta-backend json ijson_batch_and_compress] [--no-hta] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
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
BACKENDS = ("json", "ijson_batch_and_compress")
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
from hta.common.trace_parser import set_default_trace_parsing_backend
from hta.configs.parser_config import ParserBackend
from hta.trace_analysis import TraceAnalysis
set_default_trace_parsing_backend(ParserBackend(sys.argv[2]))
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


FIGURES = ("s wall", "s CPU", "MB peak RSS (largest process)", "MB peak RSS (process tree)")


def spread(runs: list[tuple[float, ...]], i: int, fmt: str) -> str:
    """``median (min-max)`` of figure ``i`` over the runs."""
    xs = [r[i] for r in runs]
    return f"{format(statistics.median(xs), fmt)} ({format(min(xs), fmt)}-{format(max(xs), fmt)})"


def report(name: str, runs: list[tuple[float, ...]]) -> None:
    print(f"{name:34s}" + ", ".join(f"{spread(runs, i, '.2f' if i < 2 else '.0f')} {unit}"
                                    for i, unit in enumerate(FIGURES)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="runs per side, in turns (default 3)")
    ap.add_argument("--hta-python", default="/tmp/hta-venv/bin/python")
    ap.add_argument("--hta-backend", nargs="+", default=list(BACKENDS), choices=BACKENDS,
                    help="HTA's trace parsers to run (default both)")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--keep", metavar="DIR", help="build the copies here and keep them")
    ap.add_argument("--build-only", metavar="DIR", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build_only:
        print(build(Path(args.build_only), args.ranks))
        return
    if not DF.exists():
        sys.exit(f"skipped: {DF} is not here (the shared fixtures are needed)")
    hta_ok = not args.no_hta and Path(args.hta_python).exists()
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpulens-ranks-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        size = int(subprocess.check_output([sys.executable, __file__, "--ranks", str(args.ranks),
                                            "--build-only", str(tmp)]))
        print(f"{args.ranks} ranks of {DF.name}: {size / 1e6:.0f} MB unpacked in {tmp}; "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
        ours_runs: list[tuple[float, ...]] = []
        hta_runs: dict[str, list[tuple[float, ...]]] = {b: [] for b in args.hta_backend}
        ours: dict[str, Any] = {}
        hta: dict[str, Any] = {}
        for _ in range(args.repeat):
            *figures, text = measure([sys.executable, "-m", "gpulens", "analyze", str(tmp), "--json"])
            ours_runs.append(tuple(figures))  # type: ignore[arg-type]
            ours = json.loads(text)
            for backend in args.hta_backend if hta_ok else ():
                *figures, htext = measure([args.hta_python, "-c", HTA, str(tmp), backend])
                hta_runs[backend].append(tuple(figures))  # type: ignore[arg-type]
                line = next(x for x in htext.splitlines() if x.startswith("HTA-JSON "))
                hta = json.loads(line[len("HTA-JSON "):])
        print(f"median (min-max) of {args.repeat} runs per side, in turns; "
              f"load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        report("gpulens analyze DIR:", ours_runs)
        if args.no_hta:
            return
        if not hta_ok:
            print(f"HTA skipped: {args.hta_python} is not here (python -m venv /tmp/hta-venv && "
                  "/tmp/hta-venv/bin/pip install HolisticTraceAnalysis ijson)")
            return
        for backend, runs in hta_runs.items():
            report(f"HTA {backend}:", runs)

        def med(runs: list[tuple[float, ...]], i: int) -> float:
            return statistics.median(r[i] for r in runs)

        best = [min(hta_runs, key=lambda b: med(hta_runs[b], i)) for i in range(len(FIGURES))]
        ratio = [med(hta_runs[best[i]], i) / med(ours_runs, i) for i in range(len(FIGURES))]
        print(f"ratio of medians, HTA's best backend for each figure / gpulens: wall {ratio[0]:.1f}x ({best[0]}), "
              f"CPU {ratio[1]:.1f}x ({best[1]}), peak RSS {ratio[2]:.1f}x largest ({best[2]}), {ratio[3]:.1f}x "
              f"tree ({best[3]}); HTA's fastest run / gpulens' slowest (wall): "
              f"{min(r[0] for r in hta_runs[best[0]]) / max(r[0] for r in ours_runs):.1f}x")
        side_by_side(ours, hta)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
