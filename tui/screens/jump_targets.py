"""What each ``:`` command opens: the views of ``views`` and the process table and screen of ``processes``."""

from __future__ import annotations

from typing import Any

from gpulens.tui.screens.processes import ProcessesView, ProcView
from gpulens.tui.screens.views import VIEWS
from gpulens.tui.screens.views import VIEWS_OF as JOB_VIEWS_OF

__all__ = ["VIEWS", "VIEWS_OF"]

VIEWS_OF: dict[str, Any] = {**JOB_VIEWS_OF, "ps": ProcessesView, "proc": ProcView}
"""``:NAME ARG`` -> the screen class it opens for ``ARG`` (``:ps`` and ``:slurm`` alone: their default)."""
