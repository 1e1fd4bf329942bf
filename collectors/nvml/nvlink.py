"""NVLink receive/transmit rates of one GPU from NVML's cumulative counters.

``nvmlDeviceGetFieldValues`` with ``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX`` /
``_TX`` and a link number as scope gives each link's data bytes (KiB, without
protocol overhead) since the driver loaded; the same figures as
``nvidia-smi nvlink -gt d``. The rate is the sum over links of the counter
difference between two reads divided by the time between them. The first
counters are read when the counter is made, so the first read is a real rate.
With the real binding the fields are read through
:class:`~.fieldvalues.RawFieldValues` (pynvml's wrapper costs most of a GPU's
read for 36 fields); with any other, through the binding's own call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter

from gpulens.collectors.nvml.fieldvalues import RawFieldValues
from gpulens.collectors.nvml.query import Query, describe_code

NVLINK_FIELDS = ("nvlink_rx_bytes_per_s", "nvlink_tx_bytes_per_s")
MAX_LINKS = 64
"""Upper bound on the link count NVML may report (NVML_NVLINK_MAX_LINKS is 36 today)."""
_FI_LINK_COUNT = 91
_FI_DATA_TX = 138
_FI_DATA_RX = 139
_RETURN = attrgetter("nvmlReturn")
_KIB = attrgetter("value.ullVal")


class NvLinkCounter:
    """Turns one GPU's NVLink byte counters into bytes/s between reads."""

    __slots__ = ("_clock", "_columns", "_handle", "_ids", "_links", "_prev", "_prev_t", "_q", "_raw", "_why")

    def __init__(self, q: Query, handle: object, clock: Callable[[], float]) -> None:
        self._q = q
        self._handle = handle
        self._clock = clock
        self._links = 0
        self._ids: list[tuple[int, int]] = []
        self._prev: tuple[int | None, int | None] = (None, None)
        self._prev_t = 0.0
        self._why: str | None = None
        self._raw: RawFieldValues | None = None
        self._columns: tuple[memoryview, memoryview, memoryview] | None = None
        """(every link's codes, rx KiB, tx KiB) in the raw reader's array, read in place by a batched read."""
        nvml = q.nvml
        count_id = getattr(nvml, "NVML_FI_DEV_NVLINK_LINK_COUNT", _FI_LINK_COUNT)
        values = q(NVLINK_FIELDS, "nvmlDeviceGetFieldValues", handle, [count_id])
        if values is None:
            self._why = q.reasons.get(NVLINK_FIELDS[0], "NVLink link count unreadable")
            return
        code = int(values[0].nvmlReturn)
        if code != 0:
            self._why = f"NVLink link count: {describe_code(nvml, code)}"
            return
        self._links = min(int(values[0].value.uiVal), MAX_LINKS)
        if self._links == 0:
            self._why = "this GPU has no NVLink links"
            return
        rx_id = getattr(nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", _FI_DATA_RX)
        tx_id = getattr(nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", _FI_DATA_TX)
        links = range(self._links)
        self._ids = [(rx_id, link) for link in links] + [(tx_id, link) for link in links]
        self._raw = RawFieldValues.make(nvml, handle, self._ids)
        if self._raw is not None:
            both = self._raw.columns(0, 2 * self._links)
            self._columns = None if both is None else (
                both[0], both[1][:self._links], both[1][self._links:])
        self._prev = self._totals()
        self._prev_t = clock()

    def raw_reader(self) -> RawFieldValues | None:
        """The raw path's reader, for a batch that makes its call into the reader's array (and keeps the
        reader, so the array outlives it); None: no raw path."""
        return None if self._why is not None else self._raw

    def _totals(self, answered: bool | None = None) -> tuple[int | None, int | None]:
        """Summed (rx, tx) KiB over links; a direction with no readable link is None.

        ``answered``: a batch made the raw call already, and it answered 0 (True) or not (False)."""
        n = self._links
        raw = self._raw
        if raw is None or answered is False:
            answer = None
        else:
            answer = raw.answers() if answered else raw.read()
        if answer is not None:
            codes, kib = answer
            return (self._half(NVLINK_FIELDS[0], codes[:n], kib[:n]),
                    self._half(NVLINK_FIELDS[1], codes[n:2 * n], kib[n:2 * n]))
        # Not the real binding, or the call failed: the binding's own call, which notes why.
        values = self._q(NVLINK_FIELDS, "nvmlDeviceGetFieldValues", self._handle, self._ids)
        if values is None:
            if self._q.is_sticky(NVLINK_FIELDS[0]):
                self._raw = self._columns = None  # failed for good: not asked again, the reason said each read
            return None, None
        return self._half_of(NVLINK_FIELDS[0], values[:n]), self._half_of(NVLINK_FIELDS[1], values[n:2 * n])

    def _half_of(self, name: str, links: Sequence[object]) -> int | None:
        """:meth:`_half` of the binding's own field values (read by attribute)."""
        if links and not any(map(_RETURN, links)):  # every link answered: summed in C, no copy made
            return int(sum(map(_KIB, links)))
        return self._half(name, tuple(map(_RETURN, links)), map(_KIB, links))

    def _half(self, name: str, codes: Sequence[int], kib: Iterable[int]) -> int | None:
        """One direction's KiB summed over the links that answered; None (with the reason) if none did.

        ``kib`` holds one value per code, read in step with them (a value where the code is not 0 is
        not added)."""
        if codes and not any(codes):  # every link answered: the usual case (summed in C)
            return int(sum(kib))
        total: int | None = None
        first_error = 0
        for code, value in zip(codes, kib, strict=True):
            if code == 0:
                total = (total or 0) + int(value)
            elif not first_error:
                first_error = int(code)
        if total is None:
            self._q.note(name, describe_code(self._q.nvml, first_error or 999))
        return total

    def read(self, answered: bool | None = None) -> tuple[float | None, float | None]:
        """(rx, tx) in bytes/s since the last read, each None with a reason if unknown.

        ``answered``: as :meth:`_totals` (None: the call is made here).

        Raises:
            GpuLost: NVML reports the GPU as lost.
        """
        if self._why is not None:
            self._q.note(NVLINK_FIELDS, self._why)
            return None, None
        now = self._clock()
        columns = self._columns
        if answered and columns is not None:  # a batch read every link's counters: the usual case first
            codes, rx_kib, tx_kib = columns
            before_rx, before_tx = self._prev
            dt = now - self._prev_t
            if not any(codes) and before_rx is not None and before_tx is not None:
                rx, tx = sum(rx_kib), sum(tx_kib)
                if rx >= before_rx and tx >= before_tx and dt > 0:
                    self._prev, self._prev_t = (rx, tx), now
                    return (rx - before_rx) * 1024.0 / dt, (tx - before_tx) * 1024.0 / dt
        cur = self._totals(answered)
        dt = now - self._prev_t
        rates: list[float | None] = []
        for name, before, after in zip(NVLINK_FIELDS, self._prev, cur, strict=True):
            if before is None or after is None:
                if after is not None:
                    self._q.note(name, "rate needs two readings; the previous one failed")
                rates.append(None)
            elif after < before or dt <= 0:
                self._q.note(name, "NVLink counter went backwards (reset); rate from next read")
                rates.append(None)
            else:
                rates.append((after - before) * 1024.0 / dt)
        self._prev, self._prev_t = cur, now
        return rates[0], rates[1]
