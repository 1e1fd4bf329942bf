"""The host and job screens' Profile action: py-spy here, or through another host's agent.

A :class:`Profiling` belongs to one screen and is handed how to find its
processes: those on this machine and those on other hosts, by host.

- ``f`` samples the local processes with py-spy (the source's
  :class:`~gpulens.sources.profiling.LocalProfiler`: the TUI never runs it
  itself) for :attr:`Profiling.duration_s` (:data:`PROFILE_S` at first), or, with none here, asks the agent of the
  first other host to (a ``profile`` request through a source that can send
  requests); the panel counts the seconds down, then says how many idle
  thread samples py-spy left out (it records running threads only);
- ``F`` asks for another duration (1 to :data:`MAX_PROFILE_S` seconds);
- ``L`` reopens the last flame graph (``f`` or ``d``) of this screen;
- ``d`` (quick look) dumps each local process's stacks once, merged into one
  graph under ``process PID`` frames.

The result opens as a flame graph through an
:class:`~gpulens.tui.messages.OpenFlame` message; progress and errors show in
the screen's :class:`~gpulens.tui.widgets.profile_panel.ProfilePanel`. The work
runs in thread workers (:mod:`gpulens.tui.workers`), cancelled with the screen.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from gpulens.core.errors import GpulensError
from gpulens.sources.local import replays
from gpulens.sources.profiling import local_profiler
from gpulens.tui.context import requester
from gpulens.tui.messages import OpenFlame
from gpulens.tui.profile_jobs import PROFILE_S, ProfileState, profile_jobs
from gpulens.tui.profile_view import ProfileView
from gpulens.tui.widgets.ordered_input import OrderedInput
from gpulens.tui.widgets.profile_panel import ProfilePanel
from gpulens.tui.workers import call_in_app, cancelled, wait

__all__ = ["PROFILE_S", "Profiling"]

if TYPE_CHECKING:
    from gpulens.analysis.flame.model import Profile
    from gpulens.analysis.flame.pyspy import Sampled
    from gpulens.core.events import RequestSource
    from gpulens.sources.profiling import LocalProfiler
    from gpulens.tui.screens.base import DataScreen

MAX_PROFILE_S = 60.0
"""The longest ``F`` accepts (an agent refuses more)."""
PROFILE_BINDINGS: list[BindingType] = [
    Binding("F", "profile_seconds", "Profile secs", key_display="F", show=False),
    Binding("L", "last_flame", "Last flame", key_display="L", show=False),
    Binding("m", "gpu_memory", "GPU mem flame", tooltip="live GPU memory by Python stack (a root agent's eBPF)"),
]
"""The keys a screen with a :class:`Profiling` adds to its own ``f`` and ``d``."""

READONLY_HIDES = frozenset({"profile", "quick_look", "profile_seconds", "last_flame", "open_profiler",
                            "profiler_hint", "gpu_memory"})
"""The actions ``--readonly`` removes from a host or job screen: py-spy attaches to a process (ptrace
stops it while it reads the stacks) and a trace request makes it run the profiler."""
READONLY_NOTE = "read-only (--readonly): no py-spy sampling, no traces"
REPLAY_NOTE = "a recording: its processes are not running now (no py-spy sampling, no traces)"
"""Also :data:`READONLY_HIDES` gone: a recorded pid may name another process now."""
NO_PYSPY_NOTE = "py-spy is not available here: no source of this view runs it on this machine"
"""``f`` / ``d`` on this machine's processes when no part of the source offers a
:class:`~gpulens.sources.profiling.LocalProfiler` (the command line gives this machine's source one)."""


def refusal(ctx: object) -> str:
    """Why ``ctx`` (a screen context) samples and traces nothing at all: ``--readonly``, a replay ("" if it can)."""
    if getattr(ctx, "readonly", False):
        return READONLY_NOTE
    return REPLAY_NOTE if replays(getattr(ctx, "source", None)) else ""


class DurationPrompt(ModalScreen[float | None]):
    """Ask how many seconds ``f`` samples for."""

    DEFAULT_CSS = """
    DurationPrompt { align: center middle; }
    DurationPrompt > Vertical { width: 60; height: auto; border: round $primary; background: $panel; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Cancel")]

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"py-spy sampling time for f, in seconds (1-{MAX_PROFILE_S:g}); enter sets, esc keeps",
                         id="duration-help")
            yield OrderedInput(value=f"{self.seconds:g}", id="duration")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            value = float(event.value)
        except ValueError:
            value = -1.0
        if not 1 <= value <= MAX_PROFILE_S:
            self.query_one("#duration-help", Static).update(
                f"{event.value!r} is not a number of seconds from 1 to {MAX_PROFILE_S:g}; try again (esc keeps)")
            return
        self.dismiss(float(round(value)))

    def action_close(self) -> None:
        """Keep the duration."""
        self.dismiss(None)


class Profiling:
    """Profile, quick look and their flame graph for ``screen``.

    ``local_pids``: the screen's job processes on this machine (py-spy reaches
    only those); ``remote_pids``: those on other hosts, by host (their agents
    sample them); ``local_host``: the name this machine has in the view, so
    that its processes are sampled through its agent when the view's source
    does not run py-spy here (``--connect`` to this machine's own agent).
    """

    def __init__(self, screen: DataScreen, local_pids: Callable[[], list[int]],
                 remote_pids: Callable[[], dict[str, list[int]]],
                 local_host: Callable[[], str | None] = lambda: None) -> None:
        self.screen = screen
        self.local_pids = local_pids
        self.remote_pids = remote_pids
        self.local_host = local_host
        self.view = ProfileView(screen)
        """The screen's Profile panel: its countdown while py-spy samples."""
        self._state: ProfileState | None = None

    @property
    def state(self) -> ProfileState:
        """This screen's profiling, kept by the app (:mod:`gpulens.tui.profile_jobs`): the same for the
        same host or job when the screen is opened again, and a sampling runs on when it closes."""
        if self._state is None:
            label = getattr(self.screen, "crumb", "") or type(self.screen).__name__
            self._state = profile_jobs(self.screen.app).state(f"{type(self.screen).__name__}:{label}", label)
        return self._state

    @property
    def duration_s(self) -> float:
        """How long ``f`` samples (``F`` changes it; kept per host or job)."""
        return self.state.duration_s

    @duration_s.setter
    def duration_s(self, value: float) -> None:
        self.state.duration_s = value

    @property
    def last(self) -> tuple[Profile, str] | None:
        """The last flame graph of this screen and its title (``L`` reopens it)."""
        return self.state.last

    def resume(self) -> None:
        """The screen (re)opened: show a sampling still running, or a graph that finished meanwhile."""
        st = self.state
        if st.doing:
            self.view.count_down(st.doing, st.deadline, st.seconds or self.duration_s)
        if st.last is not None:
            self._note()
        if st.ready:
            st.ready = False
            self.screen.notify(f"the flame graph sampled here while you were away is ready: L opens it "
                               f"({st.last_note or (st.last[1] if st.last else '')})")

    @property
    def refusal(self) -> str:
        """Why nothing is sampled or traced here at all ("" when it can be): ``--readonly``, a replay."""
        return refusal(self.screen.ctx)

    @property
    def readonly(self) -> bool:
        """``--readonly`` or a replay: nothing is sampled or traced, the keys are gone."""
        return bool(self.refusal)

    def allows(self, action: str) -> bool:
        """Whether the screen offers ``action`` (``--readonly`` removes :data:`READONLY_HIDES`)."""
        return not (self.readonly and action in READONLY_HIDES)

    def count(self) -> int:
        """How many processes ``f`` would sample (here, or else through an agent)."""
        if self.screen.ctx.source.simulated or self.readonly:
            return 0
        return len(self.local_pids()) or sum(len(p) for p in self.remote_pids().values())

    def _can_profile(self) -> bool:
        """False, with a notice, when there is nothing real to sample or no flame graphs."""
        if self.readonly:
            self.screen.notify(self.refusal, severity="warning")
            return False
        if self.screen.ctx.source.simulated:
            self.screen.notify("SIMULATED data: there are no real processes to profile", severity="warning")
            return False
        if not (_has("gpulens.analysis.flame.pyspy") and _has("gpulens.tui.screens.flame")):
            self.screen.notify("flame graphs not available", severity="warning")
            return False
        return True

    def profile(self) -> None:
        """``f``: sample the processes' stacks with py-spy and open a flame graph."""
        if not self._can_profile():
            return
        if self.state.doing:
            self.screen.notify(f"{self.state.doing}: {round(self.state.left_s())} s left; the flame graph opens "
                               "when done", severity="warning")
            return
        pids = self.local_pids()
        seconds = self.duration_s
        source = requester(self.screen.ctx)
        profiler = local_profiler(self.screen.ctx.source) if pids else None
        if profiler is not None:
            self._start_countdown(f"sampling {len(pids)} process(es) with py-spy")
            self._run_on_app(lambda: self._sample(profiler, pids, seconds), "py-spy profile")
            return
        # No py-spy here: this machine's processes go through its agent when the view has one (--connect).
        here = self.local_host() if pids and source is not None else None
        if pids and here is None:
            self.screen.notify(NO_PYSPY_NOTE, severity="warning")
            return
        remote = {here: pids} if here is not None else self.remote_pids()
        if remote and source is not None:
            agents: RequestSource = source
            host, host_pids = next(iter(remote.items()))
            more = f" (host 1 of {len(remote)})" if len(remote) > 1 else ""
            self._start_countdown(f"the agent on {host} samples {len(host_pids)} process(es) with py-spy{more}")
            self._run_on_app(lambda: self._sample_remote(agents, host, host_pids, seconds), f"profile on {host}")
            return
        where = "through an agent (--connect / --ssh)" if remote else "on this machine"
        self.screen.notify(f"no job processes to profile {where}; this machine is {self.screen.ctx.hostname}",
                           severity="warning")

    def quick_look(self) -> None:
        """``d``: one ``py-spy dump`` per local process, merged into a flame graph (no waiting)."""
        if not self._can_profile():
            return
        pids = self.local_pids()
        if pids:
            if (profiler := local_profiler(self.screen.ctx.source)) is None:
                self.screen.notify(NO_PYSPY_NOTE, severity="warning")
                return
            self._set_state(f"dumping the stacks of {len(pids)} process(es) with py-spy…")
            self.screen.background.start(lambda: self._dump(profiler, pids), name="quick look", group="profile")
            return
        if self.remote_pids():
            self.screen.notify("quick look (d) is local only; use f to sample through the agent", severity="warning")
            return
        self.screen.notify(f"no job processes to profile on this machine; this machine is {self.screen.ctx.hostname}",
                           severity="warning")

    def ask_duration(self) -> None:
        """``F``: ask how many seconds ``f`` samples for."""
        def chosen(seconds: float | None) -> None:
            if seconds is not None:
                self.duration_s = seconds
                self._note()

        self.screen.app.push_screen(DurationPrompt(self.duration_s), chosen)

    def reopen(self) -> None:
        """``L``: show the last flame graph again."""
        if self.last is None:
            self.screen.notify("no flame graph yet on this screen: f samples with py-spy, d takes a quick look",
                               severity="warning")
            return
        profile, title = self.last
        self.screen.post_message(OpenFlame(profile, title))

    def commands(self) -> list[SystemCommand]:
        """Profile, its duration, the last graph and Quick look, for the command palette (none read-only)."""
        if self.readonly:
            return []
        return [
            SystemCommand("Profile", f"f: py-spy the job processes for {self.duration_s:g} s, open a flame graph",
                          self.profile),
            SystemCommand("Profile duration", "F: how many seconds f samples for", self.ask_duration),
            SystemCommand("Last flame graph", "L: reopen the last flame graph of this screen", self.reopen),
            SystemCommand("Quick look", "d: one py-spy dump of each local job process, as a flame graph",
                          self.quick_look),
        ]

    # ---- on the app's thread --------------------------------------------------
    def _run_on_app(self, work: Callable[[], None], name: str) -> None:
        """Run ``work`` as the app's worker, not the screen's: it goes on when the screen closes
        (cancelled when the app quits; the sampler then kills py-spy at once)."""
        self.screen.app.run_worker(work, name=name, group=f"profile {self.state.label}", thread=True,
                                   exit_on_error=False)

    def _set_state(self, text: str) -> None:
        here = self._here()
        if here is not self:
            here._set_state(text)
            return
        self.state.doing = ""
        self.view.stop()
        if self.view.mounted():
            self.view.panel().set_state(text)
        else:
            self.screen.app.notify(f"{self.state.label}: {text}", severity="warning")

    def _note(self) -> None:
        keys = f"F: seconds (now {self.duration_s:g} s)"
        if self.last is not None:
            keys += f" · L: reopen the last graph ({self.state.last_note or self.last[0].title})"
        self.view.panel().set_note(keys)

    def _start_countdown(self, doing: str) -> None:
        deadline = time.monotonic() + self.duration_s
        st = self.state
        st.doing, st.deadline, st.seconds = doing, deadline, self.duration_s
        self.view.count_down(doing, deadline, self.duration_s)
        # The Profile panel's countdown may be below the fold (80x24): a toast says it at any size.
        self.screen.notify(f"{doing} for {self.duration_s:g} s: the flame graph opens when done",
                           timeout=max(3.0, min(self.duration_s, 10.0)))

    def _here(self) -> Profiling:
        """The Profiling that shows this state now: this one, or that of the same host's or job's screen
        opened again since (a new screen object) when it is the one shown."""
        current = getattr(self.screen.app.screen, "profiling", None)
        if isinstance(current, Profiling) and current is not self and current._state is self.state:
            return current
        return self

    def _show(self, profile: Profile, title: str = "", note: str = "") -> None:
        here = self._here()
        if here is not self:
            here._show(profile, title, note)
            return
        st = self.state
        st.doing = ""
        self.view.stop()
        st.last, st.last_note = (profile, title), note
        if not self.view.mounted():  # the screen was left while py-spy ran: keep the graph, say it is there
            st.ready = True
            self.screen.app.notify(f"flame graph of {st.label} ready: open {st.label} and press L")
            return
        self._set_state(ProfilePanel.idle_text(self.count()) + (f" · last: {note}" if note else ""))
        self._note()
        self.screen.post_message(OpenFlame(profile, title))

    # ---- workers ----------------------------------------------------------------
    def _sample(self, profiler: LocalProfiler, pids: list[int], seconds: float) -> None:
        from gpulens.core.pyspy import SamplingCancelled

        try:
            run: Sampled = profiler.sample_counted(pids, duration_s=seconds, cancel=cancelled)
        except SamplingCancelled:  # the app quits: py-spy is killed, nothing to show
            return
        except (GpulensError, OSError) as err:  # shown in the panel: permission, process gone...
            call_in_app(self._set_state, f"profile failed: {err}")
            return
        note = run.idle_line()
        call_in_app(self._show, run.profile, f"{run.profile.title}  ({note})", note)

    def _sample_remote(self, source: RequestSource, host: str, pids: list[int], seconds: float) -> None:
        from gpulens.analysis.flame.folded import parse_folded
        from gpulens.core.limits import InputLimits, read_input
        from gpulens.core.pyspy import MAX_OUTPUT_BYTES
        from gpulens.ipc.request_schema import ProfileParams
        from gpulens.sources.ask import ask

        params = ProfileParams(pids=tuple(pids), duration_s=seconds, rate_hz=100)
        try:
            result = wait(ask(source, host, params, seconds + 60.0), seconds + 90.0)
            if result is None:  # the screen closed while the agent sampled
                return
            files = list(result.files.values())
            if len(files) != 1:
                raise RuntimeError(f"the agent sent {len(files)} files, expected 1")
            data = read_input(str(files[0]), InputLimits(max_bytes=MAX_OUTPUT_BYTES), what="folded profile")
            profile = parse_folded(bytes(data), source=str(files[0]),
                                   title=f"py-spy on {host}: {', '.join(map(str, pids))}")
        except (GpulensError, OSError, RuntimeError, ValueError, ArithmeticError) as err:  # shown in the panel:
            # no agent, permission, py-spy missing, a file not folded stacks (a count too large for a float…)
            call_in_app(self._set_state, f"profile on {host} failed: {err}")
            return
        note = (f"{int(profile.total)} samples; idle thread samples dropped by py-spy (--idle off) "
                "are not counted through an agent")
        call_in_app(self._show, profile, "", note)

    def _dump(self, profiler: LocalProfiler, pids: list[int]) -> None:
        from gpulens.analysis.flame.model import build_from_stacks

        stacks: list[tuple[list[str], float]] = []
        errors: list[str] = []
        for pid in pids:
            if cancelled():
                return
            try:
                part = profiler.dump(pid)
            except (GpulensError, OSError) as err:  # one gone process must not hide the others' stacks
                errors.append(str(err))
                continue
            # several processes: each one's threads under a "process PID" frame, as f does
            prefix = [f"process {pid}"] if len(pids) > 1 else []
            stacks.extend((prefix + list(frames), value) for frames, value in part.stacks())
        if not stacks:
            call_in_app(self._set_state, f"quick look failed: {errors[0] if errors else 'no stacks'}")
            return
        if errors:  # some processes dumped, others not: say so rather than show a silent partial graph
            call_in_app(self.screen.notify, f"{len(errors)} of {len(pids)} dumps failed: {errors[0]}",
                        severity="warning")
        title = "py-spy dump: " + ", ".join(map(str, pids))
        call_in_app(self._show, build_from_stacks(stacks, "samples", title), title)


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
