"""Where each frame of a flame graph goes on screen (pure; no Textual).

Row 0 is the root (drawn at the bottom). The ancestors of the focused node
fill full-width rows below it; the focused node is full width and its
descendants get columns in proportion to their total. Frames narrower
than one cell are left out with their subtrees. With ``collapsed``, a
linear chain of single-child frames (no self value) is one span.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulens.analysis.flame.model import Profile
from gpulens.analysis.flame.query import chain_end


@dataclass(frozen=True, slots=True)
class Span:
    """A bar: columns ``[x0, x1)`` on ``row``; ``node`` .. ``tail`` is the chain it shows."""

    row: int
    x0: int
    x1: int
    node: int
    tail: int

    @property
    def chain_length(self) -> int:
        return self.tail - self.node + 1


@dataclass(frozen=True, slots=True)
class Layout:
    rows: tuple[tuple[Span, ...], ...]
    by_node: dict[int, Span]
    width: int
    focus: int


def _tail(profile: Profile, node: int, collapsed: bool) -> int:
    return chain_end(profile, node) if collapsed else node


def compute_layout(profile: Profile, focus: int, width: int, collapsed: bool, max_rows: int = 4096) -> Layout:
    """Lay out the subtree of ``focus`` (plus its ancestors) in ``width`` columns."""
    width = max(width, 1)
    rows: list[list[Span]] = []
    by_node: dict[int, Span] = {}
    for anc in profile.ancestors(focus)[:-1]:
        span = Span(len(rows), 0, width, anc, anc)
        rows.append([span])
        by_node[anc] = span
    base_row = len(rows)
    total = profile.total_of(focus)
    scale = width / total if total > 0 else 0.0
    tail = _tail(profile, focus, collapsed)
    top = Span(base_row, 0, width, focus, tail)
    rows.append([top])
    by_node[focus] = top
    frontier = [(top, 0.0)]
    # Not node_total: the first frame should not wait for every node's total.
    child_totals = profile.child_totals
    while frontier and len(rows) < max_rows:
        next_frontier: list[tuple[Span, float]] = []
        row_spans: list[Span] = []
        row = len(rows)
        for parent, px in frontier:
            x = px
            for child, child_total in child_totals(parent.tail):
                w = child_total * scale
                x0, x1 = round(x), round(x + w)
                x += w
                if x1 <= x0:
                    continue
                span = Span(row, x0, min(x1, parent.x1), child, _tail(profile, child, collapsed))
                row_spans.append(span)
                by_node[child] = span
                next_frontier.append((span, x - w))
        if not row_spans:
            break
        rows.append(row_spans)
        frontier = next_frontier
    return Layout(tuple(tuple(r) for r in rows), by_node, width, focus)
