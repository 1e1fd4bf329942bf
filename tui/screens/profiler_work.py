"""The profiler screen's worker-thread jobs: load a timeline, analyze, export (one or every rank).

Each runs in a thread worker (:class:`gpulens.tui.workers.Background`),
reports progress through the screen's ``set_progress`` (in the app), stops
when the screen goes (:class:`Cancelled`), and hands its result or its
failure back with :func:`call_in_app`. Several files are loaded one after
the other, each reduced to what the screen shows before the next is read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from textual.app import App

from gpulens.tui.screens.profiler_rows import FileRow, member_names, rank_labels, rank_names
from gpulens.tui.screens.profiler_views import AnalyzeScreen, TimelineScreen
from gpulens.tui.workers import Cancelled, call_in_app, check_cancelled

if TYPE_CHECKING:
    from gpulens.analysis.trace.rank_report import RankReport
    from gpulens.analysis.trace.summary import TraceSummary

_log = logging.getLogger("gpulens.tui.screens.profiler_work")


class WorkHost(Protocol):
    """What the jobs need of the profiler screen."""

    @property
    def app(self) -> App[Any]:
        """The running app (screens are pushed on it)."""
        ...

    def set_progress(self, fraction: float | None, what: str) -> None:
        """Show the progress bar (None hides it)."""
        ...

    def work_failed(self, err: Exception) -> None:
        """Say why the job failed."""
        ...


def _shown(host: WorkHost, job: Callable[[], Callable[[], None]]) -> None:
    """Run ``job`` in this worker, then hide the progress bar and call what it returned (its result's
    delivery). Stops quietly when the screen goes; a failure is said by ``host.work_failed``."""
    try:
        deliver = job()
    except Cancelled:  # the screen went away
        return
    except Exception as err:  # a trace file of any shape: whatever reading it raises is said, never kills the UI
        _log.debug("trace work failed", exc_info=True)
        call_in_app(host.work_failed, err)
        return
    call_in_app(host.set_progress, None, "")
    deliver()


def _progress(host: WorkHost, index: int, count: int) -> Callable[[float, str], None]:
    """Progress of file ``index`` of ``count`` as a fraction of the whole; stops once nobody waits."""
    prefix = f"rank {index + 1}/{count}: " if count > 1 else ""

    def report(fraction: float, what: str) -> None:
        check_cancelled()
        call_in_app(host.set_progress, (index + fraction) / count, prefix + what)

    return report


def _title(rows: Sequence[FileRow]) -> str:
    if len(rows) == 1:
        return rows[0].path or ""
    return f"trace {rows[0].job.request_id} · {len(rows)} ranks"


def _rank_of(info: dict[str, Any] | None) -> int | None:
    rank = (info or {}).get("rank")
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def load_timeline(host: WorkHost, rows: Sequence[FileRow]) -> None:
    """Load each file and build one timeline (ranks as lanes when several); push its screen."""
    from gpulens.analysis.trace.load import load_trace
    from gpulens.analysis.trace.timeline import build_rank_timeline, build_timeline

    def job() -> Callable[[], None]:
        loaded = []
        for i, row in enumerate(rows):
            assert row.path is not None
            trace = load_trace(row.path, keep_args=True, progress=_progress(host, i, len(rows)))
            loaded.append((_rank_of(trace.distributed_info), trace.events))
        check_cancelled()
        call_in_app(host.set_progress, 1.0, "building timeline")
        if len(loaded) == 1:
            timeline = build_timeline(loaded[0][1])
        else:
            labels = rank_labels([r for r, _ in loaded], rows)
            timeline = build_rank_timeline(list(zip(labels, (ev for _, ev in loaded), strict=True)))
        return lambda: call_in_app(host.app.push_screen, TimelineScreen(timeline, _title(rows)))

    _shown(host, job)


def _analyze_one(path: str, progress: Callable[[float, str], None] | None) -> tuple[Any, Any, int | None]:
    """One read of ``path`` feeding both the op analysis and, where it exists, the rank reduction.

    Returns (TraceSummary, RankReport or None, distributedInfo rank).
    """
    from gpulens.analysis.trace.analyze import analyze
    from gpulens.analysis.trace.compact import CompactTrace
    from gpulens.analysis.trace.load import stream_events

    trace = CompactTrace()
    fold = None
    try:  # the multi-rank reduction (step times without ProfilerStep, spread): newer analysis only
        from gpulens.analysis.trace.rank_reduce import RankFold

        fold = RankFold()
    except ImportError:
        pass

    folds = [fold] if fold is not None else []

    def sink(batch: list[Any]) -> None:
        trace.add_batch(batch)
        if folds:
            try:
                folds[0].add_batch(batch)
            except (ValueError, TypeError, KeyError, IndexError, ArithmeticError):  # odd data: the extra charts must not cost the analysis itself
                folds.clear()

    trace.meta = stream_events(path, sink, progress=progress)
    summary = analyze(trace, progress=progress)
    report = None
    if folds:
        try:
            from gpulens.analysis.trace.rank_report import build_report

            report = build_report(folds[0], trace.meta, -1, "")
        except (ValueError, TypeError, KeyError, IndexError, ArithmeticError):  # odd data: the extra charts must not cost the analysis
            report = None
    kernels = tuple(float(ev.dur) for ev in trace.gpu if ev.cat in ("kernel", "Kernel"))
    return summary, (report, kernels), _rank_of(trace.meta.distributed_info)


def _spread_notes(reports: Sequence[Any], name_of: dict[int, str]) -> tuple[str, ...]:
    """The ranks' spread and stragglers in a line or two (the newer multi-rank analysis)."""
    try:
        from gpulens.analysis.trace.ranks import find_stragglers, spread_of
    except ImportError:
        return ()
    sp = spread_of(reports)
    if sp is None:
        return ("spread: n/a (no rank has step markers)",)
    notes = [f"spread: mean step {sp.min_ms:.2f} ms ({name_of[sp.min_rank]}) to {sp.max_ms:.2f} ms "
             f"({name_of[sp.max_rank]}), {sp.spread_pct:.1f}% of the median {sp.median_ms:.2f} ms"]
    for st in find_stragglers(reports)[:3]:
        notes.append(f"straggler: {name_of[st.rank]} by {st.by}, +{st.excess_ms:.2f} ms (+{st.excess_pct:.1f}%); "
                     f"its extra time is {st.cause}")
    notes.append(_late_note(reports, name_of))
    return tuple(notes)


def _late_note(reports: Sequence[Any], name_of: dict[int, str]) -> str:
    """HTA's late-arrival answer in one line: who starts the most varying collective last."""
    from gpulens.analysis.trace.late_arrival import late_arrival

    la = late_arrival([(r.rank, r.arrival) for r in reports if getattr(r, "arrival", None) is not None])
    if la.note:
        return f"late arrival (HTA's method): n/a: {la.note}"
    late = {row.rank: row.mean_late_ms for row in la.ranks}
    who = ", ".join(f"{name_of.get(r, f'rank {r}')} " + (f"+{late[r]:.2f} ms" if late.get(r) is not None else "n/a")
                    for r in sorted(la.stragglers, key=lambda r: -(late.get(r) or 0.0)))
    return (f"late arrival (HTA's method, {la.candidates} candidates): {who} after the earliest rank, "
            f"in {la.kernel.split('(')[0]} over {len(la.iterations)} steps")


def analyze_paths(paths: Sequence[str], labels: Sequence[str] | None = None,
                  progress: Callable[[int, int], Callable[[float, str], None]] | None = None) -> tuple[Any, Any]:
    """Analyze each file; several become one summary whose processes are the ranks.

    Returns ``(TraceSummary, AnalysisExtras)``: the charts' data beside the summary.
    """
    from dataclasses import replace

    from gpulens.tui.screens.profiler_views import AnalysisExtras, RankCharts

    done = [_analyze_one(p, progress(i, len(paths)) if progress else None) for i, p in enumerate(paths)]
    claimed = [r for _, _, r in done]
    fallback = list(labels) if labels is not None else [f"file {i + 1}" for i in range(len(paths))]
    names = rank_names(claimed, fallback)
    ranks = [r if r is not None and claimed.count(r) == 1 else i for i, r in enumerate(claimed)]
    charts, process_rank, reports = [], [], []
    for i, (summary, (report, kernels), _) in enumerate(done):
        if report is not None and report.step_times_ms:
            reports.append(replace(report, rank=ranks[i], rank_source="distributedInfo"))
        charts.append(RankCharts(names[i], *_rank_steps(summary, report), kernels))
        process_rank += [i] * len(summary.processes)
    whole = _merged(len(paths), [d[0] for d in done])
    notes = _spread_notes(reports, dict(zip(ranks, names, strict=True))) if len(paths) > 1 and reports else ()
    return whole, AnalysisExtras(tuple(charts), tuple(process_rank), notes)


def _rank_steps(summary: TraceSummary, report: RankReport | None) -> tuple[tuple[float, ...], str]:
    """A rank's step times for its chart and where they came from: the step report's, else ProfilerStep spans."""
    if report is not None and report.step_times_ms:
        return tuple(report.step_times_ms), report.steps.describe
    first = summary.processes[0] if summary.processes else None
    steps = tuple(s.dur_us / 1000 for s in first.steps) if first is not None else ()
    return steps, "ProfilerStep spans" if steps else ""


def _merged(files: int, summaries: list[TraceSummary]) -> TraceSummary:
    """One file's summary as it is; several files' as one whose processes are every rank's."""
    from gpulens.analysis.trace.summary import TraceSummary

    if len(summaries) == 1:
        return summaries[0]
    return TraceSummary(
        path=f"{files} ranks",
        size_bytes=sum(s.size_bytes for s in summaries),
        events=sum(s.events for s in summaries),
        devices=tuple(dict.fromkeys(d for s in summaries for d in s.devices)),
        processes=tuple(p for s in summaries for p in s.processes),
    )


def analyze(host: WorkHost, rows: Sequence[FileRow]) -> None:
    """Analyze each file (several: every rank together, charts per rank); push the Analyze screen."""
    def job() -> Callable[[], None]:
        paths = [row.path for row in rows if row.path is not None]
        labels = [f"{row.host} pid {row.pid}" for row in rows if row.path is not None]
        summary, extras = analyze_paths(paths, labels, lambda i, n: _progress(host, i, n))
        check_cancelled()
        return lambda: call_in_app(host.app.push_screen, AnalyzeScreen(summary, _title(rows), extras))

    _shown(host, job)


def export(host: WorkHost, rows: Sequence[FileRow], dest: str) -> None:
    """Copy one file to ``dest``, or every rank to a directory / archive named ``dest``."""
    from gpulens.sources.trace_export import export_ranks, export_trace

    def job() -> Callable[[], None]:
        call_in_app(host.set_progress, 0.0, "exporting")
        if len(rows) == 1:
            assert rows[0].path is not None
            out = export_trace(rows[0].path, dest)
            said = f"trace written to {out}"
        else:
            written = export_ranks(member_names(rows), dest)
            said = (f"{len(rows)} ranks written to {written[0]}" if len(written) == 1 else
                    f"{len(written)} ranks written to {written[0].rsplit('/', 1)[0]}/")
        return lambda: call_in_app(host.app.notify, said)

    _shown(host, job)
