"""Headline statistics of the fleet over the chosen window (overview)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.widget import Widget

from gpulens.core.units import pct, window_name
from gpulens.store.views import FleetStats


class StatsBar(Widget):
    """``GPU util 63% · SM 55% · GPU mem 48% · busy 96/128 GPUs · 16 hosts · 5 jobs (5m)``."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"stats--label", "stats--value"}
    DEFAULT_CSS = """
    StatsBar { height: 1; padding: 0 1; }
    StatsBar > .stats--label { color: $text-muted; }
    StatsBar > .stats--value { color: $text; text-style: bold; }
    """

    def __init__(self, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.stats: FleetStats | None = None

    def set_stats(self, stats: FleetStats) -> None:
        """Repaint only when a shown figure changed."""
        if self.stats is None or self.parts(self.stats) != self.parts(stats):
            self.stats = stats
            self.refresh()

    @staticmethod
    def parts(s: FleetStats) -> list[tuple[str, str]]:
        """(label, value) pairs as shown."""
        hosts = f"{s.hosts_up}/{s.hosts}" if s.hosts_up != s.hosts else str(s.hosts)
        if s.of_hosts:
            hosts += f" of {s.of_hosts} (filter)"
        return [
            ("GPU util", pct(s.gpu_util_percent)), ("SM activity", pct(s.sm_activity_percent)),
            ("GPU mem", pct(s.gpu_mem_used_percent)), ("busy GPUs", f"{s.busy_gpus}/{s.total_gpus}"),
            ("hosts", hosts), ("jobs", str(s.jobs)), ("window", window_name(s.window_s)),
        ]

    def render(self) -> Text:
        """The figures, separated by dots."""
        if self.stats is None:
            return Text("waiting for the first sample…")
        label = self.get_component_rich_style("stats--label")
        value = self.get_component_rich_style("stats--value")
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, (k, v) in enumerate(self.parts(self.stats)):
            if i:
                text.append(" · ", style=label)
            text.append(f"{k} ", style=label)
            text.append(v, style=value)
        return text
