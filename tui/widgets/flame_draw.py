"""Drawing a flame graph's lines: pure functions of a profile, its layout and the view's state.

:class:`~gpulens.tui.widgets.flame_view.FlameView` hands these the styles it reads from its theme
and component classes; nothing here touches a widget, so a row or the status line can be checked
directly.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.segment import Segment
from rich.style import Style
from textual.color import Color

from gpulens.analysis.flame.labels import colour_index, format_value
from gpulens.analysis.flame.model import Profile
from gpulens.analysis.flame.query import SearchResult
from gpulens.tui.widgets.flame_layout import Span

STATUS_SEPARATOR = "  │ "


def flame_palette(dark: bool) -> list[tuple[Style, Style]]:
    """Twelve (bar, neighbour) style pairs: hues spread round the wheel, lightness chosen for the
    theme's background so labels stay readable on dark and light themes."""
    lightness = 0.72 if not dark else 0.36
    palette: list[tuple[Style, Style]] = []
    for hue in (0, 25, 45, 80, 140, 170, 195, 215, 250, 280, 310, 335):
        colour = Color.from_hsl(hue / 360, 0.55, lightness)
        lighter = colour.lighten(0.07)
        palette.append(
            (
                Style(bgcolor=colour.rich_color, color=colour.get_contrast_text().rich_color),
                Style(bgcolor=lighter.rich_color, color=lighter.get_contrast_text().rich_color),
            )
        )
    return palette


def span_label(profile: Profile, span: Span) -> str:
    """A bar's text: its frame, or a collapsed chain's first and last frames and its length."""
    label: str = profile.label(span.node)
    if span.tail != span.node:
        label = f"{label} ⋯ {profile.label(span.tail)} [{span.chain_length}]"
    return label


def span_matches(found: SearchResult, profile: Profile, span: Span) -> bool:
    """Whether any frame of the bar (a collapsed chain's included) matches the search."""
    matched, frame = found.matched_frames, profile.node_frame
    return any(frame[k] in matched for k in range(span.node, span.tail + 1))


def row_segments(row: Sequence[Span], profile: Profile, width: int, palette: list[tuple[Style, Style]],
                 found: SearchResult | None, selected: int, *, empty: Style, dim: Style,
                 selected_style: Style) -> list[Segment]:
    """One row of bars, ``width`` cells: matches bold and underlined, the rest dimmed while searching."""
    segments: list[Segment] = []
    x = 0
    for k, span in enumerate(row):
        if span.x0 > x:
            segments.append(Segment(" " * (span.x0 - x), empty))
        w = span.x1 - span.x0
        if w <= 0:
            continue
        style = palette[colour_index(profile.node_info(span.tail).module, len(palette))][k % 2]
        if found is not None and not span_matches(found, profile, span):
            style = dim
        elif found is not None:
            style = style + Style(bold=True, underline=True)
        if span.node == selected:
            style = style + selected_style
        if w == 1:
            segments.append(Segment(" ", style))
        else:
            # The last cell is a gap so neighbouring bars stay apart even when dimmed.
            segments.append(Segment(span_label(profile, span)[: w - 1].ljust(w - 1), style))
            segments.append(Segment(" ", empty))
        x = span.x1
    if x < width:
        segments.append(Segment(" " * (width - x), empty))
    return segments


def status_text(profile: Profile, span: Span, focus: int, found: SearchResult | None, search_error: str,
                paused: bool, pending: bool) -> str:
    """The status line: the selected frame's figures, then the search (or its error) and the pause."""
    node = span.tail
    info = profile.node_info(node)
    unit = profile.unit
    root_total = profile.total or 1.0
    focus_total = profile.total_of(focus) or 1.0
    total, selfv = profile.total_of(node), profile.node_self[node]
    short = "/".join(info.file.replace("\\", "/").split("/")[-2:]) if info.file else ""
    where = f"  {short}:{info.line}" if short and info.line else f"  {short}" if short else ""
    left = (
        f" {profile.label(node)}  self {format_value(selfv, unit)}  total {format_value(total, unit)}"
        f"  {100 * total / root_total:.1f}% of root  {100 * total / focus_total:.1f}% of focus{where}"
    )
    right = ""
    if found is not None:
        scope = "focus" if found.root else "all"
        right = f"/{found.pattern}/ {100 * found.share:.1f}% of {scope} ({format_value(found.value, unit)})"
    elif search_error:
        right = search_error
    if paused:
        right += "  PAUSED" + (" (update waiting)" if pending else "")
    return left + (STATUS_SEPARATOR + right.strip() if right else "")


def fit_status(text: str, width: int) -> str:
    """``text`` in ``width`` cells: the search and pause state whole, the frame details shortened."""
    left, sep, right = text.partition(STATUS_SEPARATOR)
    if sep and len(text) > width:
        room = max(width - len(right) - 3, 0)
        text = (left[: max(room - 1, 0)] + "…" if len(left) > room else left.ljust(room)) + " │ " + right
    return text[:width].ljust(width)
