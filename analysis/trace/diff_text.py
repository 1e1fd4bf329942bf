"""Plain-text rendering of a trace comparison (``gpulens analyze --diff A B``)."""

from __future__ import annotations

from gpulens.analysis.trace.diff import Delta, TraceDiff
from gpulens.analysis.trace.rank_report import RankReport
from gpulens.analysis.trace.report import fmt_us
from gpulens.core.sanitize import clean_text


def _name(name: str, width: int) -> str:
    name = clean_text(name)
    return name if len(name) <= width else name[: width - 3] + "..."


def _pct(d: Delta) -> str:
    p = d.time_delta_pct
    return "new" if d.status == "new" else ("gone" if d.status == "vanished" else f"{p:+.1f}%" if p is not None else "")


def _table(title: str, rows: tuple[Delta, ...], top: int, what: str, calls: str) -> list[str]:
    if not rows:
        return [f"{title}: none in either trace"]
    w = 60
    head = (f"{'Name':<{w}}  {what + ' A':>12}  {what + ' B':>12}  {'delta':>12}  {'':>7}  "
            f"{calls + ' A':>11}  {calls + ' B':>11}  {'delta':>8}")
    lines = [f"{title} (largest change first):", head, "-" * len(head)]
    for d in rows[:top]:
        lines.append(
            f"{_name(d.name, w):<{w}}  {fmt_us(d.time_a_us):>12}  {fmt_us(d.time_b_us):>12}  "
            f"{('+' if d.time_delta_us >= 0 else '-') + fmt_us(abs(d.time_delta_us)):>12}  {_pct(d):>7}  "
            f"{d.calls_a:>11.4g}  {d.calls_b:>11.4g}  {d.calls_delta:>+8.4g}"
        )
    if len(rows) > top:
        lines.append(f"... {len(rows) - top} more (--top N)")
    return lines


def _names(label: str, names: tuple[str, ...], top: int) -> list[str]:
    if not names:
        return [f"{label}: none"]
    shown = [f"  {_name(n, 100)}" for n in names[:top]]
    more = [f"  ... {len(names) - top} more"] if len(names) > top else []
    return [f"{label} ({len(names)}):", *shown, *more]


def _steps(label: str, r: RankReport) -> str:
    mean = r.mean_step_ms
    return f"{label}: {clean_text(r.path)}: {len(r.step_times_ms)} steps ({r.steps.describe})" + (
        f", mean {mean:.2f} ms" if mean is not None else "")


def diff_text(d: TraceDiff, top: int = 20) -> str:
    """The whole comparison report."""
    lines = [_steps("A", d.a), _steps("B", d.b)]
    delta = d.mean_step_delta_ms
    a_mean = d.a.mean_step_ms
    if delta is not None and a_mean:
        lines.append(f"step time: {delta:+.2f} ms ({100.0 * delta / a_mean:+.1f}%) B vs A")
    else:
        lines.append("step time: n/a (a trace without step markers)")
    sa, sb = d.a.split, d.b.split
    lines.append(
        f"time split ({d.a.basis} A, {d.b.basis} B): compute {sa.pct(sa.compute_us):.1f}% -> {sb.pct(sb.compute_us):.1f}%, "
        f"communication {sa.pct(sa.comm_us):.1f}% -> {sb.pct(sb.comm_us):.1f}%, idle {sa.pct(sa.idle_us):.1f}% -> "
        f"{sb.pct(sb.idle_us):.1f}%"
    )
    lines.append(
        f"numbers are {d.scale}" + (f" (A {len(d.a.step_times_ms)} steps, B {len(d.b.step_times_ms)} steps)"
                                    if d.scale == "per step" else " (one trace has no steps)")
        + f"; Self CPU total {fmt_us(d.self_cpu_total_a_us)} -> {fmt_us(d.self_cpu_total_b_us)}"
    )
    calls = "calls/step" if d.scale == "per step" else "calls"
    lines += ["", *_table("CPU ops, Self CPU", d.ops, top, "self", calls)]
    lines += ["", *_table("GPU kernels, total time", d.kernels, top, "time", calls)]
    lines += ["", *_names("new ops (only in B)", d.new("ops"), top), *_names("vanished ops (only in A)", d.vanished("ops"), top)]
    lines += [*_names("new kernels (only in B)", d.new("kernels"), top),
              *_names("vanished kernels (only in A)", d.vanished("kernels"), top)]
    return "\n".join(lines) + "\n"
