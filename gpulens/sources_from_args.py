"""Turn the command line's source flags into one Source (any mix at once)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gpulens.commands._args import flags_of
from gpulens.core.config import Config
from gpulens.core.errors import ConfigError, ConfigProblem
from gpulens.core.events import Source

if TYPE_CHECKING:
    from gpulens.sources.local import GpuMemReader
    from gpulens.sources.profiling import LocalProfiler
    from gpulens.sources.prometheus.access import PromFlags


def build_source(args: argparse.Namespace, cfg: Config) -> Source:
    """One Source for everything asked on the command line (default: local).

    Raises:
        ConfigError: flags that cannot be combined or parsed.
    """
    sources: list[Source] = []
    if getattr(args, "demo", False):
        from gpulens.sources.demo import DemoSource

        sources.append(DemoSource(interval_s=cfg.interval_s))
    if getattr(args, "replay", None):
        from gpulens.sources.replay import ReplaySource

        sources.append(ReplaySource(args.replay))
    if any(getattr(args, n, None) is not None for n in ("connect", "ssh", "slurm_job")):
        from gpulens.sources.stream.source import StreamFlags, stream_source_from_flags

        sources.append(stream_source_from_flags(flags_of(StreamFlags, args)))
    if getattr(args, "prometheus", None):
        from gpulens.sources.prometheus.access import access_from
        from gpulens.sources.prometheus.source import PrometheusSource

        # A one-shot command (snapshot --timeout S) bounds every poll by its own deadline.
        limit = getattr(args, "timeout", None)
        timing = {} if limit is None else {"timeout_s": min(5.0, limit), "poll_timeout_s": limit}
        sources.append(
            PrometheusSource(args.prometheus, selector=getattr(args, "prom_selector", None) or "", cfg=cfg,
                             access=access_from(prom_flags(args), cfg), **timing)
        )
    if not sources:
        from gpulens.collectors.processes import ProcessLister
        from gpulens.collectors.sampler import Sampler
        from gpulens.sources.local import LocalSource

        sources.append(LocalSource(cfg, lambda: Sampler(job_pattern=cfg.job_pattern, job_key_env=cfg.job_key_env),
                                   ProcessLister().listing, gpumem=_local_gpumem(), profiler=_local_profiler()))
    if getattr(args, "demo", False) and len(sources) > 1:
        raise ConfigError("--demo cannot be mixed with real sources (SIMULATED data must stay apart)", where="--demo",
                          expected="no other source", problem=ConfigProblem.CONFLICT)
    if len(sources) == 1:
        return sources[0]
    from gpulens.sources.local import MultiSource

    return MultiSource(sources)


def prom_flags(args: argparse.Namespace) -> PromFlags:
    """``--prom-bearer-token-file``, ``--prom-user``, ``--prom-password-file``, ``--prom-ca-file``, ``--prom-header``."""
    from gpulens.sources.prometheus.access import PromFlags

    return PromFlags(bearer_token_file=args.prom_bearer_token_file, user=args.prom_user,
                     password_file=args.prom_password_file, ca_file=args.prom_ca_file,
                     headers=tuple(args.prom_header or ()))


def _local_gpumem() -> GpuMemReader | None:
    """This machine's GPU memory by stack for a TUI run as root, with no agent (eBPF loads at the first ``m``,
    which says why where it cannot); None for any other user, who asks an agent."""
    import os

    if os.geteuid() != 0:
        return None
    from gpulens.agent.gpumem import LocalGpuMemory

    return LocalGpuMemory()


def _local_profiler() -> LocalProfiler | None:
    """py-spy on this machine for the TUI (``agent.pyspy``: runs ``collectors.pyspy``, reads with analysis);
    None when it cannot be imported (the TUI then says py-spy is not available here)."""
    try:
        from gpulens.agent import pyspy
    except ImportError:
        return None
    return pyspy
