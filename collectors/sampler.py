"""One call, one :class:`~gpulens.core.model.HostSample` of this machine.

:class:`Sampler` owns the host, InfiniBand, perf, job and GPU collectors.
Every collector is primed when the sampler is built, so the first sample
already holds real rates. GPUs come from NVML (NVIDIA) and from the amdgpu
driver's sysfs (AMD, ``collectors.amd``); on a mixed node NVIDIA GPUs keep
their NVML indices and AMD GPUs are numbered after them. A vendor with no GPU
here is no reason by itself: ``unavailable["gpus"]`` says why only when
neither finds one. A collector that cannot run does not stop the
others: its figures are None/empty and the reason goes into
``HostSample.unavailable``. A sample leaves through
:func:`~gpulens.core.sanitize.check_sample`, as a peer's arrives: every
consumer (the TUI, ``gpulens sample``, the agent's stream and ``/metrics``,
recordings) gets printable text and plausible numbers.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol, cast

from gpulens.collectors.host import HostCollector
from gpulens.collectors.infiniband import InfinibandCollector
from gpulens.collectors.jobs import JobScanner
from gpulens.collectors.kubelet import PodResourcesClient, attach
from gpulens.collectors.perf.counters import PerfCollector
from gpulens.collectors.procstat import OncePerTick, ProcFile
from gpulens.collectors.slurm_pidinfo import SlurmPidinfo
from gpulens.collectors.workloads import PodNames
from gpulens.core.jobs_pattern import DEFAULT_JOB_KEY_ENV, DEFAULT_JOB_PATTERN
from gpulens.core.logbook import Failure, call_guarded
from gpulens.core.makers import fast_builder
from gpulens.core.model import CacheSample, GpuSample, HostSample
from gpulens.core.sanitize import check_sample

if TYPE_CHECKING:  # both collectors are imported only when asked for (pynvml is heavy)
    from gpulens.collectors.amd.collector import AmdReading
    from gpulens.collectors.nvml.collector import GpuReading

log = logging.getLogger("gpulens.collectors.sampler")
_INDEX = attrgetter("index")
_host_sample = fast_builder(HostSample, ("host", "time", "cpu", "memory", "network", "storage", "cache", "infiniband",
                                         "gpus", "jobs", "unavailable", "simulated"))
"""``HostSample(*values)`` without its ``__init__`` (core.makers)."""


class GpuReader(Protocol):
    """What the sampler needs of ``gpulens.collectors.nvml.collector.NvmlCollector``."""

    def read(self) -> GpuReading: ...

    def close(self) -> None: ...


class AmdReader(Protocol):
    """What the sampler needs of ``gpulens.collectors.amd.collector.AmdCollector``."""

    def read(self, first_index: int = 0) -> AmdReading: ...

    def close(self) -> None: ...


def gpu_memory_by_pid(gpus: Sequence[GpuSample]) -> dict[int, dict[str, int]]:
    """pid -> GPU index (as a string) -> bytes, from the GPUs' process lists."""
    result: dict[int, dict[str, int]] = {}
    for gpu in gpus:
        for proc in gpu.processes:
            if proc.used_memory_bytes is not None:
                per_gpu = result.setdefault(proc.pid, {})
                key = str(gpu.index)
                per_gpu[key] = per_gpu.get(key, 0) + proc.used_memory_bytes
    return result


def _open_gpus(nvml: object | None, unavailable: dict[str, str]) -> GpuReader | None:
    """``"auto"``: the real NVML; None: disabled; a reader (has ``read``): used as is;
    anything else: a pynvml-like module handed to NvmlCollector."""
    if nvml is None:
        unavailable["gpus"] = "GPU collection disabled"
        return None
    if nvml != "auto" and hasattr(nvml, "read") and hasattr(nvml, "close"):
        return cast(GpuReader, nvml)
    try:
        from gpulens.collectors.nvml.collector import (
            NvmlCollector,  # written alongside; imported lazily (pynvml is heavy)
        )
    except ImportError as err:
        unavailable["gpus"] = f"gpus unavailable: nvml collector missing ({err})"
        return None
    collector = call_guarded(log, "NVML collector start", NvmlCollector,
                             module=None if nvml == "auto" else cast(Any, nvml))
    if isinstance(collector, Failure):
        unavailable["gpus"] = f"NVML collector failed to start: {collector.message}"
        return None
    return collector


def _amd_collector() -> AmdReader:
    from gpulens.collectors.amd.collector import AmdCollector

    return AmdCollector()


def _open_amd(amd: object | None, unavailable: dict[str, str]) -> AmdReader | None:
    """``"auto"``: the amdgpu sysfs collector ($GPULENS_SYSFS_ROOT); None: disabled;
    a reader (has ``read`` and ``close``): used as is."""
    if amd is None:
        unavailable["gpus"] = "GPU collection disabled"
        return None
    if amd != "auto":
        return cast(AmdReader, amd)
    collector = call_guarded(log, "AMD collector start", _amd_collector)  # the AMD path never stops the sampler
    if isinstance(collector, Failure):
        unavailable["gpus"] = f"AMD collector failed to start: {collector}"
        return None
    return collector


class Sampler:
    """Samples this host; not thread-safe (one sampling thread owns it)."""

    def __init__(
        self,
        *,
        hostname: str | None = None,
        job_pattern: str = DEFAULT_JOB_PATTERN,
        job_key_env: Sequence[str] = DEFAULT_JOB_KEY_ENV,
        nvml: object | None = "auto",
        proc: str = "/proc",
        attribute: bool = True,
        kubelet: PodResourcesClient | str | None = "auto",
        amd: object | None = "auto",
        exec_events: bool = True,
    ) -> None:
        """Raises re.error for a bad job pattern (check it first: gpulens.core.config);
        ``proc``: where the job scan reads processes (a fake tree in tests);
        ``attribute``: read each job's container, pod and Slurm job (``collectors.workloads``);
        ``kubelet``: the kubelet's PodResources client (``"auto"``: its default socket, when ``attribute``;
        None: not asked), which names the pod and container each GPU was given (``collectors.kubelet``);
        ``nvml``/``amd``: ``"auto"``, None (off) or a reader (a test double; ``collectors.amd``);
        ``exec_events``: learn exec from the kernel when root may (``collectors.procevents``)."""
        self.host = hostname or socket.gethostname()
        self._static: dict[str, str] = {}
        self._pods = PodNames()
        self._loadavg = OncePerTick(ProcFile("/proc/loadavg", 256)) if proc == "/proc" else None
        """Read once a tick for the host's load average and the job scan's last pid (a fake /proc: apart)."""
        self._jobs = JobScanner(job_pattern, job_key_env, proc, attribute=attribute, pods=self._pods,
                               slurm=SlurmPidinfo.detect() if attribute and proc == "/proc" else None,
                               exec_events=exec_events, loadavg=self._loadavg)
        self._kubelet = kubelet if isinstance(kubelet, PodResourcesClient) else (
            PodResourcesClient() if kubelet == "auto" and attribute else None)
        self._nv_static: dict[str, str] = {}
        self._amd_static: dict[str, str] = {}
        self._gpus = _open_gpus(nvml, self._nv_static)
        self._mig_parents: Mapping[str, str] = {}
        """MIG device UUID -> its GPU's UUID, from the last NVML read (for the kubelet's MIG device ids)."""
        self._amd = _open_amd(amd, self._amd_static)
        self._nv_count = 0
        """Most NVIDIA GPUs seen in one read: AMD indices start here and never move down."""
        self._host = HostCollector(loadavg=self._loadavg)
        self._ib = InfinibandCollector()
        perf = call_guarded(log, "perf counters start", PerfCollector)
        self._perf: PerfCollector | None = None if isinstance(perf, Failure) else perf
        if isinstance(perf, Failure):
            self._static["cache"] = f"perf counters failed: {perf.message}"

    def sample(self) -> HostSample:
        """Read everything once; rates are over the time since the last call.

        Raises:
            OSError: only if /proc itself is unreadable for the process-tree scan (not Linux);
                host counters never raise: they are n/a with the reason.
        """
        unavailable: dict[str, str] = dict(self._static)
        if self._loadavg is not None:
            self._loadavg.fresh()
        host = self._host.sample()
        now = time.time()
        unavailable.update(host.unavailable)
        gpus = self._read_gpus(unavailable)
        ib = self._ib.read()
        unavailable.update(ib.unavailable)
        cache = CacheSample()
        if self._perf is not None:
            perf = self._perf.read()
            cache = perf.cache
            unavailable.update(perf.unavailable)
        jobs = self._jobs.scan(gpu_memory_by_pid(gpus))
        unavailable.update(self._jobs.notes)  # a refused pattern, a user over the re-read budget
        if self._kubelet is not None:  # waits at most its deadline, once; then the last answer (at most 10 s old)
            gpus, jobs, notes = attach(gpus, jobs, self._kubelet.reading(), self._pods.names(), self._mig_parents)
            unavailable.update(notes)
        return check_sample(_host_sample(self.host, now, host.cpu, host.memory, host.network, host.storage, cache,
                                         ib.ports, gpus, jobs, unavailable, False))

    def _read_gpus(self, unavailable: dict[str, str]) -> tuple[GpuSample, ...]:
        """NVIDIA GPUs, then AMD GPUs numbered after them; reasons into ``unavailable``."""
        nv: tuple[GpuSample, ...] = ()
        nv_notes, amd_notes = dict(self._nv_static), dict(self._amd_static)
        self._mig_parents = {}
        if self._gpus is not None:
            reading = call_guarded(log, "NVML read", self._gpus.read)
            if isinstance(reading, Failure):
                nv_notes["gpus"] = f"NVML read failed: {reading.message}"
            else:
                self._mig_parents = getattr(reading, "mig_parents", None) or {}
                nv = tuple(reading.gpus)
                nv_notes.update(_prefixed(reading.unavailable))
        if nv:
            self._nv_count = max(self._nv_count, 1 + max(map(_INDEX, nv)))
        amd: tuple[GpuSample, ...] = ()
        if self._amd is not None:
            amd_reading = call_guarded(log, "AMD read", self._amd.read, self._nv_count)
            if isinstance(amd_reading, Failure):
                amd_notes["gpus"] = f"AMD read failed: {amd_reading}"
            else:
                amd = tuple(amd_reading.gpus)
                amd_notes.update({f"gpus.amd.{k}" if k != "gpus" else k: v
                                  for k, v in amd_reading.unavailable.items()})
        nv_why, amd_why = nv_notes.pop("gpus", None), amd_notes.pop("gpus", None)
        unavailable.update(nv_notes)
        if amd:
            unavailable.update(amd_notes)
        if nv or amd:  # a vendor with no GPU here is not missing data
            return nv + amd
        if nv_why and amd_why and nv_why != amd_why:
            unavailable["gpus"] = f"{nv_why}; AMD: {amd_why}"
        elif nv_why or amd_why:
            unavailable["gpus"] = nv_why or amd_why or ""
        return ()

    def close(self) -> None:
        """Release NVML, the AMD collector's threads, perf file descriptors and the host's kept /proc files."""
        self._host.close()
        self._jobs.close()
        if self._loadavg is not None:
            self._loadavg.file.close()
        if self._gpus is not None:
            self._gpus.close()
            self._gpus = None
        if self._amd is not None:
            self._amd.close()
            self._amd = None
        if self._perf is not None:
            self._perf.close()
            self._perf = None

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _prefixed(reasons: Mapping[str, str]) -> dict[str, str]:
    # GPU reasons live under "gpus" in the host map so a TUI can find them in one place.
    return {k if k.startswith("gpu") else f"gpus.{k}": v for k, v in reasons.items()}

