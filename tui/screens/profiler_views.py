"""Screens the profiler opens: the timeline View and the Analyze summary."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from gpulens.analysis.trace.report import fmt_bytes, fmt_us
from gpulens.analysis.trace.summary import ProcessSummary, TraceSummary
from gpulens.analysis.trace.timeline import Timeline
from gpulens.tui.widgets.step_chart import StepChart
from gpulens.tui.widgets.timeline import TraceTimeline


class TimelineScreen(Screen[None]):
    """A trace's timeline with a detail pane for the selected event."""

    DEFAULT_CSS = """
    TimelineScreen #tl-title { height: 1; background: $primary-muted; padding: 0 1; }
    TimelineScreen #tl-detail { height: auto; max-height: 12; border-top: solid $panel; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "leave", "Back")]

    def __init__(self, timeline: Timeline, title: str) -> None:
        super().__init__()
        self.timeline = timeline
        self.title_text = title

    def compose(self) -> ComposeResult:
        yield Static(f"{self.title_text}  ·  {len(self.timeline.rows)} rows  ·  "
                     f"{fmt_us(self.timeline.end_us - self.timeline.start_us)}", id="tl-title")
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


def summary_lines(p: ProcessSummary) -> Text:
    """Window, steps, GPU breakdown, launches, copies, memory and findings of one process."""
    t = Text()
    title = f"process {p.pid}" + (f" ({p.name})" if p.name else "") + (f" rank {p.rank}" if p.rank is not None else "")
    t.append(title + "\n", style="bold")
    t.append(f"window {fmt_us(p.window_us)} · {p.threads} thread(s) · steps: {p.steps_note}\n")
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


class AnalyzeScreen(Screen[None]):
    """Summary of an analysed trace: findings, step-time chart and the torch-style op table; p cycles processes."""

    DEFAULT_CSS = """
    AnalyzeScreen VerticalScroll { height: auto; max-height: 50%; }
    AnalyzeScreen #an-summary { height: auto; padding: 0 1; }
    AnalyzeScreen #an-steps { padding: 0 1; }
    AnalyzeScreen DataTable { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "leave", "Back"),
        Binding("p", "next_process", "Next process"),
    ]

    def __init__(self, summary: TraceSummary, title: str = "") -> None:
        super().__init__()
        self.summary = summary
        self.title_text = title or summary.path
        self.process_index = 0

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="an-summary")
            yield StepChart(id="an-steps")
        yield DataTable(id="an-ops", zebra_stripes=True, cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("Name", "Self CPU %", "Self CPU", "CPU total", "Self CUDA", "# of Calls")
        self._show()
        table.focus()

    def _show(self) -> None:
        summary = self.query_one("#an-summary", Static)
        table = self.query_one(DataTable)
        chart = self.query_one(StepChart)
        table.clear()
        if not self.summary.processes:
            summary.update("no CPU or GPU events in this trace")
            chart.display = False
            return
        p = self.summary.processes[self.process_index]
        # Without step markers the summary already says so: no chart.
        chart.steps_ms = tuple(s.dur_us / 1000 for s in p.steps)
        chart.display = bool(p.steps)
        head = Text(f"{self.title_text}  ({self.process_index + 1}/{len(self.summary.processes)} processes)\n", style="dim")
        summary.update(head + summary_lines(p))
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

    def action_leave(self) -> None:
        """Back to the profiler."""
        self.dismiss(None)


def details_text(details: dict[str, Any]) -> str:
    """One-line form of an event's details (for notifications and tests)."""
    return f"{details['name']} {fmt_us(details['dur_us'])}"
