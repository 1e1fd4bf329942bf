"""Screens the profiler opens: the timeline View and the Analyze summary (with its plotext charts)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from gpulens.analysis.trace.report import fmt_bytes, fmt_us
from gpulens.analysis.trace.summary import ProcessSummary, TraceSummary
from gpulens.analysis.trace.timeline import Timeline
from gpulens.tui._compositor import SparseScreen
from gpulens.tui.widgets.step_chart import (
    ChartView,
    kernel_histogram,
    ops_chart,
    rank_chart,
    step_chart,
)
from gpulens.tui.widgets.timeline import TraceTimeline


class TimelineScreen(SparseScreen, Screen[None]):
    """A trace's timeline with a detail pane for the selected event."""

    DEFAULT_CSS = """
    TimelineScreen #tl-title { height: 1; background: $primary-muted; padding: 0 1; }
    TimelineScreen #tl-detail { height: auto; max-height: 30%; border-top: solid $panel; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "leave", "Back")]

    def __init__(self, timeline: Timeline, title: str) -> None:
        super().__init__()
        self.timeline = timeline
        self.title_text = title

    def compose(self) -> ComposeResult:
        lanes = len(self.timeline.lanes) or len(self.timeline.rows)
        note = f"  ·  {self.timeline.note}" if self.timeline.note else ""
        yield Static(f"{self.title_text}  ·  {lanes} lanes  ·  "
                     f"{fmt_us(self.timeline.end_us - self.timeline.start_us)}{note}", id="tl-title")
        yield TraceTimeline(self.timeline, id="timeline")
        yield Static("enter on an event shows its name, duration and args here", id="tl-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(TraceTimeline).focus()

    def on_trace_timeline_event_selected(self, event: TraceTimeline.EventSelected) -> None:
        d = event.details
        text = Text.assemble((d["name"], "bold"), f"  {fmt_us(d['dur_us'])}  at +{fmt_us(d['start_us'])}  ({d['category']})")
        for key, value in list(d["args"].items())[:10]:
            shown = repr(value) if not isinstance(value, str) else value
            text.append(f"\n{key}: ", style="dim")
            text.append(shown[:200])
        self.query_one("#tl-detail", Static).update(text)

    def action_leave(self) -> None:
        """Back to the profiler."""
        self.dismiss(None)


def summary_lines(p: ProcessSummary, steps_note: str = "") -> Text:
    """Window, steps, GPU breakdown, launches, copies, memory and findings of one process.

    ``steps_note`` replaces the ProfilerStep summary when the steps came from elsewhere.
    """
    t = Text()
    title = f"process {p.pid}" + (f" ({p.name})" if p.name else "") + (f" rank {p.rank}" if p.rank is not None else "")
    t.append(title + "\n", style="bold")
    t.append(f"window {fmt_us(p.window_us)} · {p.threads} thread(s) · steps: {steps_note or p.steps_note}\n")
    g = p.gpu
    if g is None:
        t.append("GPU: no GPU activity in this trace\n", style="dim")
    else:
        t.append(f"GPU busy {g.pct(g.busy_us):.1f}%  idle {g.pct(g.idle_us):.1f}%  compute {g.pct(g.compute_us):.1f}%  "
                 f"communication {g.pct(g.comm_us):.1f}%  memcpy {g.pct(g.memcpy_us):.1f}%\n")
    if p.launch is not None:
        t.append(f"launches: {p.launch.count}, mean {fmt_us(p.launch.mean_cpu_us)} CPU each\n")
    for m in p.memcpy[:3]:
        bw = f"{m.gbps:.1f} GB/s" if m.gbps is not None else "n/a (no byte counts)"
        t.append(f"{m.kind}: {m.count}x {fmt_bytes(m.total_bytes)} at {bw}\n")
    for mem in p.memory[:3]:
        t.append(f"peak memory {mem.device}: {fmt_bytes(mem.peak_allocated_bytes)}"
                 + (" (relative)" if mem.relative else "") + "\n")
    if p.kernels:
        k = p.kernels[0]
        t.append(f"top kernel: {k.name[:80]} ({k.pct_of_busy:.1f}% of busy)\n")
    for f in p.findings:
        t.append(f"• {f}\n", style="bold")
    t.append(f"Self CPU time total: {fmt_us(p.self_cpu_total_us)}", style="bold")
    return t


@dataclass(frozen=True, slots=True)
class RankCharts:
    """What the charts of one analysed file (rank) draw, beside its :class:`ProcessSummary`.

    ``step_ms``: its step times (ProfilerStep, else optimizer-step or annotation
    boundaries, as ``steps_from`` says); ``kernel_us``: every GPU kernel's duration.
    """

    label: str
    step_ms: tuple[float, ...]
    steps_from: str
    kernel_us: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class AnalysisExtras:
    """The charts' data of an analysis: one :class:`RankCharts` per file, and the ranks' spread.

    ``process_rank``: for each process of the summary, the index of its file in ``ranks``.
    """

    ranks: tuple[RankCharts, ...]
    process_rank: tuple[int, ...]
    notes: tuple[str, ...] = ()


CHARTS = ("steps", "ops", "kernels")
WIDE = 120
SHORT = 32


class AnalyzeScreen(SparseScreen, Screen[None]):
    """Summary of an analysed trace (or of every rank): findings, charts and the torch-style op table.

    Charts (plotext, each drawn once per size): step time (per rank when there
    are several), the top ops by self CPU, and the kernel-duration histogram.
    ``p`` cycles processes (ranks); below 120 columns one chart shows at a time, ``c`` cycles them.
    """

    DEFAULT_CSS = """
    AnalyzeScreen VerticalScroll { height: auto; max-height: 40%; }
    AnalyzeScreen #an-summary { height: auto; padding: 0 1; }
    AnalyzeScreen #an-charts { height: 10; }
    AnalyzeScreen.short #an-charts { height: 7; }
    AnalyzeScreen.short VerticalScroll { max-height: 30%; }
    AnalyzeScreen #an-charts ChartView { width: 1fr; height: 1fr; padding: 0 1; }
    AnalyzeScreen.narrow #an-charts ChartView { display: none; }
    AnalyzeScreen.narrow #an-charts ChartView.-shown { display: block; }
    AnalyzeScreen DataTable { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "leave", "Back"),
        Binding("n", "next_process", "Next process"),  # not p: p pauses everywhere else (docs/keys.md)
        Binding("c", "next_chart", "Next chart"),
    ]

    def __init__(self, summary: TraceSummary, title: str = "", extras: AnalysisExtras | None = None) -> None:
        super().__init__()
        self.summary = summary
        self.title_text = title or summary.path
        self.extras = extras
        self.process_index = 0
        self.chart_index = 0

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="an-summary")
        with Horizontal(id="an-charts"):
            for kind in CHARTS:
                yield ChartView(id=f"an-chart-{kind}")
        yield DataTable(id="an-ops", zebra_stripes=True, cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        self._fit(self.app.size.width, self.app.size.height)
        table = self.query_one(DataTable)
        table.add_columns("Name", "Self CPU %", "Self CPU", "CPU total", "Self CUDA", "# of Calls")
        self._show()
        table.focus()

    def on_resize(self, event: events.Resize) -> None:
        """Three charts side by side from 120 columns, else one (``c`` cycles); shorter below 32 rows."""
        self._fit(event.size.width, event.size.height)

    def _fit(self, width: int, height: int) -> None:
        self.set_class(width < WIDE, "narrow")
        self.set_class(height < SHORT, "short")

    def _rank(self) -> RankCharts | None:
        ex = self.extras
        if ex is None or self.process_index >= len(ex.process_rank):
            return None
        return ex.ranks[ex.process_rank[self.process_index]]

    def _show_charts(self, p: ProcessSummary) -> None:
        rank, ex, i = self._rank(), self.extras, self.process_index
        stepped = [r for r in ex.ranks if r.step_ms] if ex is not None else []
        steps_view = self.query_one("#an-chart-steps", ChartView)
        if len(stepped) > 1:
            labels = [r.label for r in stepped]
            means = [sum(r.step_ms) / len(r.step_ms) for r in stepped]
            steps_view.show(("ranks",), lambda w, h, c: rank_chart(labels, means, w, h, color=c))
        else:
            step_ms = rank.step_ms if rank is not None else tuple(s.dur_us / 1000 for s in p.steps)
            steps_view.show(("steps", i), lambda w, h, c: step_chart(step_ms, w, h, color=c))
        names = [op.name for op in p.cpu_ops[:10]]
        self_ms = [op.self_cpu_us / 1000 for op in p.cpu_ops[:10]]
        order = sorted(range(len(names)), key=lambda k: -self_ms[k])
        top_names, top_ms = [names[k] for k in order], [self_ms[k] for k in order]
        self.query_one("#an-chart-ops", ChartView).show(("ops", i), lambda w, h, c: ops_chart(top_names, top_ms, w, h, color=c))
        kernels = rank.kernel_us if rank is not None else ()
        kview = self.query_one("#an-chart-kernels", ChartView)
        if rank is None:
            kview.show(("kernels", None), lambda w, h, c: Text("kernel durations: not loaded with this analysis",
                                                                style="dim"))
        else:
            key = ("kernels", ex.process_rank[i] if ex is not None else i)
            kview.show(key, lambda w, h, c: kernel_histogram(kernels, w, h, color=c))
        for n, kind in enumerate(CHARTS):
            self.query_one(f"#an-chart-{kind}", ChartView).set_class(n == self.chart_index, "-shown")

    def _show(self) -> None:
        summary = self.query_one("#an-summary", Static)
        table = self.query_one(DataTable)
        table.clear()
        charts = self.query_one("#an-charts")
        if not self.summary.processes:
            summary.update("no CPU or GPU events in this trace")
            charts.display = False
            return
        p = self.summary.processes[self.process_index]
        self._show_charts(p)
        head = Text(f"{self.title_text}  ({self.process_index + 1}/{len(self.summary.processes)} processes)\n", style="dim")
        rank = self._rank()
        note = ""
        if rank is not None and rank.step_ms and not p.steps:
            n, mean = len(rank.step_ms), sum(rank.step_ms) / len(rank.step_ms)
            note = f"{n} step{'s' if n != 1 else ''}, mean {mean:.2f} ms, from {rank.steps_from}"
        body = summary_lines(p, note)
        for note in self.extras.notes if self.extras is not None else ():
            body.append(f"\n{note}", style="bold")
        summary.update(head + body)
        total = p.self_cpu_total_us
        # The five number columns take ~58 cells: shorten names so they stay on screen.
        limit = max(20, min(60, self.app.size.width - 58))
        for op in p.cpu_ops:
            name = op.name if len(op.name) <= limit else op.name[: limit - 1] + "…"
            pct = 100 * op.self_cpu_us / total if total > 0 else 0.0
            # Text, not str: DataTable reads a str as markup, and names like "[param|cuda]" vanish.
            table.add_row(Text(name), f"{pct:.2f}%", fmt_us(op.self_cpu_us), fmt_us(op.cpu_total_us),
                          fmt_us(op.self_cuda_us), str(op.calls))

    def action_next_process(self) -> None:
        """Show the next process (rank) of the trace."""
        if self.summary.processes:
            self.process_index = (self.process_index + 1) % len(self.summary.processes)
            self._show()

    def action_next_chart(self) -> None:
        """Narrow screens: show the next chart (step time, top ops, kernel durations)."""
        self.chart_index = (self.chart_index + 1) % len(CHARTS)
        for n, kind in enumerate(CHARTS):
            self.query_one(f"#an-chart-{kind}", ChartView).set_class(n == self.chart_index, "-shown")

    def action_leave(self) -> None:
        """Back to the profiler."""
        self.dismiss(None)
