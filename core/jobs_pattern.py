"""Defaults for job detection (shared by the collectors and the config)."""

from __future__ import annotations

DEFAULT_JOB_PATTERN = r"systemd.*/([a-z]*sh|containerd-shim-runc-v2)/.*python[0-9.]*$"
"""Python started from a shell or in a container (Fixstars AIBooster's default)."""

DEFAULT_JOB_KEY_ENV: tuple[str, ...] = (
    "SLURM_JOB_ID",
    "TORCHELASTIC_RUN_ID",
    "PBS_JOBID",
    "LSB_JOBID",
    "JOB_ID",
)
"""Environment variables read, in order, for a job key that joins hosts."""
