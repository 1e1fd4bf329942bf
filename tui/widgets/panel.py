"""A user-defined panel from the config (``[[panels]]``): a plot, or its error."""

from __future__ import annotations

import math

from gpulens.core.config import Panel
from gpulens.core.errors import GpulensError
from gpulens.core.events import PanelData, PanelProvider
from gpulens.core.units import num
from gpulens.tui.widgets.plot import TimeSeriesPlot


class CustomPanel(TimeSeriesPlot):
    """Plots a :class:`~gpulens.core.events.PanelData`; its error shows in place."""

    def __init__(self, panel: Panel, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        unit = panel.unit

        def fmt(v: float | None) -> str:
            return num(v, unit, 1 if v is not None and abs(v) < 10 else 0)

        super().__init__(panel.title, fmt, lo=0.0, hi=None, name=name, id=id, classes=classes)
        self.panel = panel

    def show(self, data: PanelData, window: str) -> None:
        """Plot ``data`` (or show its error)."""
        if data.error is not None:
            self.set_data([], f"error: {data.error}", window)
            return
        values = [v for _, v in data.points if not math.isnan(v)]
        self.set_data(values or [], None if values else "no points in the window", window)


def panel_series(panel: Panel, host: str | None, job: str | None, window_s: float, store: PanelProvider,
                 source: object) -> PanelData:
    """A custom panel's series: ``store``'s for a ``metric``, ``source``'s for an ``expr`` (Prometheus);
    an error to show in the panel's place, never an exception (a bad panel must not take the screen down)."""
    try:
        if panel.metric:
            return store.panel_series(panel.metric, host, job, window_s)
        if panel.expr and isinstance(source, PanelProvider):
            return source.panel_series(panel.expr, host, job, window_s)
        return PanelData(error="this source cannot evaluate expressions (use --prometheus)")
    except (GpulensError, ValueError) as err:  # providers return their errors; a third party's own
        return PanelData(error=str(err))
