"""The host and job screens' Profile action: py-spy here, or through another host's agent.

A :class:`Profiling` belongs to one screen and is handed how to find its
processes: those on this machine and those on other hosts, by host.

- ``f`` samples the local processes with py-spy for :data:`PROFILE_S`, or,
  with none here, asks the agent of the first other host to (a ``profile``
  request through a source that can send requests);
- ``d`` (quick look) dumps each local process's stacks once, merged into one
  graph under ``process PID`` frames.

The result opens as a flame graph through an
:class:`~gpulens.tui.messages.OpenFlame` message; progress and errors show in
the screen's :class:`~gpulens.tui.widgets.profile_panel.ProfilePanel`. The work
runs in thread workers (:mod:`gpulens.tui.workers`), cancelled with the screen.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.app import SystemCommand

from gpulens.tui.context import requester
from gpulens.tui.messages import OpenFlame
from gpulens.tui.widgets.profile_panel import ProfilePanel
from gpulens.tui.workers import call_in_app, cancelled, wait

if TYPE_CHECKING:
    from gpulens.analysis.flame.model import Profile
    from gpulens.core.events import RequestSource
    from gpulens.tui.screens.base import DataScreen

PROFILE_S = 5.0
"""Seconds ``f`` samples the job's processes for."""


class Profiling:
    """Profile, quick look and their flame graph for ``screen``.

    ``local_pids``: the screen's job processes on this machine (py-spy reaches
    only those); ``remote_pids``: those on other hosts, by host (their agents
    sample them).
    """

    def __init__(self, screen: DataScreen, local_pids: Callable[[], list[int]],
                 remote_pids: Callable[[], dict[str, list[int]]]) -> None:
        self.screen = screen
        self.local_pids = local_pids
        self.remote_pids = remote_pids

    def count(self) -> int:
        """How many processes ``f`` would sample (here, or else through an agent)."""
        if self.screen.ctx.source.simulated:
            return 0
        return len(self.local_pids()) or sum(len(p) for p in self.remote_pids().values())

    def _can_profile(self) -> bool:
        """False, with a notice, when there is nothing real to sample or no flame graphs."""
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
        pids = self.local_pids()
        if pids:
            self._set_state(f"sampling {len(pids)} process(es) with py-spy for 5 s…")
            self.screen.background.start(lambda: self._sample(pids), name="py-spy profile", group="profile")
            return
        remote = self.remote_pids()
        source = requester(self.screen.ctx)
        if remote and source is not None:
            agents: RequestSource = source
            host, host_pids = next(iter(remote.items()))
            more = f" (host 1 of {len(remote)})" if len(remote) > 1 else ""
            self._set_state(f"asking the agent on {host} to sample {len(host_pids)} process(es) with py-spy for "
                            f"{PROFILE_S:g} s{more}…")
            self.screen.background.start(lambda: self._sample_remote(agents, host, host_pids),
                                         name=f"profile on {host}", group="profile")
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
            self._set_state(f"dumping the stacks of {len(pids)} process(es) with py-spy…")
            self.screen.background.start(lambda: self._dump(pids), name="quick look", group="profile")
            return
        if self.remote_pids():
            self.screen.notify("quick look (d) is local only; use f to sample through the agent", severity="warning")
            return
        self.screen.notify(f"no job processes to profile on this machine; this machine is {self.screen.ctx.hostname}",
                           severity="warning")

    def commands(self) -> list[SystemCommand]:
        """Profile and Quick look, for the command palette."""
        return [
            SystemCommand("Profile", "f: py-spy the job processes for 5 s, open a flame graph", self.profile),
            SystemCommand("Quick look", "d: one py-spy dump of each local job process, as a flame graph",
                          self.quick_look),
        ]

    # ---- on the app's thread --------------------------------------------------
    def _set_state(self, text: str) -> None:
        self.screen.query_one(ProfilePanel).set_state(text)

    def _show(self, profile: Profile, title: str = "") -> None:
        self._set_state(ProfilePanel.idle_text(self.count()))
        self.screen.post_message(OpenFlame(profile, title))

    # ---- workers ----------------------------------------------------------------
    def _sample(self, pids: list[int]) -> None:
        from gpulens.analysis.flame.pyspy import sample_pids

        try:
            profile = sample_pids(pids, duration_s=PROFILE_S)
        except Exception as err:  # shown in the panel: permission, process gone...
            call_in_app(self._set_state, f"profile failed: {err}")
            return
        call_in_app(self._show, profile)

    def _sample_remote(self, source: RequestSource, host: str, pids: list[int]) -> None:
        from gpulens.analysis.flame.folded import parse_folded
        from gpulens.analysis.flame.pyspy import MAX_OUTPUT_BYTES
        from gpulens.core.limits import InputLimits, read_input

        params = {"pids": pids, "duration_s": PROFILE_S, "rate_hz": 100}
        try:
            result = wait(source.request(host, "profile", params, PROFILE_S + 60.0), PROFILE_S + 90.0)
            if result is None:  # the screen closed while the agent sampled
                return
            files = list(result.files.values())
            if len(files) != 1:
                raise RuntimeError(f"the agent sent {len(files)} files, expected 1")
            data = read_input(str(files[0]), InputLimits(max_bytes=MAX_OUTPUT_BYTES), what="folded profile")
            profile = parse_folded(bytes(data), source=str(files[0]),
                                   title=f"py-spy on {host}: {', '.join(map(str, pids))}")
        except Exception as err:  # shown in the panel: no agent, permission, py-spy missing...
            call_in_app(self._set_state, f"profile on {host} failed: {err}")
            return
        call_in_app(self._show, profile)

    def _dump(self, pids: list[int]) -> None:
        from gpulens.analysis.flame.model import build_from_stacks
        from gpulens.analysis.flame.pyspy import dump

        stacks: list[tuple[list[str], float]] = []
        errors: list[str] = []
        for pid in pids:
            if cancelled():
                return
            try:
                part = dump(pid)
            except Exception as err:  # one gone process must not hide the others' stacks
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
