"""The kubelet's PodResources answer as gpulens keeps it: frozen, cleaned, bounded.

The kubelet's ``List`` names every pod of the node (namespace, name), its
containers and the device ids each container was given per resource
(``nvidia.com/gpu`` ids are GPU UUIDs, ``nvidia.com/mig-<profile>`` ids MIG
UUIDs; a time-sliced replica is ``<uuid>::<n>``). The answer is a label
source only: every name is cleaned (:func:`~gpulens.core.sanitize.clean_text`)
and cut to :data:`MAX_NAME` characters, and every count is cut to a bound;
what was cut is said in :attr:`PodResourcesReading.note`. No I/O here
(``collectors.kubelet.client`` asks the kubelet).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpulens.core.sanitize import clean_text

if TYPE_CHECKING:
    from gpulens.collectors.kubelet.proto import api_pb2

MAX_NAME = 253
"""Longest name kept (a Kubernetes object name is at most 253 characters)."""
MAX_RAW_NAME = 4096
"""Characters of a name looked at before cleaning (a longer one is cut first)."""
MAX_PODS = 1024
"""Pods kept of one answer (a node runs at most a few hundred: the kubelet's max-pods is 110 by default)."""
MAX_CONTAINERS = 128
"""Containers kept per pod."""
MAX_RESOURCES = 32
"""Device resources kept per container."""
MAX_IDS = 256
"""Device ids kept per resource of one container (8 GPUs, 56 MIG slices, time-sliced replicas)."""
MAX_TOTAL_IDS = 16_384
"""Device ids kept over the whole answer."""
GPU_RESOURCES = frozenset({"nvidia.com/gpu", "amd.com/gpu"})
"""Device plugin resources whose ids name GPUs (also ``nvidia.com/mig-*`` and renamed ``nvidia.com/gpu.*``)."""


def is_gpu_resource(name: str) -> bool:
    """Whether the device ids of resource ``name`` name GPUs or MIG instances."""
    return name in GPU_RESOURCES or name.startswith(("nvidia.com/mig-", "nvidia.com/gpu."))


def device_key(device_id: str) -> str:
    """The GPU a device id names: a time-sliced replica ``<uuid>::<n>`` is its GPU ``<uuid>``."""
    return device_id.split("::", 1)[0]


@dataclass(frozen=True, slots=True)
class KubeletDevices:
    """The device ids one container (or the node, for allocatable ones) has of one resource."""

    resource: str
    ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class KubeletContainer:
    """One container of a pod and the devices it was given (``name`` None: the kubelet sent none)."""

    name: str | None
    devices: tuple[KubeletDevices, ...] = ()


@dataclass(frozen=True, slots=True)
class KubeletPod:
    """One pod the kubelet runs (it sends no pod UID and no container ids)."""

    namespace: str
    name: str
    containers: tuple[KubeletContainer, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuClaim:
    """One container given a GPU (or MIG instance, or a replica of it) by the kubelet."""

    namespace: str
    pod: str
    container: str | None


@dataclass(frozen=True, slots=True)
class PodResourcesReading:
    """One answer of the kubelet (or why there is none)."""

    pods: tuple[KubeletPod, ...] = ()
    allocatable: tuple[KubeletDevices, ...] | None = None
    """The node's GPU device ids (``GetAllocatableResources``); None: not answered."""
    gpu_claims: Mapping[str, tuple[GpuClaim, ...]] = field(default_factory=dict)
    """GPU (or MIG) UUID -> the containers given it, from :attr:`pods`."""
    why: str | None = None
    """Why the kubelet was not read (then :attr:`pods` is empty), or None."""
    note: str | None = None
    """What of the answer was cut or left out, or that it is an older answer; None: nothing."""
    absent: bool = False
    """True when there is no socket at all (a node without a kubelet)."""


def name_of(raw: str) -> str:
    """A kubelet-sent name as gpulens keeps it: control sequences removed, at most :data:`MAX_NAME` characters."""
    return clean_text(raw[:MAX_RAW_NAME]).strip()[:MAX_NAME]


class _Budget:
    """Counts what was cut of one answer."""

    def __init__(self) -> None:
        self.ids_left = MAX_TOTAL_IDS
        self.cut: dict[str, int] = {}

    def take(self, what: str, items: Iterable[str], limit: int) -> list[str]:
        out: list[str] = []
        dropped = 0
        for item in items:
            if len(out) < min(limit, self.ids_left):
                out.append(item)
            else:
                dropped += 1
        self.ids_left -= len(out)
        if dropped:
            self.cut[what] = self.cut.get(what, 0) + dropped
        return out

    def count(self, what: str, n: int) -> None:
        if n > 0:
            self.cut[what] = self.cut.get(what, 0) + n

    def note(self) -> str | None:
        if not self.cut:
            return None
        return "kubelet PodResources answer cut: " + ", ".join(f"{n} {what}" for what, n in sorted(self.cut.items()))


def _devices(groups: Iterable[api_pb2.ContainerDevices], budget: _Budget) -> tuple[KubeletDevices, ...]:
    out: list[KubeletDevices] = []
    for i, group in enumerate(groups):
        if i >= MAX_RESOURCES:
            budget.count("device resources over the limit", 1)
            continue
        resource = name_of(group.resource_name)
        ids = budget.take("device ids over the limit", group.device_ids, MAX_IDS)
        out.append(KubeletDevices(resource, tuple(filter(None, map(name_of, ids)))))
    return tuple(out)


def pods_of(answer: api_pb2.ListPodResourcesResponse) -> tuple[tuple[KubeletPod, ...], str | None]:
    """The pods of a ``List`` answer, cleaned and bounded, and what was cut (None: nothing)."""
    budget = _Budget()
    pods: list[KubeletPod] = []
    seen: set[tuple[str, str]] = set()
    for i, pod in enumerate(answer.pod_resources):
        if i >= MAX_PODS:
            budget.count(f"pods over {MAX_PODS}", len(answer.pod_resources) - MAX_PODS)
            break
        namespace, name = name_of(pod.namespace), name_of(pod.name)
        if not namespace or not name or (namespace, name) in seen:
            budget.count("pods without a name or named twice", 1)
            continue
        seen.add((namespace, name))
        containers: list[KubeletContainer] = []
        for j, c in enumerate(pod.containers):
            if j >= MAX_CONTAINERS:
                budget.count(f"containers over {MAX_CONTAINERS} in a pod", len(pod.containers) - MAX_CONTAINERS)
                break
            containers.append(KubeletContainer(name_of(c.name) or None, _devices(c.devices, budget)))
        pods.append(KubeletPod(namespace, name, tuple(containers)))
    return tuple(pods), budget.note()


def allocatable_of(answer: api_pb2.AllocatableResourcesResponse) -> tuple[KubeletDevices, ...]:
    """The node's GPU device groups of a ``GetAllocatableResources`` answer (other resources left out)."""
    budget = _Budget()
    return tuple(d for d in _devices(answer.devices, budget) if is_gpu_resource(d.resource))


def gpu_claims(pods: Iterable[KubeletPod]) -> dict[str, tuple[GpuClaim, ...]]:
    """GPU (or MIG) UUID -> the containers given it (several: a time-sliced GPU's replicas, or a lie)."""
    out: dict[str, list[GpuClaim]] = {}
    for pod in pods:
        for c in pod.containers:
            claim = GpuClaim(pod.namespace, pod.name, c.name)
            for group in c.devices:
                if is_gpu_resource(group.resource):
                    for device in group.ids:
                        claims = out.setdefault(device_key(device), [])
                        if claim not in claims:
                            claims.append(claim)
    return {k: tuple(v) for k, v in out.items()}
