"""The one error tree of gpulens: every error a user can meet derives from :class:`GpulensError`.

Each error carries a short ``title`` and a message a user can act on; the
command line prints ``gpulens: <title>: <message>`` and exits 2
(``gpulens/errors.py``), the TUI shows the message where the action was. A
metric that cannot be read is not an error: it is ``None`` plus a reason.
Where each lives, by package (as httpx keeps its tree in one place)::

    GpulensError                   core.errors
    ├── ConfigError                core.errors: a bad config file, flag or pattern (names file and key);
    │   │                          its reason is a ConfigProblem (core.errors), with where/key/expected/got
    │   └── BadTraceRequest        ipc.kineto.requests: a trace request out of range or in conflict (names
    │                              the field; also a ValueError)
    ├── SchemaError                core.errors: data that does not fit the sample model (names the field)
    ├── RecordingError             core.errors: a --record/--replay file not (or no longer) readable (its
    │                              reason a RecordingProblem, in core.errors; not opened: an InputProblem)
    ├── CollectorError             core.errors: a collector that cannot start at all
    │   └── GpuLost                collectors.nvml.query: NVML says the GPU fell off the bus
    ├── PrometheusError            core.errors: Prometheus down, slow, answering garbage, or a bad query
    ├── InputRefused               core.limits: an input not read: missing, not a regular file, damaged gzip,
    │                              over --max-mib or --max-ratio (its reason an InputProblem, in core.limits)
    ├── UnsafePath                 core.safefs: a path component that is a link, or not owned as required
    │                              (its reason a PathProblem, in core.safefs, about err.component)
    ├── BpfError                   collectors.gpumem.libbpf: eBPF cannot load or attach (says why)
    ├── ElfError                   collectors.gpumem.elf: an ELF file that cannot be read
    ├── LayoutError                collectors.gpumem.layouts: a CPython whose layout gpulens does not know
    ├── PythonNotReadable          collectors.gpumem.python_stack: a process's Python frames cannot be read
    ├── IpcError                   ipc.errors (that module draws its part of the tree)
    │   ├── ChannelClosed          ipc.channels: the agent's side of a channel ended
    │   ├── MalformedDatagram, EndpointBusy, DynologRpcError
    │   ├── TraceError             NotTraceable, TraceTimeout
    │   └── StreamError            ProtocolError (VersionMismatch), AuthError (TokenRequired in
    │                              sources.stream.handshake), RequestFailed (SaveFailed in sources.stream.downloads)
    ├── RequestError               agent.request_kinds: a request the agent cannot honour (sent back)
    ├── FlameError                 analysis.flame.errors: FlameFormatError (a file that is no profile;
    │                              its reason a FlameProblem, in analysis.flame.errors)
    ├── ProfilerError              core.pyspy: py-spy missing or failed (ProfilerPermissionError,
    │                              SamplingCancelled)
    ├── TraceFileError             analysis.trace.errors: a trace file that is not one (its reason a
    │                              TraceProblem, in analysis.trace.errors)
    │   └── ExportError            sources.trace_export: a destination that cannot be written
    ├── PyroscopeError             sources.pyroscope: Pyroscope refused or is unreachable
    └── FilterError                tui.finding: a ``/`` filter that is not a valid pattern (also a ValueError)

Outside the tree on purpose, because they are signals, not errors: ``tui.workers.Cancelled``
(a worker nobody waits for any more stops) and private control-flow exceptions inside one module
(names starting with ``_``). ``tests/checks/test_errors.py`` holds the tree to this.

Reasons are values (as psutil maps OS errors to classes and httpx keeps a request on its error):
``ConfigError.problem``, ``InputRefused.problem``, ``UnsafePath.problem`` (with ``component``, the path
it is about), ``FlameFormatError.problem``,
``TraceFileError.problem`` (``ExportError``'s too), ``RecordingError.problem`` (a RecordingProblem:
which rule of the format a file broke, at every place one is read) and ``StreamError.problem`` (a
StreamProblem; ``ProtocolError``'s a ProtocolProblem, ``AuthError``'s an AuthProblem, all in ipc.errors)
are small enums a caller or test
compares; the sentence is rendered from the fields where the error is made and is what ``str(err)``
gives. Where one error becomes another, the reason goes along: ``AuthError.file_problem`` (a token
file's ConfigProblem) and ``RecordingError.refused`` (the input guard's InputProblem, beside
``RecordingProblem.NOT_OPENED``). Refusals that are not errors are reason values
(``core.reasons.Reason``: a kind, the facts, one sentence per kind); docs/architecture.md lists them.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a type only: core.limits imports this module
    from gpulens.core.limits import InputProblem


class GpulensError(Exception):
    """Base of all gpulens errors."""

    title = "gpulens error"


class ConfigProblem(enum.Enum):
    """Why a configuration value is refused: what a caller or a test compares, not the sentence."""

    INVALID = "invalid"
    """Not classified further: the sentence says why (the default for ``ConfigError("...")``)."""
    WRONG_TYPE = "wrong type"
    """A value of the wrong type: a string where a number goes, a number where a table goes."""
    OUT_OF_RANGE = "out of range"
    """The right type, outside its bounds or its choices (``window = '2m'``, a warning above its critical level)."""
    MISSING = "missing"
    """A value that must be given is not, or is empty."""
    BAD_PATTERN = "bad pattern"
    """A regular expression that does not compile."""
    BAD_FORMAT = "bad format"
    """A string not of the form asked for (a header name, ``HOST:PORT``, a hostlist)."""
    CONFLICT = "conflict"
    """Options that do not go together, or one given without the option it needs (or a file that does not go
    with them: real hosts appended to a SIMULATED recording)."""
    UNREADABLE = "unreadable"
    """A file that is missing or cannot be read (a CA or credential file, a recording to replay)."""
    TOO_LARGE = "too large"
    """A file or list over its size limit (a config file, a hostlist of too many hosts)."""
    NOT_TOML = "not TOML"
    """A config file that does not parse as TOML."""
    UNAVAILABLE = "unavailable"
    """What a flag asks for, this machine cannot give: a port in use, a file not writable, a missing module."""
    NOT_REGULAR = "not a regular file"
    """A directory, FIFO, device or socket where a regular file goes."""
    NOT_A_DIRECTORY = "not a directory"
    """A file (or anything else) where a directory goes: ``trace --job -o DIR`` writes one file per rank into it."""
    UNSAFE = "unsafe"
    """A file gpulens will not use as it is: a symbolic link, another user's, a secret others can read."""
    EXISTS = "exists"
    """A file to be created is already there (the message names the flag that continues or replaces it)."""
    NOT_FOUND = "not found"
    """What a flag names is not there (a Slurm job with no nodes: unknown, or still pending)."""
    NOT_A_RECORDING = "not a recording"
    """A file that is not a gpulens recording gpulens can read or continue (no header, corrupt, oversized records)."""


class _Unset(enum.Enum):
    UNSET = "unset"


UNSET = _Unset.UNSET
"""``ConfigError.got`` when the error names no value."""


class ConfigError(GpulensError):
    """A configuration value is wrong; the message names where and what was expected.

    ``ConfigError("text")`` keeps a sentence as it is. Built from fields, the sentence is
    ``WHERE[: key 'KEY']: DETAIL``, where DETAIL is ``expected EXPECTED[, got GOT!r]`` unless
    given. The fields stay on the error: ``where`` (a file or a flag), ``key`` (dotted, with
    ``[i]`` for list items; None for a flag), ``expected``, ``got`` (:data:`UNSET` when none)
    and ``problem`` (a :class:`ConfigProblem`).
    """

    title = "configuration error"

    def __init__(self, message: str | None = None, *, where: str = "", key: str | None = None,
                 expected: str | None = None, got: object = UNSET,
                 problem: ConfigProblem = ConfigProblem.INVALID, detail: str | None = None) -> None:
        if message is None:
            message = _render_config(where, key, expected, got, detail)
        super().__init__(message)
        self.where = where
        self.key = key
        self.expected = expected
        self.got = got
        self.problem = problem
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its class and fields (a worker process's error reaches the parent whole)."""
        return (_config_error, (type(self), str(self), self.where, self.key, self.expected, self.got, self.problem, self.detail))


def _config_error(cls: type[ConfigError], message: str, where: str, key: str | None, expected: str | None,
                  got: object, problem: ConfigProblem, detail: str | None) -> ConfigError:
    return cls(message, where=where, key=key, expected=expected, got=got, problem=problem, detail=detail)


def _render_config(where: str, key: str | None, expected: str | None, got: object, detail: str | None) -> str:
    """The one line a user reads: ``WHERE: key 'KEY': expected WHAT, got VALUE``."""
    head = where if key is None else f"{where}: key '{key}'"
    if detail is None:
        detail = f"expected {expected}" + ("" if got is UNSET else f", got {got!r}")
    return f"{head}: {detail}"


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


class RecordingProblem(enum.Enum):
    """Why a recording cannot be read (on, or any more): what a caller or a test compares, not the sentence.

    A fault in a recording's first object, other than its version, is :attr:`NOT_A_RECORDING` whatever the
    fault (every reader says so); faults after it name the rule broken.
    """

    NOT_OPENED = "not opened"
    """The input guard refused the file before reading it (missing, a directory, a FIFO, a link):
    ``RecordingError.refused`` holds its InputProblem."""
    UNREADABLE = "unreadable"
    """Reading the file failed (an I/O error)."""
    EMPTY = "empty"
    """A file of no bytes at all."""
    NOT_A_RECORDING = "not a recording"
    """The first object is no gpulens-recording header: another format, not a map, a field of the wrong type
    or size, bytes that are not msgpack, too large to be a header, or the file ends inside it."""
    UNSUPPORTED_VERSION = "unsupported version"
    """A header of a version this gpulens does not read (a newer one's, or no version)."""
    NO_SAMPLES = "no samples"
    """A header and nothing after it: nothing to replay."""
    TRUNCATED = "truncated"
    """The file ends inside a record after the header (a crash or a copy cut it short); what came before reads."""
    CORRUPT = "corrupt"
    """Bytes that do not decode: msgpack that is malformed or nested too deeply, compressed data that is
    damaged, incomplete or followed by other bytes."""
    TOO_LARGE = "too large"
    """Over a reading limit: a record, what a frame decompresses to, a block's records or bytes, one field."""
    BAD_BLOCK = "bad block"
    """Version 2's blocks broken: an object neither a block start nor a frame, a frame before any block start,
    a reference to a record outside its block, a read that is not one block."""
    WRONG_TYPE = "wrong type"
    """A record that is not a map, or a field of one of the wrong type."""
    UNKNOWN_KIND = "unknown kind"
    """A record of a kind this gpulens does not know (``k``)."""
    BAD_SAMPLE = "bad sample"
    """A sample record the sample decoder refuses (the sentence names the field)."""
    CHANGED = "changed"
    """The file changed under a replay's index: shorter than it was, or other bytes where a record was."""


class RecordingError(GpulensError):
    """A recording file is not a gpulens recording, or is corrupt or truncated.

    ``problem`` says which (a :class:`RecordingProblem`); ``events`` holds the events read before
    the fault, so a viewer can show them; ``refused`` the input guard's reason (an ``InputProblem``,
    in core.limits) where the file was not even opened (``problem`` is then ``NOT_OPENED``), None
    where it was read.
    """

    title = "unreadable recording"
    events: list[Any]

    def __init__(self, message: str, *, problem: RecordingProblem, refused: InputProblem | None = None) -> None:
        super().__init__(message)
        self.events = []
        self.problem = problem
        self.refused = refused

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its fields and the events read (a worker process's error reaches the parent whole)."""
        return (_recording_error, (str(self), self.problem, self.refused, self.events))


def _recording_error(message: str, problem: RecordingProblem, refused: InputProblem | None,
                     events: list[Any]) -> RecordingError:
    err = RecordingError(message, problem=problem, refused=refused)
    err.events = events
    return err
