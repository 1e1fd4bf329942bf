"""A compositor whose partial updates render only what they repaint.

Textual's :class:`~textual._compositor.Compositor` makes a partial update from
the union of the dirty regions (the *crop*): it renders, in full, every widget
whose *clip* meets the crop. A widget's clip is its container's region, so a
child of the screen (the footer, a panel, the screen itself) is rendered on
every frame, and a plot is rendered whole when one of its lines changed. Only
the dirty spans are then written to the terminal: the other lines are made and
thrown away. With the header's clock at the top and a table row at the bottom
changing every second, that is every widget, every second (``benchmarks/tui_screens.py``).

:class:`SparseCompositor` renders, for a partial update, only the widgets whose
visible part meets a dirty region not already held whole by a widget in front
of it, and of each only the rows from the first to the last that such a region
touches. The other rows are padded with a blank
strip: a line outside the dirty regions is never written, and a cut beside a
dirty span on a repainted line is never written either (Textual writes only
the spans), so the terminal receives exactly what Textual's own update sends;
``tests/unit/tui/test_sparse_compositor.py`` compares the two, byte for byte.
Full updates (a resize, a new screen) are Textual's own.

The hook is ``Compositor._get_renders``, the same in Textual 4.0 and 8.2.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.strip import Strip


class SparseCompositor(Compositor):
    """:class:`Compositor` with partial updates that render only the dirty widgets' dirty rows."""

    def __init__(self) -> None:
        super().__init__()
        self._repaint: list[tuple[int, int, int, int]] | None = None
        """The dirty regions of the partial update being made (None otherwise)."""
        self.rendered_rows = 0
        """Widget rows rendered by partial updates (for the tests)."""

    def render_partial_update(self) -> ChopsUpdate | None:
        """As Textual's, rendering only the widgets and rows the dirty regions meet."""
        self._repaint = [tuple(r) for r in self._dirty_regions]  # type: ignore[misc]
        try:
            return super().render_partial_update()
        finally:
            self._repaint = None

    def _get_renders(self, crop: Region | None = None) -> Iterable[tuple[Region, Region, list[Strip]]]:
        repaint = self._repaint
        if repaint is None or crop is None:
            return super()._get_renders(crop)
        return self._dirty_renders(repaint)

    def _dirty_renders(self, repaint: list[tuple[int, int, int, int]]
                       ) -> Iterable[tuple[Region, Region, list[Strip]]]:
        """(region, clip, strips) of each widget a dirty region meets, front to back as Textual's.

        ``strips`` covers the widget's visible part (its region within its clip), as
        Textual's do; rows no dirty region meets hold a blank strip that is never written.
        A dirty region lies within the widget that made it dirty; once a widget whose
        visible part holds the whole region is drawn, the widgets behind it cannot show
        there (the front one takes every cut), so the region is dropped for them; when
        none is left, nothing behind is drawn at all.
        """
        pending = repaint
        for widget, (region, clip) in self.visible_widgets.items():
            if not pending:
                return
            vx, vy, vw, vh = region.intersection(clip)
            if not (vw and vh):
                continue
            vx2, vy2 = vx + vw, vy + vh
            top, bottom = vy2, vy
            behind: list[tuple[int, int, int, int]] = []
            for r in pending:
                rx, ry, rw, rh = r
                if rx < vx2 and vx < rx + rw and ry < vy2 and vy < ry + rh:
                    top = min(top, max(ry, vy))
                    bottom = max(bottom, min(ry + rh, vy2))
                    if vx <= rx and vy <= ry and rx + rw <= vx2 and ry + rh <= vy2:
                        continue  # held whole by this widget: hidden behind it
                behind.append(r)
            pending = behind
            if top >= bottom:
                continue
            self.rendered_rows += bottom - top
            strips = widget.render_lines(Region(vx - region.x, top - region.y, vw, bottom - top))
            if top > vy or bottom < vy2:
                pad = _blank(vw)
                strips = [*([pad] * (top - vy)), *strips, *([pad] * (vy2 - bottom))]
            yield region, clip, strips


@lru_cache(maxsize=64)
def _blank(width: int) -> Strip:
    """A blank strip ``width`` cells wide (one per width: it is only cut, never written)."""
    return Strip.blank(width)


class SparseScreen:
    """Mixin for a :class:`~textual.screen.Screen`: its frames use :class:`SparseCompositor`."""

    _compositor: Compositor

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401  a mixin: forwards what its screen class takes
        super().__init__(*args, **kwargs)
        self._compositor = SparseCompositor()
