"""One call, one :class:`~gpulens.core.model.HostSample` of this machine.

:class:`Sampler` owns the host, InfiniBand, perf, job and GPU collectors.
Every collector is primed when the sampler is built, so the first sample
already holds real rates. A collector that cannot run does not stop the
others: its figures are None/empty and the reason goes into
``HostSample.unavailable``. A sample leaves through
:func:`~gpulens.core.sanitize.check_sample`, as a peer's arrives: every
consumer (the TUI, ``gpulens sample``, the agent's stream and ``/metrics``,
recordings) gets printable text and plausible numbers.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

from gpulens.collectors.host import HostCollector
from gpulens.collectors.infiniband import InfinibandCollector
from gpulens.collectors.jobs import JobScanner
from gpulens.collectors.perf.counters import PerfCollector
from gpulens.collectors.workloads import PodNames
from gpulens.core.jobs_pattern import DEFAULT_JOB_KEY_ENV, DEFAULT_JOB_PATTERN
from gpulens.core.model import CacheSample, GpuSample, HostSample
from gpulens.core.sanitize import check_sample


class GpuReader(Protocol):
    """What the sampler needs of ``gpulens.collectors.nvml.collector.NvmlCollector``."""

    def read(self) -> Any: ...

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
    try:
        collector: GpuReader = NvmlCollector(module=None if nvml == "auto" else cast(Any, nvml))
    except Exception as err:
        unavailable["gpus"] = f"NVML collector failed to start: {err}"
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
    ) -> None:
        """Raises re.error for a bad job pattern (check it first: gpulens.core.config);
        ``proc``: where the job scan reads processes (a fake tree in tests);
        ``attribute``: read each job's container, pod and Slurm job (``collectors.workloads``)."""
        self.host = hostname or socket.gethostname()
        self._static: dict[str, str] = {}
        self._jobs = JobScanner(job_pattern, job_key_env, proc, attribute=attribute, pods=PodNames())
        self._gpus = _open_gpus(nvml, self._static)
        self._host = HostCollector()
        self._ib = InfinibandCollector()
        self._perf: PerfCollector | None
        try:
            self._perf = PerfCollector()
        except Exception as err:
            self._perf = None
            self._static["cache"] = f"perf counters failed: {err}"

    def sample(self) -> HostSample:
        """Read everything once; rates are over the time since the last call.

        Raises:
            OSError: only if /proc itself is unreadable for the process-tree scan (not Linux);
                host counters (psutil) never raise: they are n/a with the reason.
        """
        unavailable: dict[str, str] = dict(self._static)
        host = self._host.sample()
        now = time.time()
        unavailable.update(host.unavailable)
        gpus: tuple[GpuSample, ...] = ()
        if self._gpus is not None:
            try:
                reading = self._gpus.read()
                gpus = tuple(reading.gpus)
                unavailable.update(_prefixed(reading.unavailable))
            except Exception as err:
                unavailable["gpus"] = f"NVML read failed: {err}"
        ib = self._ib.read()
        unavailable.update(ib.unavailable)
        cache = CacheSample()
        if self._perf is not None:
            perf = self._perf.read()
            cache = perf.cache
            unavailable.update(perf.unavailable)
        jobs = self._jobs.scan(gpu_memory_by_pid(gpus))
        unavailable.update(self._jobs.notes)  # a refused pattern, a user over the re-read budget
        return check_sample(HostSample(
            host=self.host,
            time=now,
            cpu=host.cpu,
            memory=host.memory,
            network=host.network,
            storage=host.storage,
            cache=cache,
            infiniband=ib.ports,
            gpus=gpus,
            jobs=jobs,
            unavailable=unavailable,
        ))

    def close(self) -> None:
        """Release NVML and perf file descriptors."""
        if self._gpus is not None:
            self._gpus.close()
            self._gpus = None
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

