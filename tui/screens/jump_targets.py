"""What each ``:`` command opens, and running one: views, a host, a job, a process, the interval, the log.

Host names match as typed, else case-insensitively, else as the only host
whose name contains the text (``:host NODE07`` finds ``gpu-node07``).
"""

from __future__ import annotations

from typing import Any

from textual.app import App
from textual.screen import Screen

from gpulens.tui.screens.host import HostScreen
from gpulens.tui.screens.job import JobScreen
from gpulens.tui.screens.jump import parse_jump, placement
from gpulens.tui.screens.log import LogScreen
from gpulens.tui.screens.processes import ProcessesView, ProcView
from gpulens.tui.screens.views import VIEWS
from gpulens.tui.screens.views import VIEWS_OF as JOB_VIEWS_OF

__all__ = ["VIEWS", "VIEWS_OF", "find_host", "run_jump"]

VIEWS_OF: dict[str, Any] = {**JOB_VIEWS_OF, "ps": ProcessesView, "proc": ProcView}
"""``:NAME ARG`` -> the screen class it opens for ``ARG`` (``:ps`` and ``:slurm`` alone: their default)."""


def find_host(hosts: list[str], text: str) -> str | None:
    """The host ``text`` names: exactly, else ignoring case, else the first whose name contains it (any case)."""
    if text in hosts:
        return text
    low = text.lower()
    return next((h for h in hosts if h.lower() == low), None) or next((h for h in hosts if low in h.lower()), None)


def go(app: App[Any], screen: Screen[Any]) -> None:
    """Show a ``:`` jump's screen (:func:`placement`: over the top one, instead of it, or not again)."""
    how = placement(app.screen, screen, (*VIEWS.values(), *VIEWS_OF.values(), LogScreen))
    if how != "same":
        (app.switch_screen if how == "replace" else app.push_screen)(screen)


def run_jump(app: Any, text: str | None) -> None:  # noqa: ANN401  the app: screens cannot name its class
    """Run the ``:`` command in ``text`` in ``app`` (a one-line error for a bad one)."""
    if not text:
        return
    parsed = parse_jump(text)
    if isinstance(parsed, str):
        app.notify(parsed, severity="error")
        return
    kind, arg = parsed
    if kind == "home":  # k9s' habit: one step back to the start, however many jumps piled up
        while len(app.screen_stack) > 2:
            app.pop_screen()
    elif kind in ("log", *VIEWS, *VIEWS_OF):
        go(app, VIEWS_OF[kind](arg, context=app) if kind in VIEWS_OF else LogScreen(context=app)
           if kind == "log" else VIEWS[kind](context=app))
    elif kind == "interval":
        app.set_refresh_interval(float(arg))
    elif kind == "host":
        match = find_host(app.store.hosts(), arg)
        if match is not None:
            go(app, HostScreen(match, context=app))
        elif app.replay is not None and (said := app.replay.reach_host(
                arg, lambda h: go(app, HostScreen(h, context=app)))):
            app.notify(said, timeout=4)
        else:
            app.notify(f"no host {arg!r}", severity="error")
    else:
        job = app.store.find_job(arg, app.window_s)
        if job is not None:
            go(app, JobScreen(job.key, context=app))
        elif app.replay is not None and (said := app.replay.reach_job(
                arg, lambda k: go(app, JobScreen(k, context=app)))):
            app.notify(said, timeout=4)
        else:
            app.notify(f"no job with pid or key {arg!r}", severity="error")
