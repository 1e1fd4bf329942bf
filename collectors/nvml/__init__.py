"""GPUs through NVML (nvidia-ml-py's pynvml): the collector, per-device reads, GPM metrics, NVLink and queries."""
