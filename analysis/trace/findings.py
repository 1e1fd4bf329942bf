"""Two to four plain statements about a process's trace, each with its numbers."""

from __future__ import annotations

from gpulens.analysis.trace.summary import ProcessSummary


def _ms(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} us"


def _gpu_findings(s: ProcessSummary) -> list[str]:
    """The GPU idle a fifth of its window or more; communication a tenth of its busy time or more."""
    out: list[str] = []
    g = s.gpu
    if g is None or not g.window_us > 0:  # (not <=: NaN finds nothing)
        return out
    idle = g.pct(g.idle_us)
    if idle >= 20:
        out.append(
            f"GPU idle {idle:.1f}% of its {_ms(g.window_us)} window "
            f"(busy {g.pct(g.busy_us):.1f}%): the GPU waits for the CPU or for data"
        )
    if g.busy_us > 0 and g.comm_us / g.busy_us >= 0.10:
        out.append(
            f"communication kernels take {100 * g.comm_us / g.busy_us:.1f}% of GPU busy time "
            f"({_ms(g.comm_us)}); check their overlap with compute"
        )
    return out


def _launch_findings(s: ProcessSummary) -> list[str]:
    """Launching a kernel costs more CPU time than the mean kernel runs."""
    if s.launch is None or not s.kernels:
        return []
    mean_kernel = sum(k.total_us for k in s.kernels) / max(sum(k.calls for k in s.kernels), 1)
    if not s.launch.mean_cpu_us > mean_kernel:
        return []
    return [
        f"launch-bound: {s.launch.count} kernel launches cost {s.launch.mean_cpu_us:.1f} us of "
        f"CPU each, more than the mean kernel ({mean_kernel:.1f} us); consider CUDA graphs or fusion"
    ]


def _copy_findings(s: ProcessSummary) -> list[str]:
    """The first host-device copy kind slower than 5 GB/s."""
    slow = [m for m in s.memcpy if m.kind.endswith(("HtoD", "DtoH")) and m.gbps is not None and m.gbps < 5]
    return [
        f"{m.kind} copies run at {m.gbps:.1f} GB/s over {m.count} calls "
        f"({m.total_bytes / 1e6:.1f} MB): pinned memory would speed them up"
        for m in slow[:1]
    ]


def _top_op_findings(s: ProcessSummary) -> list[str]:
    """The op with the most self CPU time, and its share."""
    if not (s.cpu_ops and s.self_cpu_total_us > 0):
        return []
    top = s.cpu_ops[0]
    return [
        f"{top.name} takes {100 * top.self_cpu_us / s.self_cpu_total_us:.1f}% of self CPU time "
        f"({_ms(top.self_cpu_us)} over {top.calls} calls)"
    ]


def _step_findings(s: ProcessSummary) -> list[str]:
    """Step times that vary by over 20%; or, with ops but no steps, that there are none."""
    if not s.steps:
        return ["no step markers (ProfilerStep#): per-step times are not available in this trace"] if s.cpu_ops else []
    durs = [st.dur_us for st in s.steps]
    if len(durs) >= 2 and min(durs) > 0 and max(durs) / min(durs) > 1.2:
        return [f"step time varies from {_ms(min(durs))} to {_ms(max(durs))} over {len(durs)} steps"]
    return []


_RULES = (_gpu_findings, _launch_findings, _copy_findings, _top_op_findings, _step_findings)
"""The finding rules, in the order their findings rank."""


def findings_for(s: ProcessSummary) -> list[str]:
    """Ranked findings; at most four, at least two when the trace has any ops."""
    out: list[str] = []
    for rule in _RULES:
        out += rule(s)
    return out[:4]
