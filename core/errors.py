"""The one error tree of gpulens: every error a user can meet derives from :class:`GpulensError`.

Each error carries a short ``title`` and a message a user can act on; the
command line prints ``gpulens: <title>: <message>`` and exits 2
(``gpulens/errors.py``), the TUI shows the message where the action was. A
metric that cannot be read is not an error: it is ``None`` plus a reason.
Where each lives, by package (as httpx keeps its tree in one place)::

    GpulensError                   core.errors
    ├── ConfigError                core.errors: a bad config file, flag or pattern (names file and key)
    ├── SchemaError                core.errors: data that does not fit the sample model (names the field)
    ├── RecordingError             core.errors: a --record/--replay file not (or no longer) readable
    ├── CollectorError             core.errors: a collector that cannot start at all
    │   └── GpuLost                collectors.nvml.query: NVML says the GPU fell off the bus
    ├── PrometheusError            core.errors: Prometheus down, slow, answering garbage, or a bad query
    ├── InputRefused               core.limits: an input over its size, ratio or event limit
    ├── UnsafePath                 core.safefs: a path component that is a link, or not owned as required
    ├── BpfError                   collectors.gpumem.libbpf: eBPF cannot load or attach (says why)
    ├── ElfError                   collectors.gpumem.elf: an ELF file that cannot be read
    ├── LayoutError                collectors.gpumem.layouts: a CPython whose layout gpulens does not know
    ├── PythonNotReadable          collectors.gpumem.python_stack: a process's Python frames cannot be read
    ├── IpcError                   ipc.errors (that module draws its part of the tree)
    │   ├── ChannelClosed          ipc.channels: the agent's side of a channel ended
    │   ├── MalformedDatagram, EndpointBusy, DynologRpcError
    │   ├── TraceError             NotTraceable, TraceTimeout
    │   └── StreamError            ProtocolError (VersionMismatch), AuthError (TokenRequired in
    │                              sources.stream.link), RequestFailed (SaveFailed in sources.stream.downloads)
    ├── RequestError               agent.request_kinds: a request the agent cannot honour (sent back)
    ├── FlameError                 analysis.flame.errors: FlameFormatError (a file that is no profile)
    ├── ProfilerError              core.pyspy: py-spy missing or failed (ProfilerPermissionError,
    │                              SamplingCancelled)
    ├── TraceFileError             analysis.trace.errors: a trace file that is not one
    │   └── ExportError            sources.trace_export: a destination that cannot be written
    ├── PyroscopeError             sources.pyroscope: Pyroscope refused or is unreachable
    └── FilterError                tui.finding: a ``/`` filter that is not a valid pattern (also a ValueError)

Outside the tree on purpose, because they are signals, not errors: ``tui.workers.Cancelled``
(a worker nobody waits for any more stops) and private control-flow exceptions inside one module
(names starting with ``_``). ``tests/checks/test_errors.py`` holds the tree to this.
"""

from __future__ import annotations

from typing import Any


class GpulensError(Exception):
    """Base of all gpulens errors."""

    title = "gpulens error"


class ConfigError(GpulensError):
    """A configuration value is wrong; the message names where and what was expected."""

    title = "configuration error"


class SchemaError(GpulensError):
    """Plain data does not match the sample model."""

    title = "malformed data"

    def __init__(self, path: str, expected: str, got: object) -> None:
        shown = repr(got)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        super().__init__(f"{path}: expected {expected}, got {shown}")
        self.path = path
        self.expected = expected


class CollectorError(GpulensError):
    """A collector cannot run at all."""

    title = "collector error"


class PrometheusError(GpulensError):
    """Prometheus could not answer usefully; ``kind`` is ``down``, ``slow``,
    ``garbage`` or ``query`` (Prometheus' own error message, e.g. bad PromQL)."""

    title = "Prometheus error"

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class RecordingError(GpulensError):
    """A recording file is not a gpulens recording, or is corrupt or truncated.

    ``events`` holds the events read before the fault, so a viewer can show them.
    """

    title = "unreadable recording"
    events: list[Any]

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.events = []
