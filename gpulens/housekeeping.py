"""Start-up housekeeping: old traces and downloads pruned, in a daemon thread.

What is pruned (each kept under ``[cache] max_mib`` and ``max_age_days``,
oldest first; only our own regular files, never through a link —
:func:`gpulens.core.dirs.prune`):

- ``$XDG_CACHE_HOME/gpulens/traces`` and ``…/downloads``: files agents sent;
- ``/tmp/gpulens-<euid>``: the directories Kineto wrote on-demand traces into
  (Kineto accepts on-demand log files only under /tmp, so they cannot move to
  the cache directory; before this, one afternoon left 179 MB there).

A directory reached through a link, or through one another user could change
(root run with a user's ``XDG_CACHE_HOME``), is not pruned: one warning says why.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from gpulens.core.config import Config
from gpulens.core.dirs import PruneResult, cache_dir, prune
from gpulens.core.threads import start_thread

log = logging.getLogger("gpulens.housekeeping")


def pruned_dirs() -> tuple[Path, ...]:
    """The directories :func:`prune_caches` looks after."""
    base = cache_dir()
    return (base / "traces", base / "downloads", Path("/tmp") / f"gpulens-{os.geteuid()}")


def prune_caches(cfg: Config) -> dict[Path, PruneResult]:
    """Prune every directory of :func:`pruned_dirs`; returns what each kept and removed."""
    out = {}
    refused: dict[str, list[str]] = {}
    for top in pruned_dirs():
        result = prune(top, cfg.cache_max_mib << 20, cfg.cache_max_age_days * 86400.0)
        if result.removed_files:
            log.info("pruned %d old files (%d bytes) from %s", result.removed_files, result.removed_bytes, top)
        if result.refused is not None:
            refused.setdefault(result.refused, []).append(str(top))
        out[top] = result
    for why, tops in refused.items():  # traces/ and downloads/ share the cache dir: one warning for both
        log.warning("not pruning %s: %s", ", ".join(tops), why)
    return out


def start_pruning(cfg: object) -> None:
    """Prune in a daemon thread so no command waits for it."""
    if not isinstance(cfg, Config) or os.environ.get("GPULENS_NO_PRUNE"):
        return
    config = cfg

    def work() -> None:
        prune_caches(config)

    start_thread(work, "gpulens-prune")
