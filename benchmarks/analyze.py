"""Benchmark ``gpulens analyze`` against Holistic Trace Analysis on the same traces.

Traces: the largest GPU fixture (HTA's df_index_resolver, 54 MB unpacked,
read from ../shared; skipped with a message when absent) and a 200 MB
synthetic CPU trace (benchmarks/gen_cpu_trace.py, cached in /tmp).
Each side runs in its own fresh process, so peak RSS (ru_maxrss) is its own;
times exclude interpreter start and imports. HTA runs from its OWN venv
(default /tmp/hta-venv: ``python -m venv /tmp/hta-venv &&
/tmp/hta-venv/bin/pip install HolisticTraceAnalysis``) and does
TraceAnalysis(trace_dir) + temporal breakdown + kernel breakdown.

Usage: .venv/bin/python benchmarks/analyze.py [--hta-python PATH] [--mb 200]
"""

from __future__ import annotations

import argparse
import json
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
from hta.trace_analysis import TraceAnalysis
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


def _run(python: str, code: str, arg: str, timeout: float = 900) -> dict[str, object]:
    try:
        res = subprocess.run([python, "-c", code, arg], capture_output=True, text=True, timeout=timeout, cwd="/tmp")
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish within {timeout:.0f} s (stopped)"}
    if res.returncode != 0:
        return {"error": res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"}
    out: dict[str, object] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def _best(runs: list[dict[str, object]]) -> dict[str, object]:
    ok = [r for r in runs if "error" not in r]
    return min(ok, key=lambda r: float(r["total_s"])) if ok else runs[0]  # type: ignore[arg-type]


def bench(name: str, trace: Path, hta_python: str | None, hta_timeout: float = 300, repeat: int = 1) -> list[str]:
    """Run both sides on one trace (best of ``repeat`` fresh processes each); returns result lines."""
    ours = _best([_run(sys.executable, OURS, str(trace)) for _ in range(repeat)])
    size_mb = float(ours.get("size_bytes", 0)) / 1e6  # type: ignore[arg-type]
    lines = [f"{name}: {size_mb:.1f} MB unpacked, {ours.get('events')} events (best of {repeat})"]
    lines.append(f"  gpulens analyze: {ours.get('total_s', 0):.2f} s, peak RSS {ours.get('peak_rss_mb', 0):.0f} MB "
                 f"({float(ours.get('peak_rss_mb', 0)) / max(size_mb, 1e-9):.2f}x file size)")  # type: ignore[arg-type]
    if hta_python is None:
        lines.append("  HTA: skipped (no HTA venv; see the module docstring)")
        return lines
    with tempfile.TemporaryDirectory(prefix="hta-bench-") as d:
        (Path(d) / trace.name).symlink_to(trace)
        hta = _best([_run(hta_python, HTA, d, timeout=hta_timeout) for _ in range(repeat)])
    if "error" in hta:
        lines.append(f"  HTA: failed: {hta['error']}")
        return lines
    ratio = float(hta["total_s"]) / max(float(ours["total_s"]), 1e-9)  # type: ignore[arg-type]
    lines.append(f"  HTA load+temporal+kernel breakdown: {hta['total_s']:.2f} s, peak RSS {hta['peak_rss_mb']:.0f} MB")
    lines.append(f"  => gpulens is {ratio:.1f}x faster, uses {float(hta['peak_rss_mb']) / float(ours['peak_rss_mb']):.1f}x less memory")  # type: ignore[arg-type]
    for note in hta.get("notes", []):  # type: ignore[union-attr]
        lines.append(f"  HTA note: {note}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--hta-python", default="/tmp/hta-venv/bin/python")
    parser.add_argument("--mb", type=int, nargs="+", default=[20, 200], help="sizes of the synthetic CPU traces")
    parser.add_argument("--hta-timeout", type=float, default=300, help="stop HTA after this many seconds")
    args = parser.parse_args()
    hta = args.hta_python if Path(args.hta_python).exists() else None
    out: list[str] = []
    if DF.exists():
        out += bench("df_index_resolver (GPU, HTA fixture)", DF, hta, args.hta_timeout, repeat=3)
    else:
        out.append(f"df_index_resolver: skipped ({DF} not found; it lives in the workplace's shared fixtures)")
    print("\n".join(out), flush=True)
    out = []
    for mb in args.mb:
        cpu = Path(f"/tmp/gpulens-bench-cpu-{mb}mb.json")
        if not cpu.exists():
            sys.path.insert(0, str(HERE))
            from gen_cpu_trace import generate

            generate(cpu, mb * 1_000_000)
        out += bench(f"synthetic CPU trace ({mb} MB)", cpu, hta, args.hta_timeout)
        print("\n".join(out), flush=True)
        out = []
    return 0


if __name__ == "__main__":
    sys.exit(main())
