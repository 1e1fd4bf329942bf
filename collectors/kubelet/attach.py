"""The kubelet's answer joined onto one sample: which pod and container each GPU was given, and
container names for the processes of single-container pods.

GPUs: a GPU whose UUID (or a time-sliced replica ``<uuid>::<n>`` of it) is
among a container's ``nvidia.com/gpu`` / ``amd.com/gpu`` (or
``nvidia.com/mig-*``) device ids gets ``GpuSample.allocated``, with
``found_by="kubelet"``, as dcgm-exporter labels it. Device ids that name no
GPU read here (another node's, made up, or MIG instances, which the GPU
collector does not list) are ignored, and counted in a note. A GPU given to
containers of more than one pod (time-slicing) is labelled by none of them.

Processes: the kubelet sends neither pod UIDs nor container ids, and a
process is known by its pod's UID and its container's id (its cgroup). A
pod named (from ``/var/log/pods``) as one the kubelet lists is the same pod;
if it has exactly one container, its processes are in that container. In a
pod of several containers nothing ties a container id to a container name,
so those processes' ``container`` stays None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from gpulens.collectors.kubelet.podresources import (
    GpuClaim,
    PodResourcesReading,
    device_key,
    is_gpu_resource,
)
from gpulens.core.model import GpuSample, JobInfo, Workload

MAX_EXAMPLES = 3
"""Device ids named in the note about ids that are no GPU of this node."""


def _uid_by_name(pod_names: Mapping[str, tuple[str, str]]) -> dict[tuple[str, str], str]:
    """(namespace, pod) -> UID, for names only one UID has (a pod recreated under its name has two for a while)."""
    out: dict[tuple[str, str], str] = {}
    twice: set[tuple[str, str]] = set()
    for uid, name in pod_names.items():
        if name in out:
            twice.add(name)
        out[name] = uid
    for name in twice:
        del out[name]
    return out


def _given(claims: Sequence[GpuClaim], uid: Mapping[tuple[str, str], str]) -> Workload | None:
    pods = {(c.namespace, c.pod) for c in claims}
    if len(pods) != 1:
        return None
    ((namespace, pod),) = pods
    containers = {c.container for c in claims}
    container = next(iter(containers)) if len(containers) == 1 else None
    return Workload(pod_uid=uid.get((namespace, pod)), namespace=namespace, pod=pod, container=container,
                    found_by="kubelet")


def _foreign_ids(reading: PodResourcesReading, uuids: set[str]) -> list[str]:
    """The GPU device ids the kubelet names (allocated or allocatable) that are no GPU read here."""
    ids = list(reading.gpu_claims)
    for group in reading.allocatable or ():
        if is_gpu_resource(group.resource):
            ids += [device_key(d) for d in group.ids]
    return sorted({d for d in ids if d not in uuids})


def attach(
    gpus: Sequence[GpuSample],
    jobs: Sequence[JobInfo],
    reading: PodResourcesReading,
    pod_names: Mapping[str, tuple[str, str]],
) -> tuple[tuple[GpuSample, ...], tuple[JobInfo, ...], dict[str, str]]:
    """``gpus`` with ``allocated`` set, ``jobs`` with container names where one is sure, and the notes
    (``unavailable`` keys ``kubelet``, ``kubelet.devices``, ``kubelet.shared``) for the sample.

    ``pod_names``: pod UID -> (namespace, name), from ``/var/log/pods`` (``collectors.workloads.PodNames``).
    """
    notes: dict[str, str] = {}
    in_pods = any(j.workload is not None and j.workload.pod_uid is not None for j in jobs)
    if reading.why is not None and (not reading.absent or in_pods):
        notes["kubelet"] = reading.why  # a node without a kubelet, and no pods: nothing to say
    if reading.note is not None:
        notes["kubelet.note"] = reading.note
    if reading.why is not None:
        return tuple(gpus), tuple(jobs), notes
    uid = _uid_by_name(pod_names)
    uuids = {g.uuid for g in gpus}
    shared: list[str] = []
    out_gpus: list[GpuSample] = []
    for g in gpus:
        claims = reading.gpu_claims.get(g.uuid, ())
        given = _given(claims, uid) if claims else None
        if claims and given is None:
            shared.append(f"GPU {g.index}: {len({(c.namespace, c.pod) for c in claims})} pods")
        out_gpus.append(replace(g, allocated=given) if given is not None else g)
    if shared:
        notes["kubelet.shared"] = (f"GPUs given to several pods (time-slicing) are labelled by none: "
                                   f"{', '.join(shared[:8])}")
    foreign = _foreign_ids(reading, uuids)
    if foreign:
        shown = ", ".join(repr(d[:64]) for d in foreign[:MAX_EXAMPLES])
        notes["kubelet.devices"] = (f"{len(foreign)} kubelet GPU device ids name no GPU read here (MIG "
                                    f"instances are not listed, or the ids are no UUIDs): ignored, e.g. {shown}")
    single = {(p.namespace, p.name): p.containers[0].name for p in reading.pods if len(p.containers) == 1}
    out_jobs = [_named(j, single) for j in jobs]
    return tuple(out_gpus), tuple(out_jobs), notes


def _named(j: JobInfo, single: Mapping[tuple[str, str], str | None]) -> JobInfo:
    w = j.workload
    if w is None or w.pod is None or w.namespace is None or w.container is not None:
        return j
    container = single.get((w.namespace, w.pod))
    return j if container is None else replace(j, workload=replace(w, container=container))
