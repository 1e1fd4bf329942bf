"""Write HTA's per-rank numbers for a directory of traces (run with HTA's own venv, not the test venv).

``/tmp/hta-venv/bin/python tests/fakes/hta_reference.py DIR > tests/data/traces/hta_sampled_ranks.json``

Runs ``TraceAnalysis(trace_dir=DIR, include_last_profiler_step=True)`` (all
steps, as gpulens counts them) and records its temporal breakdown, its
communication/computation overlap and the ProfilerStep durations of each
rank's parsed trace. tests/unit/analysis/test_ranks.py compares gpulens
with these numbers.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from typing import Any


def main() -> int:
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    import hta
    from hta.trace_analysis import TraceAnalysis

    trace_dir = sys.argv[1]
    a = TraceAnalysis(trace_dir=trace_dir, include_last_profiler_step=True)
    t = a.t
    sym = t.symbol_table.get_sym_id_map()
    step_ids = [v for k, v in sym.items() if k.startswith("ProfilerStep#")]
    steps: dict[str, list[float]] = {}
    for rank, df in t.traces.items():
        rows = df[df["name"].isin(step_ids)].sort_values("ts")
        steps[str(int(rank))] = [float(d) for d in rows["dur"]]
    out: dict[str, Any] = {
        "how": (
            f"HolisticTraceAnalysis {getattr(hta, '__version__', '?')}: "
            "TraceAnalysis(trace_dir=DIR, include_last_profiler_step=True); "
            "get_temporal_breakdown(visualize=False), get_comm_comp_overlap(visualize=False), "
            "ProfilerStep# rows' dur per rank; made by tests/fakes/hta_reference.py"
        ),
        "files": sorted(os.listdir(trace_dir)),
        "temporal_breakdown": a.get_temporal_breakdown(visualize=False).to_dict("records"),
        "comm_comp_overlap": a.get_comm_comp_overlap(visualize=False).to_dict("records"),
        "profiler_step_dur_us": steps,
    }
    json.dump(out, sys.stdout, indent=1, default=float)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
