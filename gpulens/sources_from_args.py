"""Turn the command line's source flags into one Source (any mix at once)."""

from __future__ import annotations

import argparse

from gpulens.core.config import Config
from gpulens.core.errors import ConfigError
from gpulens.core.events import Source


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
        from gpulens.sources.local import ReplaySource

        sources.append(ReplaySource(args.replay))
    stream_flags = [getattr(args, n, None) for n in ("connect", "ssh", "slurm_job")]
    if any(f is not None for f in stream_flags):
        from gpulens.sources.stream.source import stream_source_from_args

        sources.append(stream_source_from_args(args, cfg))
    if getattr(args, "prometheus", None):
        from gpulens.sources.prometheus.access import access_from
        from gpulens.sources.prometheus.source import PrometheusSource

        # A one-shot command (snapshot --timeout S) bounds every poll by its own deadline.
        limit = getattr(args, "timeout", None)
        timing = {} if limit is None else {"timeout_s": min(5.0, limit), "poll_timeout_s": limit}
        sources.append(
            PrometheusSource(args.prometheus, selector=getattr(args, "prom_selector", None) or "", cfg=cfg,
                             access=access_from(args, cfg), **timing)
        )
    if not sources:
        from gpulens.collectors.processes import ProcessLister
        from gpulens.collectors.sampler import Sampler
        from gpulens.sources.local import LocalSource

        sources.append(LocalSource(cfg, lambda: Sampler(job_pattern=cfg.job_pattern, job_key_env=cfg.job_key_env),
                                   ProcessLister().listing))
    if getattr(args, "demo", False) and len(sources) > 1:
        raise ConfigError("--demo cannot be mixed with real sources (SIMULATED data must stay apart)")
    if len(sources) == 1:
        return sources[0]
    from gpulens.sources.local import MultiSource

    return MultiSource(sources)
