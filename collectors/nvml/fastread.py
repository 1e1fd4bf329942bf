"""A GPU's read as one batch of C calls, each part falling back to pynvml on an unusual answer.

:class:`BatchedRead` lays out, once, every NVML call of one GPU's steady read
(the :data:`~.scalars.SCALARS`, the NVLink field values, one XID event wait,
the compute and graphics process lists, per-process utilization, the MIG mode,
and the GPM sample and metrics) as a :class:`~.batch.CallBatch`: one crossing
into C a read instead of about twenty through pynvml's wrappers. The calls
are the C functions pynvml's wrappers call, resolved by pynvml in the library
it loaded, into buffers laid out as the binding's own ctypes structures
declare them (their sizes and field offsets are read from the binding).

Only the usual answer is read here: 0 (and "no event", "no sample since").
Any other answer, a call the library lacks, or a part off the straight path
(a sticky failure, no GPM yet, more processes than the buffer holds) is asked
again through the pynvml path of :class:`~.device.GpuDevice`, which turns it
into the same reason or :class:`~.query.GpuLost` as without the batch; a part
whose failure is for good is then left out of the batch. So both paths give
the same GpuSample, which the tests check against each other.

Made only for nvidia-ml-py's ctypes binding (``_nvmlGetFunctionPointer``,
``nvmlLib``) and when the batch library was built (:func:`.batch.load`).
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gpulens.collectors.nvml import batch as batch_mod
from gpulens.collectors.nvml.batch import NOT_CALLED, Call, CallBatch
from gpulens.collectors.nvml.mig import MIG_ENABLE
from gpulens.collectors.nvml.query import NOT_FOUND, TIMEOUT
from gpulens.collectors.nvml.scalars import (
    COMPUTE,
    GRAPHICS,
    MAX_PROCESSES,
    NO_SAMPLES,
    PROC_UTIL,
    SCALARS,
    pairs,
    util_samples,
)
from gpulens.core.model import GpuProcess, GpuSample

if TYPE_CHECKING:
    from gpulens.collectors.nvml.device import GpuDevice

INSUFFICIENT_SIZE = 7
FIRST_CAP = 64
"""Processes each list holds; more, and the batch is laid out again, larger (pynvml's path answers meanwhile)."""
_SHAPES = (batch_mod.PO, batch_mod.PIO, batch_mod.PIIO)
"""A scalar's shape by its count of constant arguments."""
_U32 = struct.Struct("=I")
_NVML_H_SIZES = (32, 24, 32)
"""nvmlEventData_t, nvmlProcessInfo_v2_t (what the _v3 process lists fill), nvmlProcessUtilizationSample_t."""


def _address(pointer: object) -> int | None:
    """The address a ctypes pointer (a handle, an event set, a GPM sample) holds; None if it is not one."""
    try:
        return ctypes.cast(pointer, ctypes.c_void_p).value  # type: ignore[arg-type]  # any ctypes pointer
    except (TypeError, ctypes.ArgumentError):
        return None


def _layout(fields: Sequence[tuple[int, str]]) -> struct.Struct:
    """A standard-size struct reading ``fields`` ((offset, format code), rising) from offset 0."""
    fmt, at = ["="], 0
    for offset, code in fields:
        if offset < at:
            raise ValueError(f"a field at {offset} overlaps the one before (which ends at {at})")
        fmt.append(f"{offset - at}x{code}" if offset > at else code)
        at = offset + struct.calcsize("=" + code)
    return struct.Struct("".join(fmt))


@dataclass(frozen=True, slots=True)
class Records:
    """A binding's ctypes structure as fixed-size records: its size and the named fields' layout."""

    size: int
    one: struct.Struct
    offsets: tuple[int, ...]
    """The named fields' offsets in a record."""
    every: struct.Struct
    """``one`` padded to the whole record: ``iter_unpack`` reads a run of records with it."""

    @classmethod
    def of(cls, struct_type: object, fields: Sequence[tuple[str, str]]) -> Records | None:
        """The records of ``struct_type`` reading ``fields`` ((name, format code)); None if it lacks one."""
        if not isinstance(struct_type, type) or not issubclass(struct_type, ctypes.Structure):
            return None
        places = []
        for name, code in fields:
            offset = getattr(getattr(struct_type, name, None), "offset", None)
            size = getattr(getattr(struct_type, name, None), "size", None)
            if not isinstance(offset, int) or size != struct.calcsize("=" + code):
                return None
            places.append((offset, code))
        size, one = ctypes.sizeof(struct_type), _layout(places)
        every = struct.Struct(f"{one.format}{size - one.size}x") if size > one.size else one
        return cls(size, one, tuple(o for o, _ in places), every)

    def read(self, view: memoryview, at: int, count: int) -> list[tuple[Any, ...]]:
        """``count`` records from byte ``at`` of ``view`` (the fields named, in order)."""
        if count == 1:  # one process on the GPU: the usual
            return [self.one.unpack_from(view, at)]
        return list(self.every.iter_unpack(view[at:at + count * self.size]))


@dataclass(frozen=True, slots=True)
class BindingTypes:
    """The binding's structures a batched read lays out and reads back."""

    event: Records
    process: Records
    util: Records

    @classmethod
    def of(cls, nvml: ModuleType) -> BindingTypes | None:
        """None where the binding lacks one, or its scalars' structures are not nvml.h's (see SCALARS)."""
        for name, scalar in (("c_nvmlUtilization_t", SCALARS[0]), ("c_nvmlMemory_t", SCALARS[1])):
            got = Records.of(getattr(nvml, name, None), list(zip(scalar.parts, scalar.layout, strict=True)))
            if got is None or got.size != struct.calcsize("=" + scalar.layout) or got.one.size != got.size:
                return None
        event = Records.of(getattr(nvml, "c_nvmlEventData_t", None), (("eventType", "Q"), ("eventData", "Q")))
        process = Records.of(getattr(nvml, "c_nvmlProcessInfo_v3_t", None), (("pid", "I"), ("usedGpuMemory", "Q")))
        util = Records.of(getattr(nvml, "c_nvmlProcessUtilizationSample_t", None),
                          (("pid", "I"), ("timeStamp", "Q"), ("smUtil", "I"), ("memUtil", "I")))
        if event is None or process is None or util is None:
            return None
        # nvml.h's sizes (the driver writes whole records): a binding declaring others is not batched
        if (event.size, process.size, util.size) != _NVML_H_SIZES:
            return None
        return cls(event, process, util)


class BatchedRead:
    """One GPU's steady read in one crossing into C; see the module's docstring.

    A helper of :class:`~.device.GpuDevice`, which owns the state it reads (Query, NVLink counter,
    GPM sampler, MIG layout, XID event set).
    """

    def __init__(self, device: GpuDevice, fn: Any, resolve: Callable[[str], int],  # noqa: ANN401  ctypes function
                 handle: int, types: BindingTypes, cap: int) -> None:
        self._device = device
        self.cap = cap
        self.regrow = 0
        """A larger process capacity the last read needed (0: none); the device lays the batch out again."""
        self._types = types
        calls: list[Call] = []
        for scalar, (_, _, args, _) in zip(SCALARS, device._scalar_calls, strict=True):
            names = (scalar.fn,) if isinstance(scalar.fn, str) else scalar.fn
            address = next((a for a in map(resolve, names) if a), 0)
            calls.append(Call(address, _SHAPES[len(args)], handle, out=struct.calcsize("=" + scalar.layout),
                              i1=args[0] if args else 0, i2=args[1] if len(args) > 1 else 0))
        nvlink = device._nvlink
        raw = None if nvlink is None else nvlink.raw_reader()
        self._nvlink_at = -1
        self._keep: list[object] = []
        """What the batch's addresses point into, kept alive as long as the batch (the NVLink array,
        the GPM request): a part dropped by its owner cannot leave the batch writing into freed memory."""
        if raw is not None:  # the counter's own array, asked in the batch
            self._nvlink_at = len(calls)
            self._keep.append(raw)
            calls.append(Call(resolve("nvmlDeviceGetFieldValues"), batch_mod.PIO, handle, i1=len(raw),
                              out_ptr=raw.address))
        events = None if device._events is None else _address(device._events)
        self._xid_at = -1
        if events:
            self._xid_at = len(calls)
            calls.append(Call(resolve("nvmlEventSetWait_v2"), batch_mod.POU, events, out=types.event.size))
        self._procs_at = len(calls)
        for name in ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3"):
            calls.append(Call(resolve(name), batch_mod.PCO, handle, out=types.process.size * cap, out2=4, cap=cap))
        calls.append(Call(resolve("nvmlDeviceGetProcessUtilization"), batch_mod.POCQ, handle,
                          out=types.util.size * cap, out2=4, cap=cap))
        self._mig_at = len(calls)
        calls.append(Call(resolve("nvmlDeviceGetMigMode"), batch_mod.POO, handle, out=4, out2=4))
        gpm = device._gpm
        request = None if gpm is None else gpm.request_address()
        self._gpm_at = -1
        if request is not None and gpm is not None:
            self._keep.append(gpm.request)
            self._gpm_at = len(calls)
            calls.append(Call(resolve("nvmlGpmSampleGet"), batch_mod.PO, handle, out_ptr=0))
            calls.append(Call(resolve("nvmlGpmMetricsGet"), batch_mod.P, request, after=self._gpm_at))
        self._batch = CallBatch(fn, calls)
        self._since = 0
        """The per-process utilization timestamp the batch asks after (as last set in it)."""
        self._gpm_on = self._gpm_at >= 0
        """Whether the GPM calls are on in the batch (switched when the sampler can or cannot batch)."""
        self._again = False
        """A part was asked again through pynvml's path this read: which parts are on is checked after it."""
        self._mig_seen: tuple[tuple[int, int], str | None] | None = None
        """The last MIG mode read while MIG was off, and its note (the same mode again changes nothing)."""
        self._fixed, self._at = self._fixed_layout(types)
        self._view = memoryview(self._batch.arena).cast("B")
        at, procs = self._at, self._procs_at
        self._steady_at = (at["event"] if self._xid_at >= 0 else at["counts"], at["counts"], at["mig"],
                           tuple(self._batch.offsets[procs + k][0] for k in range(3)))
        """Where :meth:`steady` reads: the scalars' value count, the process counts and the MIG mode in the
        fixed answers, and the three process lists in the arena."""
        self._usual: tuple[list[int], list[int]] | None = None
        """The codes of a run where every call gave its usual answer (per-process utilization: samples, or
        none since), as the calls are switched now; None: laid out again on next use."""
        self._sync()

    def _fixed_layout(self, types: BindingTypes) -> tuple[struct.Struct, dict[str, int]]:
        """One struct for every fixed-size answer in the arena, and where each part starts in what it gives:
        the scalars' flat values first, then the XID event (kind, data), the three process counts and the
        MIG mode (current, pending)."""
        offsets = self._batch.offsets
        fields: list[tuple[int, str]] = []
        for scalar, (at, _) in zip(SCALARS, offsets, strict=False):
            fields += [(at + struct.calcsize("=" + scalar.layout[:i]), code) for i, code in enumerate(scalar.layout)]
        where = {"scalars": 0}
        if self._xid_at >= 0:
            where["event"] = len(fields)
            event = offsets[self._xid_at][0]
            kind_at, data_at = (event + o for o in types.event.offsets)
            fields += [(kind_at, "Q"), (data_at, "Q")]
        where["counts"] = len(fields)
        fields += [(offsets[self._procs_at + k][1], "I") for k in range(3)]
        where["mig"] = len(fields)
        fields += [(offsets[self._mig_at][0], "I"), (offsets[self._mig_at][1], "I")]
        return _layout(fields), where

    @classmethod
    def make(cls, device: GpuDevice, cap: int | None = None) -> BatchedRead | None:
        """The batched read of ``device`` (room for ``cap`` processes a list; None: :data:`FIRST_CAP`),
        or None: no batch library, or not nvidia-ml-py's binding."""
        fn = batch_mod.load()
        nvml = device._nvml
        lookup = getattr(nvml, "_nvmlGetFunctionPointer", None)
        handle = _address(device.handle)
        if isinstance(fn, str) or not callable(lookup) or getattr(nvml, "nvmlLib", None) is None or not handle:
            return None
        types = BindingTypes.of(nvml)
        if types is None:
            return None

        def resolve(name: str) -> int:
            try:
                return _address(lookup(name)) or 0
            except (nvml.NVMLError, AttributeError, TypeError):  # a function this library lacks: pynvml's path
                return 0

        try:
            return cls(device, fn, resolve, handle, types, min(cap or FIRST_CAP, MAX_PROCESSES))
        except (ValueError, TypeError, struct.error, ctypes.ArgumentError):  # a layout this code cannot follow
            return None

    def _sync(self) -> None:
        """Switch off the parts that failed for good (pynvml's path says their reason each read)."""
        q, on, device = self._device._q, self._batch.set_on, self._device
        for k, scalar in enumerate(SCALARS):
            on(k, not q.is_sticky(scalar.fields if isinstance(scalar.fields, str) else scalar.fields[0]))
        for k, name in enumerate(("processes", "processes.graphics", PROC_UTIL[0])):
            on(self._procs_at + k, not q.is_sticky(name))
        on(self._mig_at, device._mig is not None and device._mig.batchable())
        if self._nvlink_at >= 0:
            on(self._nvlink_at, device._nvlink is not None and device._nvlink.raw_reader() is not None)
        self._usual = None

    @property
    def batch(self) -> CallBatch:
        return self._batch

    def prepare(self) -> None:
        """Set what changes between reads (the GPM samples, the utilization timestamp) before the batch runs."""
        device, b = self._device, self._batch
        gpm = device._gpm
        gpm_on = self._gpm_at >= 0 and gpm is not None and gpm.batchable()
        if gpm_on != self._gpm_on:
            self._gpm_on = gpm_on
            b.set_on(self._gpm_at, gpm_on)
            self._usual = None
        if gpm is not None and gpm_on:
            b.set_out(self._gpm_at, gpm.begin_batched())
        since = device._util_since_us
        if since != self._since:  # the utilization samples' last timestamp: asked for the ones after it
            self._since = since
            b.set_i1(self._procs_at + 2, since)

    def read(self, ran: bool = False) -> GpuSample:
        """The GPU's sample; raises only GpuLost (from pynvml's path, asked again).

        ``ran``: :meth:`prepare` was called and the batch has run since (with the other GPUs')."""
        device, b = self._device, self._batch
        if ran:
            codes = b.codes()
        else:
            self.prepare()
            codes = b.run()
        gpm = device._gpm
        gpm_on = self._gpm_on and gpm is not None
        fixed = self._fixed.unpack_from(b.arena)
        at = self._at
        values: Sequence[Any] = fixed[:at["event"] if self._xid_at >= 0 else at["counts"]]
        if any(codes[:len(SCALARS)]):
            values = self._scalars_again(codes, list(values))
        nvlink = device._nvlink
        nvl = (None, None) if nvlink is None else nvlink.read(
            answered=None if self._nvlink_at < 0 else codes[self._nvlink_at] == 0)
        if self._nvlink_at >= 0 and codes[self._nvlink_at] not in (0, NOT_CALLED):
            self._again = True
        xids = self._xids(codes, fixed)
        processes = self._processes(codes, fixed[at["counts"]:at["counts"] + 3])
        figures = None
        if gpm is not None:
            if gpm_on:
                figures = gpm.end_batched(codes[self._gpm_at], codes[self._gpm_at + 1])
                self._again |= figures is None
            if figures is None:  # no GPM here, not batched yet, or an unusual answer: pynvml's path
                figures = gpm.read()
        mig = self._mig(codes[self._mig_at], fixed[at["mig"]:at["mig"] + 2])
        if self._again:
            self._again = False
            self._sync()
        return device.sample(values, nvl, xids, processes, figures or {}, mig)

    def steady(self) -> GpuSample | None:
        """After the batch ran (as :meth:`read` with ``ran``): the sample when every call gave its usual
        answer and the MIG mode is the one last read, made in fewer steps than :meth:`read` makes the same
        sample; None, with nothing read or changed, otherwise (then :meth:`read` it).

        Raises:
            GpuLost: NVLink or GPM, asked again through pynvml's path, found the GPU lost.
        """
        b = self._batch
        codes = b.codes()
        usual = self._usual or self._lay_out_usual()
        if codes != usual[0] and codes != usual[1]:
            return None
        fixed = self._fixed.unpack_from(b.arena)
        n_values, counts, mig, (compute_at, graphics_at, util_at) = self._steady_at
        seen = self._mig_seen
        if seen is None or seen[0] != fixed[mig:mig + 2]:
            return None
        device = self._device
        device._q.begin()  # from here on, the parts in read()'s order (their notes in the same order)
        nvlink, gpm = device._nvlink, device._gpm
        nvl = (None, None) if nvlink is None else nvlink.read(answered=True if self._nvlink_at >= 0 else None)
        xids = () if self._xid_at >= 0 else device.drain_xids()
        n_compute, n_graphics, n_util = fixed[counts:counts + 3]
        cap, view, listed = self.cap, self._view, self._types.process.read
        processes = device.merge_processes(
            listed(view, compute_at, min(n_compute, cap)) if n_compute else (),
            listed(view, graphics_at, min(n_graphics, cap)) if n_graphics else (),
            True,
            self._types.util.read(view, util_at, min(n_util, cap)) if n_util and codes[self._procs_at + 2] == 0 else ())
        figures = None
        if gpm is not None:
            if self._gpm_on:
                figures = gpm.end_batched(0, 0)
                self._again = figures is None
            if figures is None:
                figures = gpm.read()
        if self._again:
            self._again = False
            self._sync()
        return device.sample(fixed[:n_values], nvl, xids, processes, figures or {}, seen[1])

    def _lay_out_usual(self) -> tuple[list[int], list[int]]:
        """:attr:`_usual` as the calls are switched now; ([], []) (never usual) while a part other than GPM
        is switched off (its reason is said by pynvml's path each read)."""
        on = self._batch.switched_on
        gpm = range(self._gpm_at, self._gpm_at + 2) if self._gpm_at >= 0 else range(0)
        if not all(flag for k, flag in enumerate(on) if k not in gpm):
            self._usual = ([], [])
            return self._usual
        usual = [0 if flag else NOT_CALLED for flag in on]
        if self._gpm_at >= 0 and not on[self._gpm_at]:  # the metrics call follows the sample's: not made either
            usual[self._gpm_at + 1] = NOT_CALLED
        if self._xid_at >= 0:
            usual[self._xid_at] = TIMEOUT
        idle = usual.copy()
        idle[self._procs_at + 2] = NOT_FOUND
        self._usual = (usual, idle)
        return self._usual

    def _scalars_again(self, codes: list[int], values: list[Any]) -> list[Any]:
        """The scalars that did not answer 0, asked through pynvml's path (reason, sticky, GpuLost)."""
        device = self._device
        q, h = device._q, device.handle
        at = 0
        for k, (scalar, (_, _, args, _)) in enumerate(zip(SCALARS, device._scalar_calls, strict=True)):
            if codes[k]:
                values[at:at + scalar.width] = scalar.flat(q(scalar.fields, scalar.fn, h, *args))
            at += scalar.width
        self._again = True
        return values

    def _xids(self, codes: list[int], fixed: tuple[Any, ...]) -> tuple[int, ...]:
        device = self._device
        if self._xid_at < 0:
            return device.drain_xids()
        code = codes[self._xid_at]
        if code == TIMEOUT:  # nothing queued: the usual answer
            return ()
        if code != 0:
            self._again = True
            return device.drain_xids()  # pynvml's path says why (or raises GpuLost)
        kind, data = fixed[self._at["event"]:self._at["event"] + 2]
        xid_type = getattr(device._nvml, "nvmlEventTypeXidCriticalError", 0x8)
        return device.drain_xids([int(data)] if kind & xid_type else [], taken=1)  # and any more queued behind it

    def _processes(self, codes: list[int], counts: tuple[Any, ...]) -> tuple[GpuProcess, ...]:
        device, at, arena, offsets = self._device, self._procs_at, self._view, self._batch.offsets
        util_code = codes[at + 2]
        if codes[at] == 0 and codes[at + 1] == 0 and (util_code == 0 or util_code == NOT_FOUND):  # the usual
            cap, listed, sampled = self.cap, self._types.process.read, self._types.util.read
            n_compute, n_graphics, n_util = counts
            return device.merge_processes(
                listed(arena, offsets[at][0], min(n_compute, cap)) if n_compute else (),
                listed(arena, offsets[at + 1][0], min(n_graphics, cap)) if n_graphics else (),
                True,
                sampled(arena, offsets[at + 2][0], min(n_util, cap)) if n_util and util_code == 0 else ())
        compute: list[tuple[int, int | None]] = []
        graphics: list[tuple[int, int | None]] = []
        for k, into in enumerate((compute, graphics)):
            code, count = codes[at + k], counts[k]
            if code == 0:
                if count:
                    into += self._types.process.read(arena, offsets[at + k][0], min(count, self.cap))
                continue
            if code == INSUFFICIENT_SIZE:
                self.regrow = max(self.regrow, count)
            self._again = True
            into += pairs(device._q(*(("processes", COMPUTE), ("processes.graphics", GRAPHICS))[k], device.handle))
        code, count = codes[at + 2], counts[2]
        if code == 0:
            ok, samples = True, self._types.util.read(arena, offsets[at + 2][0], min(count, self.cap))
        elif code == NOT_FOUND:  # no sample since the last read: the usual answer on an idle GPU
            ok, samples = True, []
        else:
            if code == INSUFFICIENT_SIZE:
                self.regrow = max(self.regrow, count)
            self._again = True
            ok, got = device._q.call(PROC_UTIL, "nvmlDeviceGetProcessUtilization", device.handle,
                                     device._util_since_us, empty_on=NO_SAMPLES)
            samples = util_samples(got)
        if self.regrow <= self.cap or self.cap >= MAX_PROCESSES:
            self.regrow = 0
        return device.merge_processes(compute, graphics, ok, samples)

    def _mig(self, code: int, mode: tuple[Any, ...]) -> str | None:
        """The MIG note: from the mode the batch read (pynvml's path where it did not)."""
        device = self._device
        if code != 0:
            if code != NOT_CALLED:
                self._again = True
            self._mig_seen = None
            return device.read_mig()
        current, pending = mode
        seen = self._mig_seen
        if seen is not None and seen[0] == (current, pending):  # MIG off, as last time: nothing changes
            return seen[1]
        note = device.read_mig((current, pending))
        mig = device._mig
        settled = mig is not None and (mig.mode, mig.pending) == (current, pending)  # read as the layout's state
        self._mig_seen = ((current, pending), note) if current != MIG_ENABLE and settled else None
        return note
