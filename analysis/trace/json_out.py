"""The JSON documents ``gpulens analyze --json`` prints (documented in docs/analyze-json.md).

Every document has ``schema_version`` (this module's :data:`SCHEMA_VERSION`),
``schema_minor`` (:data:`SCHEMA_MINOR`) and ``kind``: "trace" (one file),
"ranks" (several ranks) or "diff". Adding fields bumps ``schema_minor``
(readers of an older minor keep working); renaming or removing one, or
changing its meaning or unit, bumps ``schema_version``.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from gpulens.analysis.trace.rank_report import RankReport, TimeSplit
from gpulens.analysis.trace.summary import TraceSummary, to_dict

if TYPE_CHECKING:  # the diff and ranks modules pull in the whole analysis; JSON needs only their records
    from gpulens.analysis.trace.diff import Delta, TraceDiff
    from gpulens.analysis.trace.late_arrival import LateArrival
    from gpulens.analysis.trace.ranks import RanksReport
    from gpulens.analysis.trace.stragglers import Straggler, StragglerRule

SCHEMA_VERSION = 1
SCHEMA_MINOR = 2
"""1: ``late_arrival`` in "ranks" (HTA's late-arrival stragglers), ``schema_minor`` itself.
2: the straggler rule with a noise model (issue #32): ``straggler_rule`` in "ranks"; ``kind``, ``ratio``,
``data_delta_ms``, ``others_wait_ms``, ``held_back``, ``threshold_ms``, ``noise_ms``, ``step_pct`` and
``steps`` in each straggler."""


def trace_json(summary: TraceSummary) -> dict[str, Any]:
    """One trace file's summary."""
    return {"schema_version": SCHEMA_VERSION, "schema_minor": SCHEMA_MINOR, "kind": "trace", **to_dict(summary)}


def _split(s: TimeSplit | None) -> dict[str, float] | None:
    return None if s is None else {f: getattr(s, f) for f in TimeSplit.__slots__}


def rank_json(r: RankReport) -> dict[str, Any]:
    """One rank (also each side of a diff)."""
    gpu = None
    if r.gpu is not None:
        gpu = asdict(r.gpu)
        gpu["idle_us"] = r.gpu.idle_us
    return {
        "rank": r.rank,
        "rank_source": r.rank_source,
        "path": r.path,
        "events": r.events,
        "size_bytes": r.size_bytes,
        "basis": r.basis,
        "step_source": r.steps.source,
        "step_marker": r.steps.marker,
        "step_times_ms": list(r.step_times_ms),
        "mean_step_ms": r.mean_step_ms,
        "split": _split(r.split),
        "per_step": _split(r.per_step),
        "overlap_pct": r.overlap_pct,
        "overlap_note": r.overlap_note,
        "collective_cpu_us": r.collective_cpu_us,
        "collective_cpu_calls": r.collective_cpu_calls,
        "comm_kernels": r.comm_kernels,
        "gpu": gpu,
        "top_kernels": [asdict(k) for k in r.top_kernels],
        "devices": list(r.devices),
    }


def ranks_json(rep: RanksReport) -> dict[str, Any]:
    """A multi-rank analysis."""
    sp = rep.spread
    spread = None
    if sp is not None:
        spread = {**asdict(sp), "spread_ms": sp.spread_ms, "spread_pct": sp.spread_pct}
    return {
        "schema_version": SCHEMA_VERSION,
        "schema_minor": SCHEMA_MINOR,
        "kind": "ranks",
        "threshold_pct": rep.threshold_pct,
        "ranks": [rank_json(r) for r in rep.ranks],
        "spread": spread,
        "stragglers": [straggler_json(s) for s in rep.stragglers],
        "straggler_rule": rule_json(rep.rule) if rep.rule is not None else None,
        "late_arrival": late_json(rep.late) if rep.late is not None else None,
    }


def _finite(v: object) -> object:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def straggler_json(s: Straggler) -> dict[str, Any]:
    """One straggler: its fields, ``ratio``, and null for a share of a zero figure (never Infinity)."""
    return {k: _finite(v) for k, v in {**asdict(s), "ratio": s.ratio}.items()}


def rule_json(rule: StragglerRule) -> dict[str, Any]:
    """How the straggler rule ran: ranks, steps, the noise per part and the thresholds."""
    return {
        "method": "per-step medians against the other ranks', threshold from the step-to-step noise (issue #32)",
        "note": rule.note,
        "ranks": rule.ranks,
        "steps": rule.steps,
        "noise_measured": rule.noise_measured,
        "median_step_ms": rule.median_step_ms,
        "floor_ms": rule.floor_ms,
        "threshold_pct": rule.threshold_pct,
        "metrics": [{"metric": m.metric, "noise_ms": m.noise_ms, "threshold_ms": m.threshold_ms}
                    for m in rule.metrics],
    }


def late_json(la: LateArrival) -> dict[str, Any]:
    """HTA's late-arrival stragglers (``note`` set and the rest null/empty when it could not run)."""
    ran = not la.note
    return {
        "method": "HTA get_potential_stragglers: late start of the NCCL kernel whose duration varies most",
        "note": la.note,
        "candidates": la.candidates,
        "include_last_step": la.include_last_step,
        "stragglers": list(la.stragglers),
        "kernel": la.kernel if ran else None,
        "stream": la.stream if ran else None,
        "iterations": list(la.iterations),
        "mean_iter_us": la.mean_iter_us if ran else None,
        "min_duration_us": la.min_duration_us if ran else None,
        "ranks": [
            {"rank": r.rank, "flagged_steps": r.flagged, "normalized_starts": list(r.starts),
             "late_ms": list(r.late_ms), "mean_late_ms": r.mean_late_ms}
            for r in la.ranks
        ],
    }


def _delta(d: Delta) -> dict[str, Any]:
    return {
        "name": d.name,
        "status": d.status,
        "calls_a": d.calls_a,
        "calls_b": d.calls_b,
        "calls_delta": d.calls_delta,
        "time_a_us": d.time_a_us,
        "time_b_us": d.time_b_us,
        "time_delta_us": d.time_delta_us,
        "time_delta_pct": d.time_delta_pct,
        "total_a_us": d.total_a_us,
        "total_b_us": d.total_b_us,
    }


def diff_json(d: TraceDiff) -> dict[str, Any]:
    """A comparison of two traces (B - A)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "schema_minor": SCHEMA_MINOR,
        "kind": "diff",
        "scale": d.scale,
        "a": rank_json(d.a),
        "b": rank_json(d.b),
        "mean_step_delta_ms": d.mean_step_delta_ms,
        "self_cpu_total_a_us": d.self_cpu_total_a_us,
        "self_cpu_total_b_us": d.self_cpu_total_b_us,
        "ops": [_delta(x) for x in d.ops],
        "kernels": [_delta(x) for x in d.kernels],
        "new_ops": list(d.new("ops")),
        "vanished_ops": list(d.vanished("ops")),
        "new_kernels": list(d.new("kernels")),
        "vanished_kernels": list(d.vanished("kernels")),
    }
