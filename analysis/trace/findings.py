"""Two to four plain statements about a process's trace, each with its numbers."""

from __future__ import annotations

from gpulens.analysis.trace.summary import ProcessSummary


def _ms(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} us"


def findings_for(s: ProcessSummary) -> list[str]:
    """Ranked findings; at most four, at least two when the trace has any ops."""
    out: list[str] = []
    g = s.gpu
    if g is not None and g.window_us > 0:
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
    if s.launch is not None and s.kernels:
        mean_kernel = sum(k.total_us for k in s.kernels) / max(sum(k.calls for k in s.kernels), 1)
        if s.launch.mean_cpu_us > mean_kernel:
            out.append(
                f"launch-bound: {s.launch.count} kernel launches cost {s.launch.mean_cpu_us:.1f} us of "
                f"CPU each, more than the mean kernel ({mean_kernel:.1f} us); consider CUDA graphs or fusion"
            )
    slow = [m for m in s.memcpy if m.kind.endswith(("HtoD", "DtoH")) and m.gbps is not None and m.gbps < 5]
    for m in slow[:1]:
        out.append(
            f"{m.kind} copies run at {m.gbps:.1f} GB/s over {m.count} calls "
            f"({m.total_bytes / 1e6:.1f} MB): pinned memory would speed them up"
        )
    if s.cpu_ops and s.self_cpu_total_us > 0:
        top = s.cpu_ops[0]
        out.append(
            f"{top.name} takes {100 * top.self_cpu_us / s.self_cpu_total_us:.1f}% of self CPU time "
            f"({_ms(top.self_cpu_us)} over {top.calls} calls)"
        )
    if s.steps:
        durs = [st.dur_us for st in s.steps]
        if len(durs) >= 2 and min(durs) > 0 and max(durs) / min(durs) > 1.2:
            out.append(f"step time varies from {_ms(min(durs))} to {_ms(max(durs))} over {len(durs)} steps")
    elif s.cpu_ops:
        out.append("no step markers (ProfilerStep#): per-step times are not available in this trace")
    return out[:4]
