"""``gpulens`` (no command): build the source from the flags, run the app, clean up."""

from __future__ import annotations

import argparse
import gc
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpulens.agent.agent import Agent
    from gpulens.core.events import Source
    from gpulens.ipc.kineto.protocol import TraceService


def _trace_service(
    source: Source, job_key_env: tuple[str, ...] | None = None
) -> tuple[TraceService | None, str | None, Callable[[], None]]:
    """This machine's trace service (when watching it), or why there is none; and how to release it.

    One gpulens per host owns the Kineto endpoint: the TUI binds it first if
    it can (an in-process agent whose control socket serves every other
    gpulens here), else it traces through the gpulens that holds it. Only a
    ``LocalSource`` does either: ``--demo``, ``--replay``, ``--connect``,
    ``--ssh`` and ``--prometheus`` never touch this machine's endpoint.
    """
    import socket

    from gpulens.sources.local import LocalSource

    if not isinstance(source, LocalSource):
        return None, "the trace service serves this machine's processes (run gpulens there)", _nothing
    try:
        from gpulens import __version__
        from gpulens.agent.agent import endpoint_owner
        from gpulens.core.errors import GpulensError
        from gpulens.ipc.errors import EndpointBusy
    except ImportError as err:
        return None, f"trace service not installed: {err}", _nothing
    from gpulens.ipc.kineto.endpoint import resolve_socket_dir

    socket_dir = resolve_socket_dir(None)  # $KINETO_IPC_SOCKET_DIR now: the follower keeps watching that name

    def own() -> Agent:
        return endpoint_owner(socket.gethostname(), socket_dir or "", version=__version__, job_key_env=job_key_env)

    try:
        owner = own()
    except EndpointBusy as busy:
        return _through_owner(busy, own, socket_dir)
    except (GpulensError, OSError, RuntimeError) as err:  # the TUI runs without "Open Profiler", says why on job screens
        return None, f"trace service not started: {err}", _nothing
    from gpulens.sources.owner_switch import HandoverTraceService

    # A gpulens agent started later may take the endpoint over; the TUI then traces through it.
    service = HandoverTraceService(owner.requests.trace_service, reclaim=owner.reclaim_endpoint)
    owner.allow_handover(service.on_handover)

    def release() -> None:
        service.stop()
        owner.stop()

    return service, None, release


def _through_owner(
    busy: Exception, own: Callable[[], Agent], socket_dir: str | None = None
) -> tuple[TraceService | None, str | None, Callable[[], None]]:
    """The Kineto name is taken: trace through the gpulens holding it, if it is one we may use; when
    that one exits, own the endpoint here (``own()``: an in-process owner, as when we had started first)."""
    from gpulens.ipc.errors import StreamError
    from gpulens.sources.owner_switch import HandoverTraceService
    from gpulens.sources.stream.control_trace import ControlTraceService, connect_owner
    from gpulens.sources.tracing import default_download_dir

    try:
        link = connect_owner(socket_dir or "", default_download_dir())
    except StreamError as err:
        return None, f"trace service not started: {busy} ({err})", _nothing
    owners: list[Agent] = []
    box: list[HandoverTraceService] = []

    def take() -> tuple[TraceService, Callable[[], None]]:
        owner = own()  # EndpointBusy while someone holds the name
        owners.append(owner)
        owner.allow_handover(box[0].on_handover)
        local = owner.requests.trace_service
        assert local is not None  # endpoint_owner raises unless it serves
        return local, owner.reclaim_endpoint

    service = HandoverTraceService.follower(ControlTraceService(link), take, socket_dir or "")
    box.append(service)

    def release() -> None:
        service.stop()
        for owner in owners:
            owner.stop()

    return service, None, release


def _nothing() -> None:
    """No trace service to release."""


GC_THRESHOLDS = (10_000, 50, 100)
"""``gc.set_threshold`` while the TUI runs (Python's default: 700, 10, 10)."""
GC_FREEZE_AFTER_S = 15.0
"""When what start-up made (screens, styles, the backfilled history) is set aside from collections."""


def _tune_gc() -> None:
    """Collect less often, and leave start-up's objects out of every later collection.

    Nearly all of a viewer's garbage is freed at once (no cycles). At Python's
    thresholds the young generation is collected ~2 times a second, each time
    scanning the last second's samples, and every ~50 s a full collection walks
    every object start-up made (~70 ms): 1-2.5 ms of CPU a second, a tenth of
    the viewer's budget (benchmarks/RESULTS.md, issue 13, third pass).
    """
    gc.set_threshold(*GC_THRESHOLDS)
    freeze = threading.Timer(GC_FREEZE_AFTER_S, gc.freeze)
    freeze.daemon = True
    freeze.start()


def launch(args: argparse.Namespace) -> int:
    """Run the TUI until the user quits; the exit code.

    The source is always stopped and the terminal restored, also on Ctrl-C
    and errors (Textual restores the terminal before raising).
    """
    from gpulens.core.errors import ConfigError, ConfigProblem, GpulensError
    from gpulens.ipc.recording_out import RecordMode
    from gpulens.sources.local import Recorder, RecordingSource
    from gpulens.sources_from_args import build_source
    from gpulens.tui.app import GpulensApp

    cfg = args.cfg
    source = watched = build_source(args, cfg)
    append, force = bool(getattr(args, "append", False)), bool(getattr(args, "force", False))
    if getattr(args, "record", None):  # before the trace service: a refused file leaves nothing to release
        mode: RecordMode = "append" if append else ("overwrite" if force else "new")
        source = RecordingSource(source, Recorder(args.record, source.name, source.simulated, mode=mode))
    elif append or force:
        raise ConfigError("--append and --force go with --record FILE", where="--append" if append else "--force",
                          expected="--record FILE", problem=ConfigProblem.CONFLICT)
    service, trace_error, release = _trace_service(watched, cfg.job_key_env)
    app = GpulensApp(source=source, cfg=cfg, trace_service=service, trace_error=trace_error,
                     readonly=bool(getattr(args, "readonly", False)))
    _tune_gc()
    try:
        from gpulens.tui.terminal import run_restoring_terminal

        run_restoring_terminal(app)
    finally:
        app.stop_source()
        try:
            release()
        except (GpulensError, OSError, RuntimeError) as err:  # threads and sockets: say it, exit as the TUI did
            print(f"gpulens: trace service did not stop cleanly: {err}", file=sys.stderr)
    if app.return_code not in (None, 0):
        return int(app.return_code)
    return 0
