"""``:`` prompt, as in k9s: views (``hosts``, ``jobs``, ``gpus``, ``pods``, ``slurm [JOBID]``, ``ns NAME``,
``user NAME``, ``ps [HOST]``), ``host NAME``, ``job PID``, ``proc [HOST:]PID``, ``interval S``, ``log``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen, Screen
from textual.suggester import SuggestFromList
from textual.widgets import Input

from gpulens.core.config import INTERVAL_S
from gpulens.tui.widgets.header import crumb_of
from gpulens.tui.widgets.ordered_input import OrderedInput

COMMANDS = ("home, hosts, jobs, gpus, pods, slurm [JOBID], ns NAME, user NAME, host NAME, job PID, ps [HOST], "
            "proc [HOST:]PID, interval S, log")
_NO_ARG = {"hosts": "hosts", "jobs": "jobs", "gpus": "gpus", "pods": "pods", "log": "log", "home": "home",
           "overview": "home"}
_EXAMPLE = {"host": "NAME", "job": "PID", "user": "NAME", "interval": "2", "ns": "NAMESPACE", "proc": "PID"}
_WITH_ARG = {"host": "host", "h": "host", "job": "job", "j": "job", "user": "user", "u": "user",
             "interval": "interval", "ns": "ns", "slurm": "slurm", "ps": "ps", "proc": "proc", "p": "proc"}
_ARG_OPTIONAL = frozenset({"slurm", "ps"})
_PROC = re.compile(r"(?:(?P<host>[^\s:]{1,253}):)?(?P<pid>[1-9][0-9]{0,9})")


def placement(top: Screen[object], new: Screen[object], views: tuple[type, ...]) -> str:
    """How a ``:`` jump shows ``new`` over ``top``, as k9s does: ``same`` (already shown: nothing),
    ``replace`` (a view over a view, a host over a host: ``:hosts`` thrice is one step back), else ``push``."""
    if type(top) is type(new) and crumb_of(top) == crumb_of(new):
        return "same"
    if type(top) is type(new) or (isinstance(top, views) and isinstance(new, views)):
        return "replace"
    return "push"


def parse_jump(text: str) -> tuple[str, str] | str:
    """A ``:`` command -> (kind, arg), or the one-line error to show.

    ``hosts`` / ``jobs`` / ``gpus`` / ``log`` take no argument (``arg`` is '');
    ``host NAME``, ``job PID``, ``user NAME`` (also ``h``, ``j``, ``u``) and
    ``interval S`` (seconds, 0.25 to 3600) take one.
    """
    parts = text.strip().lstrip(":").split(None, 1)
    if not parts:
        return f"empty command: try {COMMANDS}"
    word = parts[0].lower()
    arg = parts[1].strip() if len(parts) == 2 else ""
    if word in _NO_ARG:
        return (_NO_ARG[word], "") if not arg else f"':{word}' takes no argument"
    kind = _WITH_ARG.get(word)
    if kind is None:
        return f"unknown command {text.strip()!r}: try {COMMANDS}"
    if not arg and kind not in _ARG_OPTIONAL:
        return f"':{word}' needs an argument, e.g. ':{word} {_EXAMPLE[kind]}'"
    if kind == "interval":
        try:
            seconds = float(arg)
        except ValueError:
            return f"':interval {arg}': expected seconds, e.g. ':interval 2'"
        if not INTERVAL_S[0] <= seconds <= INTERVAL_S[1]:  # as --interval; the redraw stops at MIN_REFRESH_S
            return f"':interval {arg}': between {INTERVAL_S[0]:g} and {INTERVAL_S[1]:g} seconds, as --interval"
    if kind == "proc" and not _PROC.fullmatch(arg):
        return f"':proc {arg}': expected a pid or HOST:PID, e.g. ':proc 4711'"
    return kind, arg


MAX_COMPLETED_HOSTS = 4096
"""Hosts offered as completions at most."""


def completions(hosts: Sequence[str]) -> list[str]:
    """What the prompt completes: each command word, then ``host NAME`` and ``ps NAME`` for each host."""
    words = [*_NO_ARG, *(w for w in _WITH_ARG if len(w) > 1)]
    return [*words, *(f"{verb} {h}" for verb in ("host", "ps") for h in hosts)]


class JumpScreen(ModalScreen[str | None]):
    """A one-line prompt at the bottom."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    JumpScreen { align: left bottom; background: transparent; }
    JumpScreen > Input { dock: bottom; width: 100%; border: tall $accent; }
    """

    def __init__(self, hosts: Sequence[str] = ()) -> None:
        """``hosts``: the hosts shown, completed after ``host`` and ``ps``."""
        super().__init__()
        self.hosts = tuple(hosts)[:MAX_COMPLETED_HOSTS]
        self._done = False

    def compose(self) -> ComposeResult:
        """The prompt; → takes the completion it shows (commands, then ``host``/``ps`` with each host)."""
        yield OrderedInput(placeholder=COMMANDS, id="jump",
                           suggester=SuggestFromList(completions(self.hosts), case_sensitive=False))

    def on_key(self, event: events.Key) -> None:
        """Keys that arrive before the prompt has focus (typed right after ':') go into it."""
        box = self.query_one(Input)
        if self.focused is box:
            return
        self.set_focus(box)
        if event.key == "enter":
            event.stop()
            self._finish(box.value)
        elif event.is_printable and event.character:
            event.stop()
            box.insert_text_at_cursor(event.character)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Hand the text back."""
        self._finish(event.value)

    def action_cancel(self) -> None:
        """Close without jumping."""
        self._finish(None)

    def _finish(self, value: str | None) -> None:
        # Once: an Esc queued right behind Enter must not pop the screen below.
        if not self._done:
            self._done = True
            self.dismiss(value)
