"""``gpulens`` (no command): build the source from the flags, run the app, clean up."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpulens.core.events import Source
    from gpulens.ipc.kineto.protocol import TraceService


def _trace_service(source: Source) -> tuple[TraceService | None, str | None]:
    """The local Kineto trace service (when watching this machine), or why there is none."""
    from gpulens.sources.local import LocalSource

    if not isinstance(source, LocalSource):
        return None, "the trace service serves this machine's processes (run gpulens there)"
    try:
        from gpulens.ipc.kineto.service import LocalTraceService

        service = LocalTraceService()
        service.start()
        return service, None
    except Exception as err:  # the TUI runs without "Open Profiler" and says why on job screens
        return None, f"trace service not started: {err}"


def launch(args: argparse.Namespace) -> int:
    """Run the TUI until the user quits; the exit code.

    The source is always stopped and the terminal restored, also on Ctrl-C
    and errors (Textual restores the terminal before raising).
    """
    from gpulens.sources.local import Recorder, RecordingSource
    from gpulens.sources_from_args import build_source
    from gpulens.tui.app import GpulensApp

    cfg = args.cfg
    source = build_source(args, cfg)
    service, trace_error = _trace_service(source)
    if getattr(args, "record", None):
        source = RecordingSource(source, Recorder(args.record, source.name, source.simulated))
    app = GpulensApp(source=source, cfg=cfg, trace_service=service, trace_error=trace_error)
    try:
        app.run()
    finally:
        app.stop_source()
        if service is not None:
            try:
                service.stop()
            except Exception as err:
                print(f"gpulens: trace service did not stop cleanly: {err}", file=sys.stderr)
    if app.return_code not in (None, 0):
        return int(app.return_code)
    return 0
