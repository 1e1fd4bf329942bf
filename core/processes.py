"""The host process table's rules, shared by the agent's ``processes`` request and the in-process source.

Pure functions: GPU memory per pid from a sample, the table's order, and
the shape of an answer (``{"processes": [JobInfo dicts], "total": n,
"hidden": n}``), so both ways to the table give the same rows.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpulens.core.model import HostSample, JobInfo

DEFAULT_ROWS = 500
"""Rows an answer carries unless the asker says otherwise."""
MAX_ROWS = 5000
"""Rows an answer carries at most."""


def gpu_memory(sample: HostSample | None) -> dict[int, dict[str, int]]:
    """pid -> GPU index (as a string) -> bytes, from a sample's GPU process lists."""
    out: dict[int, dict[str, int]] = {}
    for g in sample.gpus if sample is not None else ():
        for p in g.processes:
            if p.used_memory_bytes is not None:
                per = out.setdefault(p.pid, {})
                per[str(g.index)] = per.get(str(g.index), 0) + p.used_memory_bytes
    return out


def order(rows: Iterable[JobInfo]) -> list[JobInfo]:
    """GPU processes first (most GPU memory first), then by CPU %, then by pid."""
    return sorted(rows, key=lambda r: (-sum(r.gpu_mem_bytes.values()), -(r.cpu_percent or 0.0), r.pid))
