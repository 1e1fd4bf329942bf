"""What a time-series plot shows (:class:`PlotData`), made from the store's float series; no drawing here."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpulens.store.views import WindowStats

__all__ = ["PlotData", "known", "plot_data"]


@dataclass(frozen=True, slots=True)
class PlotData:
    """What one plot shows: the series (NaN = gap), or why there is none, and over which window."""

    values: tuple[float | None, ...]
    """Oldest first, spanning the window; None where the store has no value."""
    reason: str | None
    window: str
    """The window's name (``5m``), shown after the figures."""
    window_s: float = 0.0
    """The window in seconds: the time axis (none when 0)."""
    stats: WindowStats | None = None
    """Exact figures for the summary line (else they come from ``values``)."""
    lines: tuple[tuple[str, tuple[float | None, ...]], ...] = ()
    """Per-series bands (``GPU0``, ...) drawn one under the other instead of ``values``."""
    note: str = ""
    """Appended to the summary line (``per GPU``, ``since 12:00:01``)."""
    covered_s: float = 0.0
    """How much data the figures cover, when ``stats`` does not say (a sum: rx + tx)."""
    newest_even: bool = False
    """The newest aligned column has an even absolute index: it starts a braille cell.

    A cell holds two columns, an even one and the odd one after it, so the
    chart moves left one whole cell every two columns (and only the newest
    cell changes in between) instead of moving every dot every column. The
    oldest column is then left out and the newest cell's right half is empty.
    """


def plot_data(values: Sequence[float], reason: str | None, window: str, window_s: float = 0.0,
              stats: WindowStats | None = None, lines: Sequence[tuple[str, Sequence[float]]] = (),
              note: str = "", newest_column: int | None = None, covered_s: float = 0.0) -> PlotData:
    """A :class:`PlotData` from float series (NaN becomes None, so equal data compares equal).

    ``newest_column``: the absolute index of the newest aligned column (``Store.newest_column``).
    """
    return PlotData(_clean(values), reason, window, window_s, stats,
                    tuple((label, _clean(v)) for label, v in lines), note, covered_s,
                    newest_column is not None and newest_column % 2 == 0)


def _clean(values: Sequence[float]) -> tuple[float | None, ...]:
    return tuple([v if v == v else None for v in values])


_INF = math.inf


def known(values: Sequence[float | None]) -> list[float]:
    """The finite values (None is a gap; inf is left out, as NaN is)."""
    return [v for v in values if v is not None and -_INF < v < _INF]
