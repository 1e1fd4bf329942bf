"""Who holds each GPU, in the few cells a heatmap row label has: ``vllm-0`` (a pod), ``slurm 4242``.

The kubelet's allocation (``GpuSample.allocated``) names the pod a GPU was
given; else the first workload (pod, Slurm job, container) of a process with
memory on it. Read once per host sample, never per row repaint.
"""

from __future__ import annotations

from gpulens.core.model import HostSample, Workload

HOLDER_CELLS = 11
"""Cells a holder takes in a heatmap row label (ten and a space)."""


def _short(w: Workload) -> str:
    if w.pod is not None:
        return w.pod
    if w.pod_uid is not None:
        return f"pod {w.pod_uid[:6]}"
    if w.slurm_job is not None:
        return f"slurm {w.slurm_job}"
    if w.container_id is not None:
        return f"ctr {w.container_id[:6]}"
    return ""


def holders(sample: HostSample | None) -> dict[int, str]:
    """GPU index -> the short name of what holds it (GPUs held by nothing known are absent)."""
    if sample is None:
        return {}
    out: dict[int, str] = {}
    for g in sample.gpus:
        if g.allocated is not None and (name := _short(g.allocated)):
            out[g.index] = name
    for j in sample.jobs:
        if j.workload is None or not j.gpu_mem_bytes:
            continue
        name = _short(j.workload)
        if not name:
            continue
        for index in j.gpu_mem_bytes:
            if index.isdigit():
                out.setdefault(int(index), name)
    return out


def fit(name: str) -> str:
    """``name`` in :data:`HOLDER_CELLS` cells (cut with ``…``)."""
    width = HOLDER_CELLS - 1
    text = name if len(name) <= width else name[: width - 1] + "…"
    return f"{text:<{width}} "
