"""GPUs through NVML (``nvidia-ml-py``, module ``pynvml``).

:class:`NvmlCollector` initialises NVML once, opens every GPU and, on each
:meth:`~NvmlCollector.read`, returns a :class:`GpuReading`: one
:class:`~.model.GpuSample` per GPU (what ``nvidia-smi -q`` shows, plus GPM
figures on Hopper and newer). It never raises: no NVML library, no driver or
no GPU gives an empty GPU list and the reason under ``unavailable["gpus"]``;
a field one GPU cannot report is None with a reason in that GPU's
``unavailable``; a lost GPU is reported with the reason under
``unavailable["gpu"]`` while the others are still read.

MIG: each GPU's MIG mode is read on every read and its MIG devices listed when
it changes (``collectors.nvml.mig``); ``GpuReading.mig_parents`` maps each MIG
device's UUID to its GPU's, for the kubelet's MIG device ids, and the layout is
said under the GPU's ``unavailable["mig"]``.

Rates (NVLink bytes/s, GPM percentages, per-process utilization, XID events)
cover the time since the previous read; the collector takes its first
counters when it opens, so the first read is already a real rate.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType

from gpulens.collectors.nvml import batch
from gpulens.collectors.nvml.device import GpuDevice
from gpulens.collectors.nvml.fastread import BatchedRead
from gpulens.collectors.nvml.query import GpuLost, describe
from gpulens.core.logbook import Failure, call_guarded
from gpulens.core.model import GpuSample

log = logging.getLogger("gpulens.collectors.nvml")

MAX_GPUS = 64
"""More than any one machine holds; bounds what a broken driver could claim."""


@dataclass(frozen=True, slots=True)
class GpuReading:
    """What one read of NVML found: the GPUs, and why GPUs are missing if they are.

    ``unavailable`` is empty or ``{"gpus": reason}`` (no library, no driver,
    no GPU, NVML closed); per-field reasons live in each GpuSample.
    """

    gpus: tuple[GpuSample, ...]
    unavailable: Mapping[str, str] = field(default_factory=dict)
    mig_parents: Mapping[str, str] = field(default_factory=dict)
    """MIG device UUID -> the UUID of the GPU it is part of, for GPUs in MIG mode (``collectors.nvml.mig``)."""


def _prepare(batches: list[BatchedRead | None]) -> None:
    for one in batches:
        if one is not None:
            one.prepare()


def _steady_reads(devices: list[GpuDevice], ran: list[BatchedRead | None], out: list[GpuSample | None]) -> None:
    """Onto ``out``, each GPU's steady sample (None: none; see NvmlCollector._steady), in order."""
    for device, one in zip(devices, ran, strict=True):
        try:
            out.append(None if one is None else one.steady())
        except GpuLost as lost:
            out.append(device.lose(lost.reason))


def _import_pynvml() -> ModuleType | str:
    try:
        return importlib.import_module("pynvml")
    except ImportError as err:
        return f"pynvml is not importable ({err}); install nvidia-ml-py"


class NvmlCollector:
    """Reads every NVIDIA GPU of this machine through NVML.

    Args:
        module: the NVML binding; None imports ``pynvml``. Tests pass a test
            double with the same functions, constants and errors.
        clock: monotonic seconds, for rates between reads.

    NVML is initialised here, once, and shut down by :meth:`close`. Nothing
    here raises: every failure becomes a reason.
    """

    def __init__(
        self,
        module: ModuleType | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._devices: list[GpuDevice] = []
        self._many: batch.ManyBatches | None = None
        """Every batched GPU's calls in one crossing (collectors.nvml.batch); None: each GPU runs its own."""
        self._many_key: tuple[BatchedRead | None, ...] = ()
        """Each GPU's batched read when :attr:`_many` was laid out (None: a GPU without one)."""
        self._initialised = False
        self._why: str | None = None
        """Why there are no GPUs at all (None when NVML opened)."""
        loaded = _import_pynvml() if module is None else module
        if isinstance(loaded, str):
            self._nvml: ModuleType | None = None
            self._why = loaded
            return
        self._nvml = loaded
        self._open(loaded, clock)

    def _open(self, nvml: ModuleType, clock: Callable[[], float]) -> None:
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as err:
            self._why = f"NVML init failed: {describe(err)}"
            return
        except OSError as err:  # a broken libnvidia-ml.so can fail inside ctypes
            self._why = f"NVML init failed: {err}"
            return
        self._initialised = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as err:
            self._why = f"cannot count GPUs: {describe(err)}"
            return
        if count <= 0:
            self._why = "NVML found no NVIDIA GPU on this machine"
            return
        self._devices = [GpuDevice(nvml, i, clock) for i in range(min(count, MAX_GPUS))]
        if not any(d.batched for d in self._devices):
            why = batch.load()
            log.info("GPUs read through pynvml's wrappers alone (no NVML call batch): %s",
                     why if isinstance(why, str) else "this binding or these GPUs cannot be batched")

    def read(self) -> GpuReading:
        """Read all GPUs now (``nvidia-smi -q`` for each, plus GPM).

        Units are in GpuSample's field names. Never raises: an unexpected
        error while reading one GPU is reported as that GPU's reason.
        """
        if self._why is not None:
            return GpuReading((), {"gpus": self._why})
        ran = self._run_batches()
        samples = []
        for device, batched, steady in zip(self._devices, ran, self._steady(ran), strict=True):
            if steady is not None:
                samples.append(steady)
                continue
            sample = call_guarded(log, device.reading, device.read, batched)  # not the other GPUs
            if isinstance(sample, Failure):
                sample = GpuSample(device.index, device.name, device.uuid,
                                   unavailable={"gpu": f"internal error reading GPU: {sample}"})
            samples.append(sample)
        parents = {m.uuid: d.uuid for d in self._devices if d.uuid for m in d.mig_devices}
        return GpuReading(tuple(samples), mig_parents=parents)

    def _steady(self, ran: list[BatchedRead | None]) -> list[GpuSample | None]:
        """Each GPU's sample where its batch ran and gave the usual answers (``BatchedRead.steady``); None:
        the GPU is read in full. A fault here is the GPU's whose read raised: pynvml's path reads it from
        now on, as after a fault of its full batched read."""
        out: list[GpuSample | None] = []
        if self._many is None:
            return [None] * len(ran)
        got = call_guarded(log, "reading the GPUs' batched answers (a GPU whose read failed: pynvml's path "
                           "from now on)", _steady_reads, self._devices, ran, out)
        if isinstance(got, Failure) and len(out) < len(ran):
            self._devices[len(out)].drop_batch()
            out.append(None)
        return out + [None] * (len(ran) - len(out))

    def _run_batches(self) -> list[BatchedRead | None]:
        """Every batched GPU's calls made in one crossing; for each GPU, the batch that ran (None: none ran).

        The crossing is laid out again whenever a GPU's batch changed (laid out larger, dropped after a
        fault, its GPU lost or closed), so a batch whose buffers were freed is never run."""
        batches = [device.fast for device in self._devices]
        key = tuple(batches)  # the objects themselves (held, so never another at the same address): by identity
        if key != self._many_key:
            live = [b.batch for b in batches if b is not None]
            many = None
            if live:  # one GPU too: its steady answers are read as every GPU's are (_steady)
                made = call_guarded(log, "laying out the GPUs' NVML call batches", batch.ManyBatches, live)
                many = None if isinstance(made, Failure) else made
            self._many, self._many_key = many, key
        if self._many is None:
            return [None] * len(batches)
        prepared = call_guarded(log, "preparing the GPUs' NVML call batches", _prepare, batches)
        if isinstance(prepared, Failure):  # each GPU then runs (and mends) its own batch
            return [None] * len(batches)
        self._many.run()
        return batches

    def close(self) -> None:
        """Free event sets and GPM buffers and shut NVML down; safe to call twice."""
        self._many, self._many_key = None, ()
        for device in self._devices:
            device.close()
        self._devices = []
        if self._initialised and self._nvml is not None:
            self._initialised = False
            # Shutting down: a failure here has nobody left to report to.
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
        if self._why is None:
            self._why = "NVML collector closed"

    def __enter__(self) -> NvmlCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
