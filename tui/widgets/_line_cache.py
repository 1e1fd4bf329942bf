"""What :class:`~gpulens.tui.widgets._lines.LazyLines` keeps between ticks, and its non-row lines.

:class:`RowCache` holds each row's strip by key, rebuilt only when the row's version or the width
changes, and the fixed lines (header, "more", placeholder) once per key; the functions build the
"more" and placeholder lines. Nothing here is a widget: the styles come in as arguments.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Hashable, Mapping, Sequence

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

MakeLine = Callable[[Hashable, int], list[Segment]]


class RowCache:
    """Row strips by key, each with the version and width it was built for; fixed lines by slot."""

    def __init__(self) -> None:
        self.versions: dict[Hashable, object] = {}
        """Each row's version, as the widget last gave it (a subclass may add to it before a tick)."""
        self._unknown: object = object()
        """The version of a row the last :meth:`update` gave none (it is built again after each)."""
        self._rows: dict[Hashable, tuple[object, int, Strip, list[Segment]]] = {}
        self._fixed: dict[tuple[Hashable, ...], tuple[tuple[Hashable, ...], Strip | None]] = {}
        """Header and "more" lines by slot: the key they were built for, and the strip."""

    def update(self, versions: Mapping[Hashable, object]) -> None:
        """Take the rows' new versions; a row without one is built again after every tick."""
        self.versions.update(versions)
        self._unknown = object()

    def keep(self, rows: Sequence[Hashable]) -> None:
        """Forget every row not in ``rows``."""
        keep = set(rows)
        for gone in [k for k in self._rows if k not in keep]:
            del self._rows[gone]
            self.versions.pop(gone, None)

    def strip(self, key: Hashable, width: int, make_line: MakeLine, base: Style) -> Strip:
        """Row ``key``'s strip, built by ``make_line`` when its version or the width changed.

        ``make_line`` returning the very list it returned last time says "unchanged": the strip stays.
        """
        ver = self.versions.get(key, self._unknown)
        hit = self._rows.get(key)
        if hit is None or hit[0] != ver or hit[1] != width:
            segs = make_line(key, width)
            if hit is not None and hit[1] == width and segs is hit[3]:
                hit = self._rows[key] = (ver, width, hit[2], segs)  # "unchanged": the strip stays
            else:
                hit = self._rows[key] = (ver, width, fit(segs, width, base), segs)
        return hit[2]

    def fixed(self, key: tuple[Hashable, ...], make: Callable[[], Strip | None]) -> Strip | None:
        """A header or "more" line, built once per ``key`` (a tick compares every line)."""
        slot = key[:2]  # ("header", y) or ("more", width)
        hit = self._fixed.get(slot)
        if hit is None or hit[0] != key:
            hit = self._fixed[slot] = (key, make())
        return hit[1]

    def clear_rows(self) -> None:
        """Drop every row's strip (the width changed)."""
        self._rows.clear()

    def clear(self) -> None:
        """Drop every strip, rows' and fixed lines' (the styles, the metric or the store changed)."""
        self._rows.clear()
        self._fixed.clear()


def more_strip(shown: tuple[int, int, int], total: int, width: int, base: Style, *, focusable: bool,
               cursor: bool) -> Strip:
    """``rows 1-18 of 128 · 110 more ↓`` (with how to scroll, where it fits) for ``shown`` =
    (first shown, last shown, hidden below)."""
    first, last, below = shown
    text = f" rows {first}–{last} of {total}"
    text += f" · {below} more ↓" if below else " · end"
    if focusable:
        hint = "  (tab here, ↑↓ pgup pgdn; or the mouse wheel)"
        if cursor:
            hint = "  (tab here, ↑↓ pgup pgdn, enter opens the GPU; or the mouse wheel)"
        text += hint if width >= len(text) + len(hint) else ""
    return Strip([Segment(text, base + Style(bold=True))]).crop_extend(0, width, base)


def placeholder_strip(text: str, index: int, width: int, base: Style) -> Strip:
    """Line ``index`` of ``text`` wrapped to ``width``, so a long reason ("NVML init failed: ...") is read whole."""
    lines = textwrap.wrap(text, max(10, width - 2)) or [""]
    line = lines[index] if 0 <= index < len(lines) else ""
    return Strip([Segment(" " + line, base)]).crop_extend(0, width, base)


def fit(segs: list[Segment], width: int, base: Style) -> Strip:
    """``Strip(segs).crop_extend(0, width, base)``, in half the time when the row is not too wide (the usual case)."""
    used = sum(cell_len(s.text) for s in segs)
    if used > width:
        return Strip(segs).crop_extend(0, width, base)
    return Strip([*segs, Segment(" " * (width - used), base)] if used < width else segs, width)
