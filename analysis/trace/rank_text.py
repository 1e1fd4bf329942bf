"""Plain-text rendering of a multi-rank analysis (``gpulens analyze DIR``)."""

from __future__ import annotations

from gpulens.analysis.trace.late_arrival import LateArrival
from gpulens.analysis.trace.rank_report import RankReport
from gpulens.analysis.trace.ranks import RanksReport, Straggler
from gpulens.analysis.trace.report import fmt_bytes, fmt_us
from gpulens.core.sanitize import clean_text


def _ms(v: float | None) -> str:
    return f"{v:.2f}" if v is not None else "n/a"


def _row(r: RankReport) -> str:
    s = r.split
    ov = f"{r.overlap_pct:.1f}%" if r.overlap_pct is not None else "n/a"
    times = r.step_times_ms
    return (
        f"{r.rank:>5}  {len(times):>5}  {_ms(r.mean_step_ms):>10}  {_ms(min(times) if times else None):>9}  "
        f"{_ms(max(times) if times else None):>9}  {r.basis:>5}  {s.pct(s.compute_us):>7.1f}%  "
        f"{s.pct(s.comm_us):>6.1f}%  {s.pct(s.exposed_comm_us):>8.1f}%  {s.pct(s.idle_us):>6.1f}%  {ov:>7}  "
        f"{fmt_us(r.collective_cpu_us):>11} ({r.collective_cpu_calls})"
    )


def _straggler_line(s: Straggler) -> str:
    ratio = f"{s.ratio:.1f}x the others: " if s.ratio is not None else "the others: "
    figure = f"({ratio}{s.value_ms:.2f} vs {s.median_ms:.2f} ms; threshold {s.threshold_ms:.2f} ms)"
    if s.kind == "late":
        what = f"arrives late at the collective: idle +{s.excess_ms:.2f} ms/step, nothing running outside the DataLoader {figure}"
    elif s.kind == "data":
        what = f"data loading +{s.excess_ms:.2f} ms/step in the DataLoader {figure}"
    else:
        what = f"compute +{s.excess_ms:.2f} ms/step {figure}"
    if s.held_back:
        tail = f"the others wait for it at the collective (+{s.others_wait_ms:.2f} ms/step)"
    else:
        tail = f"the others do not wait longer than it at a collective ({s.others_wait_ms:+.2f} ms/step)"
    return (f"  rank {s.rank} by {s.by}: {what}; {tail}; per step vs the others: compute {s.compute_delta_ms:+.2f}, "
            f"collective wait {s.comm_delta_ms:+.2f}, data {s.data_delta_ms:+.2f}, idle {s.idle_delta_ms:+.2f}, "
            f"copies/other {s.other_delta_ms:+.2f} ms")


def straggler_lines(rep: RanksReport) -> list[str]:
    """The straggler rule's answer: who and why, or why no one (the noise it measured)."""
    rule = rep.rule
    if rule is None or not rule.metrics:
        return [f"stragglers: n/a ({rule.note if rule is not None else 'no rank has step markers'})"]
    scope = f"{rule.steps} steps x {rule.ranks} ranks"
    if not rule.noise_measured:
        head = f"stragglers: {'none' if not rep.stragglers else 'named without a noise model'} ({rule.note})"
        return [head, *(_straggler_line(s) for s in rep.stragglers)]
    parts = [m for m in (rule.metric("compute"), rule.metric("idle"), rule.metric("data")) if m is not None]
    spread = ", ".join(f"±{m.noise_ms or 0.0:.2f} ms {m.metric}" for m in parts)
    thresholds = " / ".join(f"{m.threshold_ms:.2f}" for m in parts)
    if not rep.stragglers:
        return [f"stragglers: none (ranks within noise: per-step spread {spread} over {scope}; "
                f"thresholds {thresholds} ms, at least {rule.threshold_pct:g}% of the median step {rule.median_step_ms:.2f} ms)"]
    head = (f"stragglers (per-step medians against the other ranks'; noise over {scope}: {spread}; "
            f"thresholds {thresholds} ms, at least {rule.threshold_pct:g}% of the median step {rule.median_step_ms:.2f} ms):")
    return [head, *(_straggler_line(s) for s in rep.stragglers)]


def _files_lines(rep: RanksReport) -> list[str]:
    """What was read: ranks, events, bytes, each rank's file, and how steps were found."""
    events = sum(r.events for r in rep.ranks)
    size = sum(r.size_bytes for r in rep.ranks)
    lines = [f"{len(rep.ranks)} ranks, {events} events, {fmt_bytes(size)}"]
    for r in rep.ranks:
        lines.append(f"  rank {r.rank} ({r.rank_source}): {clean_text(r.path)}")
    sources = {clean_text(r.steps.describe) for r in rep.ranks}
    return [*lines, "", "steps: " + ("; ".join(sorted(sources)) if len(sources) > 1 else sources.pop())]


def _split_lines(rep: RanksReport) -> list[str]:
    """The time-split table, one row per rank, and why overlap is n/a where it is."""
    lines = [
        "time split over each rank's activity window (on its GPU streams, else CPU threads):",
        f"{'rank':>5}  {'steps':>5}  {'mean ms':>10}  {'min ms':>9}  {'max ms':>9}  {'basis':>5}  "
        f"{'compute':>8}  {'comm':>7}  {'exposed':>9}  {'idle':>7}  {'overlap':>7}  collectives on CPU (calls)",
    ]
    lines += [_row(r) for r in rep.ranks]
    notes = sorted({r.overlap_note for r in rep.ranks if r.overlap_note})
    return lines + [f"  overlap n/a: {note}" for note in notes]


def _spread_line(rep: RanksReport) -> str:
    """The fastest and slowest rank's mean step and their gap."""
    sp = rep.spread
    if sp is None:
        return "spread: n/a (no rank has step markers)"
    return (f"spread: mean step {sp.min_ms:.2f} ms (rank {sp.min_rank}) to {sp.max_ms:.2f} ms (rank {sp.max_rank}), "
            f"{sp.spread_ms:.2f} ms = {sp.spread_pct:.1f}% of the median {sp.median_ms:.2f} ms "
            f"({sp.ranks_with_steps} ranks with steps)")


def _step_time_lines(rep: RanksReport) -> list[str]:
    """Each rank's first 20 step times."""
    lines = ["step times per rank (ms):"]
    for r in rep.ranks:
        shown = " ".join(f"{t:.2f}" for t in r.step_times_ms[:20])
        more = f" ... ({len(r.step_times_ms)} steps)" if len(r.step_times_ms) > 20 else ""
        lines.append(f"  rank {r.rank:>4}: {shown or 'no steps'}{more}")
    return lines


def _gpu_lines(rep: RanksReport) -> list[str]:
    """The GPU breakdown of each rank that has one (none: no lines, not even the heading)."""
    gpu_ranks = [r for r in rep.ranks if r.gpu is not None]
    if not gpu_ranks:
        return []
    lines = ["", "GPU breakdown per rank (as in the single-trace summary):"]
    for r in gpu_ranks:
        g = r.gpu
        assert g is not None
        top = clean_text(r.top_kernels[0].name) if r.top_kernels else ""
        top = top if len(top) <= 50 else top[:47] + "..."
        lines.append(
            f"  rank {r.rank:>4}: window {fmt_us(g.window_us)}, busy {g.pct(g.busy_us):.1f}%  idle "
            f"{g.pct(g.idle_us):.1f}%  compute {g.pct(g.compute_us):.1f}%  comm {g.pct(g.comm_us):.1f}%  "
            f"memcpy {g.pct(g.memcpy_us):.1f}%; top kernel {top}"
        )
    return lines


def ranks_text(rep: RanksReport) -> str:
    """The whole multi-rank report."""
    lines = [*_files_lines(rep), "", *_split_lines(rep), "", _spread_line(rep), *straggler_lines(rep)]
    if rep.late is not None:
        lines += ["", *late_lines(rep.late)]
    lines += ["", *_step_time_lines(rep), *_gpu_lines(rep)]
    return "\n".join(lines) + "\n"


def _steps(its: tuple[int, ...]) -> str:
    if not its:
        return "no steps"
    if list(its) == list(range(its[0], its[-1] + 1)) and len(its) > 1:
        return f"steps {its[0]}-{its[-1]}"
    return "step " + ", ".join(str(i) for i in its) if len(its) == 1 else "steps " + ", ".join(str(i) for i in its)


def late_lines(la: LateArrival) -> list[str]:
    """HTA's late-arrival stragglers: the collective, the candidates, and how late each rank starts it."""
    head = f"late arrival (HTA's get_potential_stragglers, {la.candidates} candidates)"
    if la.note:
        return [f"{head}: n/a: {la.note}"]
    name = clean_text(la.kernel)
    name = name if len(name) <= 60 else name[:57] + "..."
    shown = la.iterations[:12]
    more = f" ... ({len(la.iterations)} steps)" if len(la.iterations) > len(shown) else ""
    out = [
        f"{head}: {name} on stream {la.stream}, the NCCL kernel whose duration varies most across ranks "
        f"(the last one per step; {_steps(la.iterations)}, mean step {la.mean_iter_us / 1000.0:.2f} ms, "
        f"kernels under {la.min_duration_us / 1000.0:.2f} ms ignored)",
        f"  potential stragglers: {', '.join(f'rank {r}' for r in la.stragglers)} (the {la.candidates} latest "
        "starters each step, most often; HTA always names that many)",
        f"  {'rank':>5}  {'flagged':>9}  {'mean late ms':>12}  late vs the earliest rank, per step (ms){more}",
    ]
    for r in la.ranks:
        late = " ".join("n/a" if x is None else f"{x:+.2f}" for x in r.late_ms[: len(shown)])
        mean = r.mean_late_ms
        out.append(f"  {r.rank:>5}  {f'{r.flagged}/{len(la.iterations)}':>9}  "
                   f"{'n/a' if mean is None else f'{mean:.2f}':>12}  {late}")
    return out
