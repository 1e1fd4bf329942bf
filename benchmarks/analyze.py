"""Benchmark ``gpulens analyze`` against Holistic Trace Analysis on the same traces.

Traces: the largest GPU fixture (HTA's df_index_resolver, 54 MB unpacked,
read from ../shared; skipped with a message when absent) and synthetic CPU
traces of 20 and 200 MB (benchmarks/gen_cpu_trace.py, cached in /tmp).
Each run is a fresh process, so peak RSS (ru_maxrss) is its own; times
exclude interpreter start and imports. Both sides run ``--repeat`` times
(default 3) in turns (gpulens, HTA, gpulens, ...); printed per side: min,
median and max of the time and the peak RSS, and the ratios of the medians.
A side that fails or runs past its timeout is not tried again on that trace
(another try costs the timeout again and tells nothing new): its line says so.

HTA runs from its OWN venv (default /tmp/hta-venv: ``python -m venv
/tmp/hta-venv && /tmp/hta-venv/bin/pip install HolisticTraceAnalysis ijson``)
and does TraceAnalysis(trace_dir) + temporal breakdown + kernel breakdown,
once per parser backend of ``--hta-backend`` (default both): ``json`` (HTA
0.5's default; the faster here) and ``ijson_batch_and_compress`` (what HTA's
docs name as giving the best results; needs ijson with its yajl2_c backend,
which the ijson wheel has; the smaller peak RSS here). gpulens' time is
compared with HTA's faster backend and its memory with HTA's smaller, each by
the ratio of the medians.

Usage: .venv/bin/python benchmarks/analyze.py [--hta-python PATH] [--mb 20 200] [--repeat 3]
       [--hta-backend json ijson_batch_and_compress]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DF = ROOT.parent / "shared" / "fixtures" / "traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"

OURS = r"""
import json, resource, sys, time
from gpulens.analysis.trace.analyze import analyze_file
t = time.perf_counter()
s = analyze_file(sys.argv[1])
dt = time.perf_counter() - t
print(json.dumps({"total_s": dt, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "size_bytes": s.size_bytes, "events": s.events}))
"""

HTA = r"""
import json, logging, resource, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from hta.common.trace_parser import set_default_trace_parsing_backend
from hta.configs.parser_config import ParserBackend
from hta.trace_analysis import TraceAnalysis
set_default_trace_parsing_backend(ParserBackend(sys.argv[2]))
t = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
notes = []
for fn in ("get_temporal_breakdown", "get_gpu_kernel_breakdown"):
    try:
        getattr(a, fn)(visualize=False)
    except Exception as e:
        notes.append(f"{fn}: {type(e).__name__}: {e}"[:160])
dt = time.perf_counter() - t
print(json.dumps({"total_s": dt, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "notes": notes}))
"""

Run = dict[str, object]
BACKENDS = ("json", "ijson_batch_and_compress")


def _run(python: str, code: str, args: list[str], timeout: float = 900) -> Run:
    try:
        res = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, timeout=timeout, cwd="/tmp")
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish within {timeout:.0f} s (stopped)"}
    if res.returncode != 0:
        return {"error": res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"}
    out: Run = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def _spread(runs: list[Run], key: str, fmt: str, unit: str) -> str:
    """``median unit (min .., max .., n runs)`` of ``key`` over the runs that finished."""
    xs = [float(r[key]) for r in runs]  # type: ignore[arg-type]
    return (f"{format(statistics.median(xs), fmt)} {unit} (min {format(min(xs), fmt)}, max {format(max(xs), fmt)}, "
            f"{len(xs)} runs)")


def _med(runs: list[Run], key: str) -> float:
    return statistics.median(float(r[key]) for r in runs)  # type: ignore[arg-type]


def bench(name: str, trace: Path, hta_python: str | None, hta_timeout: float = 300, repeat: int = 3,
          backends: tuple[str, ...] = BACKENDS) -> list[str]:
    """Run both sides on one trace, ``repeat`` fresh processes each, in turns; returns result lines."""
    ours: list[Run] = []
    hta: dict[str, list[Run]] = {b: [] for b in backends}
    errors = {b: "" if hta_python else "skipped (no HTA venv; see the module docstring)" for b in backends}
    with tempfile.TemporaryDirectory(prefix="hta-bench-") as d:
        (Path(d) / trace.name).symlink_to(trace)
        for _ in range(repeat):
            got = _run(sys.executable, OURS, [str(trace)])
            if "error" in got:
                return [f"{name}: gpulens analyze failed: {got['error']}"]
            ours.append(got)
            for b in backends:
                if errors[b]:
                    continue
                got = _run(hta_python, HTA, [d, b], timeout=hta_timeout)  # type: ignore[arg-type]
                if "error" in got:
                    errors[b] = f"failed: {got['error']} (after {len(hta[b])} finished runs; not tried again)"
                else:
                    hta[b].append(got)
    size_mb = float(ours[0]["size_bytes"]) / 1e6  # type: ignore[arg-type]
    lines = [f"{name}: {size_mb:.1f} MB unpacked, {ours[0]['events']} events; median (min, max) of up to "
             f"{repeat} runs each, in turns"]
    lines.append(f"  gpulens analyze: {_spread(ours, 'total_s', '.2f', 's')}; peak RSS "
                 f"{_spread(ours, 'peak_rss_mb', '.0f', 'MB')} ({_med(ours, 'peak_rss_mb') / max(size_mb, 1e-9):.2f}x "
                 "file size)")
    for b in backends:
        if hta[b]:
            lines.append(f"  HTA {b}: load+temporal+kernel breakdown {_spread(hta[b], 'total_s', '.2f', 's')}; "
                         f"peak RSS {_spread(hta[b], 'peak_rss_mb', '.0f', 'MB')}")
        if errors[b]:
            lines.append(f"  HTA {b}: {errors[b]}")
    done = [b for b in backends if hta[b]]
    if done:
        fast = min(done, key=lambda b: _med(hta[b], "total_s"))
        small = min(done, key=lambda b: _med(hta[b], "peak_rss_mb"))
        t_ratio = _med(hta[fast], "total_s") / max(_med(ours, "total_s"), 1e-9)
        worst = min(float(r["total_s"]) for r in hta[fast]) / max(float(r["total_s"]) for r in ours)  # type: ignore[arg-type]
        m_ratio = _med(hta[small], "peak_rss_mb") / _med(ours, "peak_rss_mb")
        lines.append(f"  => ratio of medians: gpulens {t_ratio:.1f}x faster than HTA {fast} (HTA's fastest run "
                     f"over gpulens' slowest: {worst:.1f}x), {m_ratio:.1f}x less memory than HTA {small}")
    for note in sorted({str(n) for b in done for r in hta[b] for n in r.get("notes", [])}):  # type: ignore[attr-defined]
        lines.append(f"  HTA note: {note}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--hta-python", default="/tmp/hta-venv/bin/python")
    parser.add_argument("--mb", type=int, nargs="*", default=[20, 200], help="sizes of the synthetic CPU traces (none: the fixture only)")
    parser.add_argument("--hta-timeout", type=float, default=300, help="stop HTA after this many seconds")
    parser.add_argument("--repeat", type=int, default=3, help="runs per side and trace (default 3)")
    parser.add_argument("--hta-backend", nargs="+", default=list(BACKENDS), choices=BACKENDS,
                        help="HTA's trace parsers to run (default both)")
    args = parser.parse_args()
    hta = args.hta_python if Path(args.hta_python).exists() else None
    traces: list[tuple[str, Path]] = []
    if DF.exists():
        traces.append(("df_index_resolver (GPU, HTA fixture)", DF))
    else:
        print(f"df_index_resolver: skipped ({DF} not found; it lives in the workplace's shared fixtures)", flush=True)
    for mb in args.mb:
        cpu = Path(f"/tmp/gpulens-bench-cpu-{mb}mb.json")
        if not cpu.exists():
            sys.path.insert(0, str(HERE))
            from gen_cpu_trace import generate

            generate(cpu, mb * 1_000_000)
        traces.append((f"synthetic CPU trace ({mb} MB)", cpu))
    for name, path in traces:
        print("\n".join(bench(name, path, hta, args.hta_timeout, args.repeat, tuple(args.hta_backend))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
