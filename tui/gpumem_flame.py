"""``m`` on a host or job screen: the GPU-memory flame graph of its processes, by Python stack (issue 28).

Through the agent of the processes' host (request ``gpumem``: an agent with
``--gpumem`` answers at once with everything its processes allocated since
they started CUDA; another one running as root traces a window of ``F``
seconds). For this machine's processes, a TUI running as root reads them
itself (its local source was handed ``agent.gpumem.LocalGpuMemory``: probes
attached at the first ``m``, kept while the TUI runs); otherwise it says how
to get them (an agent, or ``gpulens gpumem`` from the command line). The graph opens in the flame screen like py-spy's and is
asked for again every :data:`REFRESH_S` seconds while it is open (the flame
widget keeps focus, search and expansion; ``Space`` pauses it); ``L``
reopens the last one.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from gpulens.sources.gpumem import local_gpu_memory
from gpulens.tui.context import requester
from gpulens.tui.workers import call_in_app, wait

log = logging.getLogger("gpulens.tui.gpumem_flame")

if TYPE_CHECKING:
    from gpulens.analysis.flame.model import Profile
    from gpulens.core.events import RequestSource
    from gpulens.tui.profiling import Profiling

REFRESH_S = 5.0
"""The open GPU-memory flame graph is asked for again this often."""
NEEDS_ROOT = ("GPU memory flame graphs come from a root agent, which loads eBPF: start gpulens agent --gpumem "
              "as root and connect to it (gpulens --connect HOST)")


def open_gpu_memory(p: Profiling) -> None:
    """Start the GPU-memory flame graph of ``p``'s screen's processes (a worker), or say why not."""
    if not p._can_profile():
        return
    if p.state.doing:
        p.screen.notify(f"{p.state.doing}: {round(p.state.left_s())} s left", severity="warning")
        return
    seconds = p.duration_s
    remote = p.remote_pids()
    source = requester(p.screen.ctx)
    if remote and source is not None:
        agents: RequestSource = source
        host, pids = next(iter(remote.items()))
        p._start_countdown(f"the agent on {host} reads the GPU memory of {len(pids)} process(es)")

        def ask() -> tuple[Profile, str] | None:
            return _ask(agents, host, pids, seconds)

        p._run_on_app(lambda: _open(p, f"on {host}", ask, ask), f"GPU memory on {host}")
        return
    local = p.local_pids()
    first = local_gpu_memory(p.screen.ctx.source, local) if local else None
    if first is not None:
        p._start_countdown(f"reading the GPU memory of {len(local)} process(es) here (eBPF)")
        p._run_on_app(lambda: _open(p, "here", lambda: _ask_here(p, local, first), lambda: _ask_here(p, local)),
                      "GPU memory here")
        return
    if local:
        p.screen.notify(f"{NEEDS_ROOT}; or, for these processes now: sudo gpulens gpumem --pid "
                        + ",".join(map(str, local[:8])), severity="warning", timeout=12)
        return
    p.screen.notify("no job processes whose GPU memory could be read here", severity="warning")


def _ask(source: RequestSource, host: str, pids: list[int], seconds: float) -> tuple[Profile, str] | None:
    """One ``gpumem`` answer as a profile and its note (None: the screen went meanwhile). Raises on failure."""
    from gpulens.analysis.flame.folded import parse_folded
    from gpulens.core.limits import InputLimits, read_input
    from gpulens.ipc.request_schema import GpuMemParams
    from gpulens.sources.ask import ask

    params = GpuMemParams(pids=tuple(pids), mode="live", duration_s=seconds)
    result = wait(ask(source, host, params, seconds + 60.0), seconds + 90.0)
    if result is None:
        return None
    files = list(result.files.values())
    if len(files) != 1:
        raise RuntimeError(f"the agent sent {len(files)} files, expected 1")
    try:
        data = read_input(str(files[0]), InputLimits(max_bytes=64 << 20), what="GPU memory stacks")
    finally:  # our own download, asked for again every few seconds while the graph is open: not kept
        with contextlib.suppress(OSError):
            os.unlink(files[0])
    profile = parse_folded(bytes(data), unit="bytes", source=str(files[0]),
                           title=f"GPU memory live on {host}: {', '.join(map(str, pids))}")
    return profile, _note(result.answer.python, result.answer.lost)


def _ask_here(p: Profiling, pids: list[int], fut: Future[tuple[str, dict[str, Any]]] | None = None,
              ) -> tuple[Profile, str] | None:
    """This machine's answer, from the TUI's own tracer (None: the screen went meanwhile). Raises on failure."""
    from gpulens.analysis.flame.folded import parse_folded

    fut = fut or local_gpu_memory(p.screen.ctx.source, pids)
    if fut is None:
        raise RuntimeError("this machine's GPU memory cannot be read here any more")
    got = wait(fut, 60.0)
    if got is None:
        return None
    text, body = got
    profile = parse_folded(text.encode(), unit="bytes", source="eBPF",
                           title=f"GPU memory live here: {', '.join(map(str, pids))}")
    return profile, _note(body.get("python"), body.get("lost"))


def _open(p: Profiling, where: str, first: Callable[[], tuple[Profile, str] | None],
          again: Callable[[], tuple[Profile, str] | None]) -> None:
    """Show the first answer (in a worker), then refresh it from ``again`` while the flame screen is open."""
    try:
        got = first()
    except Exception as err:  # shown in the panel: no agent, not root there, eBPF refused, the processes gone…
        log.info("GPU memory %s failed", where, exc_info=True)
        call_in_app(p._set_state, f"GPU memory {where} failed: {err}")
        return
    if got is None:
        return
    profile, note = got
    call_in_app(p._show, profile, "", note)
    call_in_app(_follow, p, profile, again)


def _follow(p: Profiling, first: Profile, again: Callable[[], tuple[Profile, str] | None]) -> None:
    """Refresh the flame screen that shows ``first`` every :data:`REFRESH_S` while it is open (focus, search and
    expansion kept, ``Space`` pauses); stop when it closes. One request at a time, off the app's thread."""
    app = p.screen.app
    state: dict[str, Any] = {"screen": None, "busy": False, "waited": 0}

    def tick() -> None:
        flame = state["screen"] or next((s for s in app.screen_stack if getattr(s, "profile", None) is first), None)
        if flame is None:
            state["waited"] += 1
            if state["waited"] > 10:  # the screen never opened (the host screen was left): nothing to follow
                timer.stop()
            return
        state["screen"] = flame
        if flame not in app.screen_stack:
            timer.stop()
            return
        if state["busy"]:
            return
        state["busy"] = True

        def fetch() -> None:
            try:
                got = again()
            except Exception as err:  # the agent went away: the graph stays, the title says so
                log.info("GPU memory refresh failed", exc_info=True)
                got, why = None, str(err)
            else:
                why = ""
            call_in_app(update, got, why)

        app.run_worker(fetch, thread=True, group="gpumem-refresh", exit_on_error=False)

    def update(got: tuple[Profile, str] | None, why: str) -> None:
        state["busy"] = False
        flame = state["screen"]
        if flame is None or flame not in app.screen_stack:
            return
        if got is not None:
            flame.update_profile(got[0])
        elif why:
            app.notify(f"GPU memory refresh failed: {why}", severity="warning", timeout=5)

    timer = app.set_interval(REFRESH_S, tick)


def _note(python: object, lost: object) -> str:
    parts = []
    if isinstance(python, dict):
        unread = [f"{pid}: {why}" for pid, why in python.items() if why]
        if unread:
            parts.append("Python frames not read for " + "; ".join(str(u) for u in unread)[:300])
    if isinstance(lost, int) and lost:
        parts.append(f"{lost} events lost (figures low)")
    return " · ".join(parts) or "live bytes by Python stack"


__all__ = ["NEEDS_ROOT", "open_gpu_memory"]
