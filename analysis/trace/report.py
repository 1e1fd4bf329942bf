"""Plain-text rendering of a TraceSummary: torch's key_averages table plus the rest."""

from __future__ import annotations

from gpulens.analysis.trace.summary import ProcessSummary, TraceSummary


def fmt_us(us: float) -> str:
    """torch's time format: us below 1 ms, ms below 1 s, else s."""
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def fmt_bytes(n: float) -> str:
    """Binary units, one decimal."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


SHAPES_WIDTH = 60  # torch's table cuts shapes at max_shapes_column_width (80); a terminal fits less


def op_table_text(p: ProcessSummary, rows: int = 15, name_width: int = 55) -> list[str]:
    """torch-style columns: Name, Self CPU %, Self CPU, CPU total, Self CUDA, # of Calls (+ Input Shapes)."""
    shapes = any(op.input_shapes for op in p.cpu_ops)
    head = f"{'Name':>{name_width}}  {'Self CPU %':>10}  {'Self CPU':>12}  {'CPU total':>12}  {'Self CUDA':>12}  {'# of Calls':>10}"
    if shapes:
        head += "  Input Shapes"
    rule = "-" * len(head)
    lines = [rule, head, rule]
    total = p.self_cpu_total_us
    for op in p.cpu_ops[:rows]:
        name = op.name if len(op.name) <= name_width else op.name[: name_width - 3] + "..."
        pct = 100.0 * op.self_cpu_us / total if total > 0 else 0.0
        line = (
            f"{name:>{name_width}}  {pct:>9.2f}%  {fmt_us(op.self_cpu_us):>12}  "
            f"{fmt_us(op.cpu_total_us):>12}  {fmt_us(op.self_cuda_us):>12}  {op.calls:>10}"
        )
        if shapes:
            dims = op.input_shapes
            line += "  " + (dims if len(dims) <= SHAPES_WIDTH else dims[: SHAPES_WIDTH - 3] + "...")
        lines.append(line)
    lines += [rule, f"Self CPU time total: {fmt_us(total)}"]
    return lines


def process_text(p: ProcessSummary) -> list[str]:
    """Every section of one process's summary."""
    title = f"process {p.pid}" + (f" ({p.name})" if p.name else "") + (f", rank {p.rank}" if p.rank is not None else "")
    lines = [title, "=" * len(title)]
    lines.append(f"window: {fmt_us(p.window_us)} over {p.threads} CPU thread(s); steps: {p.steps_note}")
    g = p.gpu
    if g is None:
        lines.append("GPU: no GPU activity in this trace")
    else:
        lines.append(
            f"GPU ({g.devices} device(s), window {fmt_us(g.window_us)}): busy {g.pct(g.busy_us):.1f}%  "
            f"idle {g.pct(g.idle_us):.1f}%  compute {g.pct(g.compute_us):.1f}%  "
            f"communication {g.pct(g.comm_us):.1f}%  memcpy/memset {g.pct(g.memcpy_us):.1f}%"
        )
    lines.append("")
    lines += op_table_text(p)
    if p.kernels:
        lines += ["", "top kernels:"]
        for k in p.kernels[:10]:
            name = k.name if len(k.name) <= 70 else k.name[:67] + "..."
            lines.append(f"  {k.pct_of_busy:5.1f}%  {fmt_us(k.total_us):>12}  {k.calls:>6}x  {name}")
    if p.launch is not None:
        la = p.launch
        delay = f", mean launch-to-start {fmt_us(la.mean_delay_us)}" if la.mean_delay_us is not None else ""
        lines += ["", f"launch overhead: {la.count} launches, {fmt_us(la.total_cpu_us)} CPU, mean {fmt_us(la.mean_cpu_us)}{delay}"]
    if p.memcpy:
        lines += ["", "memcpy / memset:"]
        for m in p.memcpy:
            bw = f"{m.gbps:.1f} GB/s" if m.gbps is not None else "n/a (no byte counts)"
            lines.append(f"  {m.kind:<14} {m.count:>6}x  {fmt_bytes(m.total_bytes):>10}  {fmt_us(m.total_us):>12}  {bw}")
    if p.memory:
        lines += ["", "peak memory ([memory] events):"]
        for mem in p.memory:
            res = f", reserved {fmt_bytes(mem.peak_reserved_bytes)}" if mem.peak_reserved_bytes is not None else ""
            rel = " (relative to trace start: no totals in this trace)" if mem.relative else ""
            lines.append(f"  {mem.device:<8} allocated {fmt_bytes(mem.peak_allocated_bytes)}{res}{rel}")
    if p.findings:
        lines += ["", "findings:"]
        lines += [f"  - {f}" for f in p.findings]
    return lines


def summary_text(s: TraceSummary) -> str:
    """The whole report, as printed by ``gpulens analyze``."""
    lines = [f"{s.path}: {s.events} events, {fmt_bytes(s.size_bytes)}" + (f"; devices: {', '.join(sorted(set(s.devices)))}" if s.devices else "")]
    if not s.processes:
        lines.append("no CPU or GPU events found")
    for p in s.processes:
        lines += ["", *process_text(p)]
    return "\n".join(lines) + "\n"
