"""The kubelet's answer joined onto one sample: which pod and container each GPU was given, and
container names for the processes of single-container pods.

GPUs: a GPU gets ``GpuSample.allocated``, with ``found_by="kubelet"`` (as
dcgm-exporter labels it), when a container's ``nvidia.com/gpu`` /
``amd.com/gpu`` / ``nvidia.com/mig-*`` device ids name it: its UUID, a
time-sliced replica ``<uuid>::<n>`` of it, or one of its MIG devices (the
device plugin's ids are MIG UUIDs, ``MIG-…``, under ``nvidia.com/mig-<profile>``
in its "mixed" strategy and under ``nvidia.com/gpu`` in its "single" one; the
NVML collector's ``mig_parents`` says which GPU each is part of; older drivers'
``MIG-GPU-<uuid>/<gi>/<ci>`` names its GPU itself). Device ids that name no GPU
read here (another node's, made up, a MIG device NVML did not list) are
ignored, and counted in a note. A GPU given to containers of more than one pod
(time-sliced replicas, or MIG devices of one GPU given to different pods) is
labelled by none of them: ``allocated`` stays None, the GPU's
``unavailable["allocated"]`` names every pod (and its MIG devices), and the
host's ``kubelet.shared`` note counts them.

Processes: the kubelet sends neither pod UIDs nor container ids, and a
process is known by its pod's UID and its container's id (its cgroup). A
pod named (from ``/var/log/pods``) as one the kubelet lists is the same pod;
if it has exactly one container, its processes are in that container. In a
pod of several containers nothing ties a container id to a container name,
so those processes' ``container`` stays None.
"""

from __future__ import annotations

import re
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
MAX_HOLDERS = 8
"""Pods named in a shared GPU's ``unavailable["allocated"]``."""
MAX_SHOWN = 64
"""Characters of a name or device id shown in a note."""
_LEGACY_MIG = re.compile(r"MIG-(GPU-[0-9A-Fa-f-]{1,64})/[0-9]{1,3}/[0-9]{1,3}")
"""A MIG device id of drivers before R470: ``MIG-GPU-<uuid>/<gpu instance>/<compute instance>``."""


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


def _gpu_of(device: str, uuids: set[str], mig: Mapping[str, str]) -> str | None:
    """The UUID of the GPU read here that a device id (replica suffix removed) names, or None."""
    if device in uuids:
        return device
    parent = mig.get(device)
    if parent is None and (legacy := _LEGACY_MIG.fullmatch(device)) is not None:
        parent = legacy[1]
    return parent if parent in uuids else None


def _foreign_ids(reading: PodResourcesReading, uuids: set[str], mig: Mapping[str, str]) -> list[str]:
    """The GPU device ids the kubelet names (allocated or allocatable) that are no GPU read here."""
    ids = list(reading.gpu_claims)
    for group in reading.allocatable or ():
        if is_gpu_resource(group.resource):
            ids += [device_key(d) for d in group.ids]
    return sorted({d for d in ids if _gpu_of(d, uuids, mig) is None})


def _holders(given: Sequence[tuple[str, GpuClaim]], uuid: str) -> str:
    """Every pod given (part of) one GPU, with the MIG devices it holds: ``ns/pod/container (MIG-…)``."""
    held: dict[tuple[str, str, str | None], list[str]] = {}
    for device, c in given:
        devices = held.setdefault((c.namespace, c.pod, c.container), [])
        if device != uuid and device not in devices:
            devices.append(device)
    pods = {(ns, pod) for ns, pod, _ in held}
    shown = []
    for (ns, pod, container), devices in list(held.items())[:MAX_HOLDERS]:
        name = "/".join(n[:MAX_SHOWN] for n in (ns, pod, container) if n is not None)
        shown.append(f"{name} ({', '.join(d[:MAX_SHOWN] for d in devices)})" if devices else name)
    more = f", and {len(held) - MAX_HOLDERS} more" if len(held) > MAX_HOLDERS else ""
    how = "MIG devices of it" if any(device != uuid for device, _ in given) else "time-sliced replicas"
    return f"given to {len(pods)} pods ({how}), so labelled by none: {', '.join(shown)}{more}"


def attach(
    gpus: Sequence[GpuSample],
    jobs: Sequence[JobInfo],
    reading: PodResourcesReading,
    pod_names: Mapping[str, tuple[str, str]],
    mig: Mapping[str, str] | None = None,
) -> tuple[tuple[GpuSample, ...], tuple[JobInfo, ...], dict[str, str]]:
    """``gpus`` with ``allocated`` set, ``jobs`` with container names where one is sure, and the notes
    (``unavailable`` keys ``kubelet``, ``kubelet.devices``, ``kubelet.shared``) for the sample.

    ``pod_names``: pod UID -> (namespace, name), from ``/var/log/pods`` (``collectors.workloads.PodNames``);
    ``mig``: MIG device UUID -> its GPU's UUID (``GpuReading.mig_parents``).
    """
    notes: dict[str, str] = {}
    in_pods = any(j.workload is not None and j.workload.pod_uid is not None for j in jobs)
    if reading.why is not None and (not reading.absent or in_pods):
        notes["kubelet"] = reading.why  # a node without a kubelet, and no pods: nothing to say
    if reading.note is not None:
        notes["kubelet.note"] = reading.note
    if reading.why is not None:
        return tuple(gpus), tuple(jobs), notes
    uuids = {g.uuid for g in gpus if g.uuid}
    parents = mig or {}
    out_gpus, shared = _label_gpus(gpus, _claims_by_gpu(reading, uuids, parents), _uid_by_name(pod_names))
    if shared:
        notes["kubelet.shared"] = (f"GPUs given to several pods (time-slicing, or MIG devices of one GPU) are "
                                   f"labelled by none: {', '.join(shared[:8])}")
    foreign = _foreign_ids(reading, uuids, parents)
    if foreign:
        shown = ", ".join(repr(d[:MAX_SHOWN]) for d in foreign[:MAX_EXAMPLES])
        notes["kubelet.devices"] = (f"{len(foreign)} kubelet GPU device ids name no GPU read here (another "
                                    f"node's, a MIG device NVML did not list, or no UUID): ignored, e.g. {shown}")
    single = {(p.namespace, p.name): p.containers[0].name for p in reading.pods if len(p.containers) == 1}
    out_jobs = [_named(j, single) for j in jobs]
    return tuple(out_gpus), tuple(out_jobs), notes


def _claims_by_gpu(reading: PodResourcesReading, uuids: set[str],
                   parents: Mapping[str, str]) -> dict[str, list[tuple[str, GpuClaim]]]:
    """GPU UUID -> (device id, container given it), a MIG device counted for its GPU."""
    given_to: dict[str, list[tuple[str, GpuClaim]]] = {}
    for device, holders in reading.gpu_claims.items():
        gpu = _gpu_of(device, uuids, parents)
        if gpu is not None:
            given_to.setdefault(gpu, []).extend((device, c) for c in holders)
    return given_to


def _label_gpus(gpus: Sequence[GpuSample], given_to: Mapping[str, list[tuple[str, GpuClaim]]],
                uid: Mapping[tuple[str, str], str]) -> tuple[list[GpuSample], list[str]]:
    """Each GPU with the one pod given it (``allocated``), or why none is named; and the GPUs shared by several."""
    shared: list[str] = []
    out: list[GpuSample] = []
    for g in gpus:
        pairs = given_to.get(g.uuid, []) if g.uuid else []
        claims = list(dict.fromkeys(c for _, c in pairs))
        given = _given(claims, uid) if claims else None
        if given is not None:
            out.append(replace(g, allocated=given))
        elif claims:
            on_mig = " on MIG devices" if any(d != g.uuid for d, _ in pairs) else ""
            shared.append(f"GPU {g.index}: {len({(c.namespace, c.pod) for c in claims})} pods{on_mig}")
            out.append(replace(g, unavailable={**g.unavailable, "allocated": _holders(pairs, g.uuid)}))
        else:
            out.append(g)
    return out, shared


def _named(j: JobInfo, single: Mapping[tuple[str, str], str | None]) -> JobInfo:
    w = j.workload
    if w is None or w.pod is None or w.namespace is None or w.container is not None:
        return j
    container = single.get((w.namespace, w.pod))
    return j if container is None else replace(j, workload=replace(w, container=container))
