"""Collectors: read this machine (host counters, process-tree jobs, NVML, perf counters, py-spy). Never imports textual, rich or any viewer package."""
