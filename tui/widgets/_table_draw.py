"""How an :class:`~gpulens.tui.widgets._table.IncrementalTable` lays out and draws its lines.

Pure functions of the table's columns, ``(key, label, right-aligned, width)`` each: which columns
show at a width and how wide each is, a row's strip (plain, or with each marked cell in its
threshold level's style), the header with the sort arrow and letters. The table caches what
they return; nothing here touches a widget.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import lru_cache

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from gpulens.tui.widgets.thresholds import OK
from gpulens.tui.widgets.thresholds import STYLES as LEVEL_STYLES

Column = tuple[str, str, bool, int]
"""(key, label, right-aligned, width)."""
Layout = tuple[tuple[int, int], ...]
"""(column index, width) of each column shown."""


def layout_columns(columns: Sequence[Column], drop: Sequence[str], flex: Sequence[str], sort_index: int,
                   width: int) -> Layout:
    """The columns shown at ``width`` cells and their widths.

    Columns in ``drop`` go first while the row is too wide (never the sort column); spare width
    goes to the ``flex`` columns (a column named twice takes twice the share).
    """
    keys = [c[0] for c in columns]
    shown = list(range(len(columns)))
    widths = [c[3] for c in columns]

    def need() -> int:
        return 1 + sum(widths[i] for i in shown) + len(shown) - 1

    dropped: list[int] = []
    for key in drop:
        if need() <= width:
            break
        i = keys.index(key)
        if i != sort_index and len(shown) > 1:
            shown.remove(i)
            dropped.append(i)
    for i in dropped[:-1]:  # a later, wider drop may leave room for an earlier one
        if need() + widths[i] + 1 <= width:
            shown.append(i)
    shown.sort()
    flexed = [i for i in (keys.index(k) for k in flex) if i in shown]  # repeat = more
    spare = width - need()
    if spare > 0 and flexed:
        for n, i in enumerate(flexed):
            widths[i] += spare // len(flexed) + (1 if n < spare % len(flexed) else 0)
    return tuple((i, widths[i]) for i in shown)


def shown_cells(cells: tuple[str, ...], layout: Layout) -> tuple[str, ...]:
    """The texts of the cells in the columns shown: a dropped column's text (a power draw that
    changes every second) must not repaint the row, so only what is drawn is compared."""
    if len(layout) == len(cells):
        return cells
    return tuple(cells[i] for i, _ in layout)


def clip(text: str, w: int, cut_left: bool) -> str:
    """``text`` in ``w`` cells: cut at the end (``nam…``), or at the start (``…tail``)."""
    if len(text) <= w:
        return text
    return "…" + text[len(text) - w + 1:] if cut_left else text[: w - 1] + "…"


def plain_line(columns: Sequence[Column], cut_left: Collection[str], layout: Layout, cells: Sequence[str],
               style: Style, width: int) -> Strip:
    """A row in one style."""
    parts = []
    for i, w in layout:
        key, _, right, _ = columns[i]
        text = clip(cells[i], w, key in cut_left)
        parts.append(text.rjust(w) if right else text.ljust(w))
    return Strip([Segment(" " + " ".join(parts), style)]).crop_extend(0, width, style)


def marked_line(columns: Sequence[Column], cut_left: Collection[str], layout: Layout, cells: Sequence[str],
                style: Style, width: int, level: Callable[[str, str], int], coloured: bool) -> Strip:
    """A row with each marked cell in its level's style when ``coloured`` (the marker keeps the
    meaning without colour: level colours would vanish on the cursor's background)."""
    segs = [Segment(" ", style)]
    for n, (i, w) in enumerate(layout):
        key, _, right, _ = columns[i]
        text = cells[i]
        lvl = level(key, text)
        text = clip(text, w, key in cut_left)
        if n:
            segs.append(Segment(" ", style))
        segs.append(Segment(text.rjust(w) if right else text.ljust(w),
                            style + LEVEL_STYLES[lvl] if lvl != OK and coloured else style))
    return Strip(segs).crop_extend(0, width, style)


def header_line(columns: Sequence[Column], sort_keys: Mapping[str, str], layout: Layout, sort_index: int,
                reverse: bool, style: Style, width: int) -> Strip:
    """Labels, the sort column's arrow, and each sort letter underlined (``Util`` with U)."""
    key_style = style + Style(underline=True)
    arrow = "↓" if reverse else "↑"
    segs = [Segment(" ", style)]
    for n, (i, w) in enumerate(layout):
        key, label, right, _ = columns[i]
        if i == sort_index:
            label = (label if len(label) < w else label[: w - 1]) + arrow
        label = label[:w]
        pad = " " * (w - len(label))
        if n:
            segs.append(Segment(" ", style))
        if right:
            segs.append(Segment(pad, style))
        letter = sort_keys.get(key, "")
        at = label.lower().find(letter.lower()) if letter else -1
        if at < 0:
            segs.append(Segment(label, style))
        else:
            segs += [Segment(label[:at], style), Segment(label[at], key_style), Segment(label[at + 1:], style)]
        if not right:
            segs.append(Segment(pad, style))
    return Strip(segs).crop_extend(0, width, style)


@lru_cache(maxsize=64)
def wrapped(text: str, width: int) -> tuple[str, ...]:
    """``text`` wrapped to ``width`` cells (once per text and width: a tick asks for it)."""
    return tuple(textwrap.wrap(text, max(10, width - 2)) or [""])
