"""GPU memory of unmodified processes by Python stack: eBPF uprobes on the CUDA allocation calls."""
