"""Where a process runs: its container, Kubernetes pod and Slurm job, from text the kernel gives.

Pure functions over the bytes of ``/proc/PID/cgroup``, ``/proc/PID/status``
and ``/proc/PID/environ`` (the collector reads them, once per process and
start time); no I/O here. The cgroup path shapes are the runtimes' own:

=====================  ==================================================================
cgroup v2, systemd     ``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID
                       with _>.slice/cri-containerd-<64 hex>.scope`` (``crio-``, ``docker-``,
                       ``libpod-`` for CRI-O, Docker and Podman); guaranteed pods have no QoS
                       slice (``kubepods-pod<UID>.slice``)
cgroup v1 / cgroupfs   ``/kubepods/<qos>/pod<UID>/<64 hex>``, ``/kubepods/pod<UID>/<id>``,
                       ``/docker/<64 hex>``
Slurm                  v1 ``/slurm/uid_U/job_J/step_S/task_N`` (``/slurm_<node>/…`` where slurmd
                       is built for several per host, as Debian's is; its freezer line stops
                       at the step, devices and memory name the task); v2
                       ``…/[<node>_]slurmstepd.scope/job_J/step_S/user/task_N``
=====================  ==================================================================

Every line of the file is tried, the unified (v2) one first; the first
container, pod or Slurm match of each kind wins. A malformed line is
skipped, never an error: a process's attribution is a label, and the rest
of the sample stands without it. What this module cannot know (pod name,
namespace and container name) comes from the kubelet or ``/var/log/pods``
(:func:`pod_log_dirs`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace

from gpulens.core.model import Text, Workload
from gpulens.core.sanitize import clean_text

__all__ = ["Workload", "describe", "from_cgroup", "from_environ", "ns_pid", "pod_log_dirs", "workload_key", "workload_of"]

MAX_CGROUP_BYTES = 16 * 1024
"""Read at most this much of ``/proc/PID/cgroup`` (a real one is a few hundred bytes)."""

_RUNTIMES = {"cri-containerd": "containerd", "docker": "docker", "crio": "cri-o", "libpod": "podman"}
_SCOPE = re.compile(r"(?:^|/)(cri-containerd|docker|crio|libpod)-([0-9a-f]{64})\.scope(?:/|$)")
_V1_DOCKER = re.compile(r"(?:^|/)docker/([0-9a-f]{64})(?:/|$)")
_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?(?:/|$)")
_POD_CONTAINER = re.compile(r"/pod[0-9a-f_-]{36}(?:\.slice)?/(?:[a-z-]+-)?([0-9a-f]{64})(?:\.scope)?(?:/|$)")
_QOS = re.compile(r"kubepods[-/](burstable|besteffort)")
_SLURM = re.compile(r"(?:^|/)(?:slurm(?:_[^/]{1,64})?|(?:[^/]{1,64}_)?slurmstepd\.scope)/(?:uid_\d+/)?job_(\d{1,12})"
                    r"(?:/step_([a-z0-9_]{1,24}))?(?:/user)?(?:/task_(\d{1,9}))?(?:/|$)")
"""``/slurm`` or, built with multiple slurmd (Debian's), ``/slurm_<node>`` (v1); ``slurmstepd.scope`` or
``<node>_slurmstepd.scope`` (v2)."""
_SLURM_VARS = {b"SLURM_JOB_ID": "slurm_job", b"SLURM_STEP_ID": "slurm_step", b"SLURM_LOCALID": "slurm_task",
               b"SLURM_JOB_GPUS": "slurm_gpus", b"CUDA_VISIBLE_DEVICES": "visible_gpus"}
_SLURM_VALUE = re.compile(r"[A-Za-z0-9_.,:-]{1,256}")
_LOG_DIR = re.compile(r"([a-z0-9][a-z0-9-]{0,62})_([a-z0-9][a-z0-9.-]{0,252})_([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-"
                      r"[0-9a-f]{4}-[0-9a-f]{12})")


def _paths(cgroup: bytes) -> list[str]:
    """The cgroup paths of ``/proc/PID/cgroup``, the unified (``0::``) one first; malformed lines skipped."""
    unified: list[str] = []
    others: list[str] = []
    for raw in cgroup[:MAX_CGROUP_BYTES].splitlines():
        parts = raw.split(b":", 2)
        if len(parts) != 3 or not parts[2].startswith(b"/"):
            continue
        path = parts[2].decode("utf-8", "replace")
        (unified if parts[0] == b"0" and parts[1] == b"" else others).append(path)
    return unified + others


def from_cgroup(cgroup: bytes) -> Workload:
    """Container, pod and Slurm step named by a process's cgroup paths (all None when none is)."""
    found: dict[str, str | None] = {}
    for path in _paths(cgroup):
        if "container_id" not in found:
            if (m := _SCOPE.search(path)) is not None:
                found.update(runtime=_RUNTIMES[m.group(1)], container_id=m.group(2))
            elif (m := _V1_DOCKER.search(path)) is not None:
                found.update(runtime="docker", container_id=m.group(1))
            elif (m := _POD_CONTAINER.search(path)) is not None:
                found.update(runtime="cri", container_id=m.group(1))
        if "pod_uid" not in found and (m := _POD.search(path)) is not None and "kubepods" in path:
            qos = _QOS.search(path)
            found.update(pod_uid=m.group(1).replace("_", "-"), qos=qos.group(1) if qos else "guaranteed")
        if (m := _SLURM.search(path)) is not None:
            if "slurm_job" not in found:
                found.update(slurm_job=m.group(1), slurm_step=m.group(2), slurm_task=m.group(3))
            elif found["slurm_job"] == m.group(1) and found["slurm_step"] == m.group(2) and found["slurm_task"] is None:
                found["slurm_task"] = m.group(3)  # v1 freezer stops at the step; devices and memory name the task
    if not found:
        return Workload()
    return Workload(**found, found_by="cgroup")  # type: ignore[arg-type]


def from_environ(environ: bytes) -> Workload:
    """Slurm's job, step, task and GPUs from a process's environment (``KEY=value\\0`` …)."""
    found: dict[str, str] = {}
    for var in environ.split(b"\0"):
        key, eq, value = var.partition(b"=")
        field = _SLURM_VARS.get(key)
        if field is None or not eq:
            continue
        text = value.decode("utf-8", "replace")
        if _SLURM_VALUE.fullmatch(text):
            found[field] = text
    if "slurm_job" not in found:
        return Workload(visible_gpus=found.get("visible_gpus"))
    return Workload(**found, found_by="environ")  # type: ignore[arg-type]


def ns_pid(status: bytes) -> int | None:
    """The pid inside the process's innermost PID namespace (``NSpid:``), when it differs from the host's."""
    for line in status.splitlines():
        if line.startswith(b"NSpid:"):
            pids = line.split()[1:]
            if len(pids) < 2:
                return None
            try:
                return int(pids[-1])
            except ValueError:
                return None
    return None


def workload_of(cgroup: bytes, status: bytes, environ: bytes | None) -> Workload:
    """One process's attribution: cgroup first, the environment for what the cgroup does not say."""
    got = from_cgroup(cgroup)
    env = from_environ(environ) if environ is not None else Workload()
    if got.slurm_job is None and env.slurm_job is not None:
        got = replace(got, slurm_job=env.slurm_job, slurm_step=env.slurm_step, slurm_task=env.slurm_task,
                      found_by=got.found_by or "environ")
    elif got.slurm_job is not None and got.slurm_job == env.slurm_job and got.slurm_task is None:
        got = replace(got, slurm_task=env.slurm_task)
    return replace(got, slurm_gpus=env.slurm_gpus, visible_gpus=env.visible_gpus, ns_pid=ns_pid(status))


def workload_key(w: Workload | None) -> str | None:
    """The job key a workload gives (one row per Slurm job or pod, over hosts): ``SLURM_JOB_ID=J`` or ``pod=UID``.

    ``SLURM_JOB_ID=J`` is the key ``job_key_env`` gives a process that exports it, so both ways agree.
    """
    if w is None:
        return None
    if w.slurm_job is not None:
        return f"SLURM_JOB_ID={w.slurm_job}"
    if w.pod_uid is not None:
        return f"pod={w.pod_uid}"
    return None


def pod_log_dirs(names: Iterable[str]) -> dict[str, tuple[str, str]]:
    """pod UID -> (namespace, pod name) from ``/var/log/pods`` entries (``<namespace>_<pod>_<uid>``)."""
    out: dict[str, tuple[str, str]] = {}
    for name in names:
        m = _LOG_DIR.fullmatch(name)
        if m is not None:
            out[m.group(3)] = (m.group(1), m.group(2))
    return out


def with_pod_names(w: Workload, pods: Mapping[str, tuple[str, str]]) -> Workload:
    """``w`` with its pod's namespace and name when ``pods`` knows its UID (names cleaned)."""
    if w.pod_uid is None or w.pod_uid not in pods:
        return w
    namespace, pod = pods[w.pod_uid]
    return replace(w, namespace=_text(namespace), pod=_text(pod))


def _text(value: str) -> Text:
    return clean_text(value[:253])


def describe(w: Workload | None, *, short: bool = False) -> str:
    """``pod llm-serving/vllm-0``, ``slurm 4242.0 task 1``, ``docker 1a2b3c4d5e6f`` (``-``: none known).

    ``short`` (a table cell) leaves out the step, task, namespace and inner pid: ``pod vllm-0``, ``slurm 4242``.
    """
    if w is None:
        return "-"
    parts: list[str] = []
    if w.slurm_job is not None:
        step = "" if short or w.slurm_step is None else f".{w.slurm_step}"
        task = "" if short or w.slurm_task is None else f" task {w.slurm_task}"
        parts.append(f"slurm {w.slurm_job}{step}{task}")
    if w.pod_uid is not None or w.pod is not None:  # the kubelet's GPU allocation names a pod, not its UID
        if w.pod is None:
            name = f"uid {(w.pod_uid or '')[:8]}…"
        else:  # a table cell names the pod; the namespace is in the long form
            name = w.pod if short else f"{w.namespace}/{w.pod}"
        parts.append(f"pod {name}" + ("" if short or w.container is None else f" container {w.container}"))
    elif w.container_id is not None:
        parts.append(f"{w.runtime or 'container'} {w.container_id[:12]}")
    if not short and w.ns_pid is not None:
        parts.append(f"pid {w.ns_pid} inside")
    return ", ".join(parts) or "-"
