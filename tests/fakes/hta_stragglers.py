"""Record HTA's late-arrival stragglers for the test's trace directories (run with HTA's venv).

``/tmp/hta-venv/bin/python tests/fakes/hta_stragglers.py > tests/data/traces/hta_late_arrival.json``

For each directory (HTA's two sampled ranks as they are; the 6-rank job
tests/fakes/late_ranks.py derives from them; the 4-rank job it derives
from nccl_data; the two-rank DDP-over-gloo CPU traces), for ``include_last_profiler_step`` False (HTA's default) and True,
and for ``num_candidates`` 1, 2 and 3, runs
``TraceAnalysis(trace_dir=DIR, include_last_profiler_step=...).get_potential_stragglers(num_candidates=k)``
and records its answer, the metric rows its default
``find_stragglers_with_late_start_comm_kernels`` computed (rank, iteration,
stream, kernel, normalized start, start, duration, the mean iteration time)
and the per-rank counts, or the error HTA raised.
tests/unit/analysis/test_late_arrival.py compares gpulens with these.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TRACES = HERE.parent / "data" / "traces"
sys.path.insert(0, str(HERE))

import late_ranks  # noqa: E402


def run(trace_dir: Path) -> dict[str, Any]:
    from hta.analyzers import straggler as S
    from hta.trace_analysis import TraceAnalysis

    seen: dict[str, Any] = {}
    compute, top_k = S._compute_normalized_start_time_of_significant_comm_kernels, S._get_top_k_stragglers_with_metric

    def metric(df: Any, sym: Any, *a: Any, **kw: Any) -> Any:
        m, name = compute(df, sym, *a, **kw)
        names = sym.get_sym_table()
        seen["rows"] = [
            {"rank": int(r["rank"]), "iteration": int(r["iteration"]), "stream": int(r["stream"]),
             "kernel": names[int(r["name"])], "normalized_start": float(r[name]), "dur_us": float(r["dur"]),
             "mean_iter_us": float(r["dur"]) / float(r["duration"])}
            for _, r in m.iterrows()
        ]
        return m, name

    def counts(*a: Any, **kw: Any) -> Any:
        out = top_k(*a, **kw)
        seen["counts"] = {str(int(k)): int(v) for k, v in out.items()}
        return out

    S._compute_normalized_start_time_of_significant_comm_kernels = metric
    S._get_top_k_stragglers_with_metric = counts
    cases = []
    try:
        for inc in (False, True):
            try:
                a = TraceAnalysis(trace_dir=str(trace_dir), include_last_profiler_step=inc)
            except Exception as err:  # the reference records what HTA says
                cases.append({"include_last_profiler_step": inc, "error": f"{type(err).__name__}: {err}"})
                continue
            for k in (1, 2, 3):
                seen.clear()
                case: dict[str, Any] = {"include_last_profiler_step": inc, "num_candidates": k}
                try:
                    case["stragglers"] = [int(x) for x in a.get_potential_stragglers(num_candidates=k)]
                except Exception as err:
                    case["error"] = f"{type(err).__name__}: {err}"
                case.update(seen)
                cases.append(case)
    finally:
        S._compute_normalized_start_time_of_significant_comm_kernels = compute
        S._get_top_k_stragglers_with_metric = top_k
    return {"cases": cases}


def main() -> int:
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    import hta

    out: dict[str, Any] = {
        "how": (
            f"HolisticTraceAnalysis {getattr(hta, '__version__', '?')} (PyPI): "
            "TraceAnalysis(trace_dir=DIR, include_last_profiler_step=...).get_potential_stragglers(num_candidates=k), "
            "default find_stragglers_with_late_start_comm_kernels; made by tests/fakes/hta_stragglers.py"
        ),
        "dirs": {},
    }
    tmp = Path(tempfile.mkdtemp(prefix="hta-late-"))
    try:
        sampled = tmp / "sampled"
        sampled.mkdir()
        for name in late_ranks.SOURCES:
            shutil.copy(TRACES / name, sampled / name)
        late_ranks.write_job(TRACES, tmp / "job6")
        out["dirs"]["sampled"] = run(sampled)
        out["dirs"]["job6"] = run(tmp / "job6")
        late_ranks.write_nccl_job(TRACES, tmp / "nccl4")
        out["dirs"]["nccl4"] = run(tmp / "nccl4")
        out["dirs"]["ddp_gloo"] = run(TRACES / "ddp_gloo")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
