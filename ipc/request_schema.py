"""The request kinds' parameters and answers as frozen msgspec structs: the one schema of the request seam.

A viewer builds a params struct (``ProfileParams(pids=(1234,), duration_s=5.0)``),
whose class names its kind (``ProfileParams.kind == "profile"``) and its answer
(``ProfileParams.answer is ProfileAnswer``); :func:`to_wire` (its
``wire()``, what a ``core.events.Requester`` sends) makes the
``request`` frame's params map of it (the bytes the golden frames pin:
fields in declared order, unset ones left out). The agent turns a frame's
kind and params back into the struct with :func:`decode_params`, which
checks every type and bound there, once, and raises
:class:`~gpulens.ipc.errors.ProtocolError` with the sentence the viewer is sent (``"since must be a number"``); the
handlers get checked values only. An answer is encoded with
:func:`answer_to_wire` and read back by the viewer with :func:`decode_answer`
(every answer field has a default: an older agent's answer may lack one).

Kinds: history, profile, gpumem, trace, trace_status, trace_diagnose,
trace_processes, processes (docs/protocol.md, "Requests").
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Annotated, ClassVar, Generic, Literal, TypeVar, cast

import msgspec
import msgspec.inspect
from msgspec import UNSET, Meta, UnsetType

from gpulens.core.processes import DEFAULT_ROWS, MAX_ROWS
from gpulens.ipc.errors import ProtocolError, ProtocolProblem

__all__ = [
    "KINDS",
    "MAX_PIDS",
    "MAX_PROFILE_S",
    "MAX_WINDOW_S",
    "Answer",
    "GpuMemAnswer",
    "GpuMemParams",
    "HistoryAnswer",
    "HistoryParams",
    "Params",
    "Poller",
    "ProcessesAnswer",
    "ProcessesParams",
    "ProfileAnswer",
    "ProfileParams",
    "ProgressEvent",
    "TraceAnswer",
    "TraceDiagnoseAnswer",
    "TraceDiagnoseParams",
    "TraceParams",
    "TraceProcessesAnswer",
    "TraceProcessesParams",
    "TraceStatusAnswer",
    "TraceStatusParams",
    "answer_to_wire",
    "decode_answer",
    "decode_params",
    "to_wire",
]

MAX_PIDS = 64
"""Pids one request may name."""
MAX_PROFILE_S = 60.0
"""Longest py-spy profile a request may ask for (seconds)."""
MAX_WINDOW_S = 120.0
"""Longest GPU-memory tracing window a ``gpumem`` request may ask for (seconds)."""

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z"
_NAME_RULE = "1..64 characters of [A-Za-z0-9._-]"
Pid = Annotated[int, Meta(gt=0)]
Pids = Annotated[tuple[Pid, ...], Meta(min_length=1, max_length=MAX_PIDS)]
Name = Annotated[str, Meta(pattern=_NAME)]
_PIDS_WHY = f"pids must be a list of 1..{MAX_PIDS} process ids"
_PIDS_ELEMENT_WHY = "pids must be positive integers"

A = TypeVar("A", bound="Answer")
A_co = TypeVar("A_co", bound="Answer", covariant=True)


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """What an agent answers to one request kind (every field has a default)."""


class Params(msgspec.Struct, Generic[A_co], frozen=True, kw_only=True):
    """One request kind's parameters; a subclass names its ``kind``, its ``answer`` and its refusals."""

    kind: ClassVar[str]
    """The request frame's ``kind``."""
    answer: ClassVar[type[Answer]]
    """The struct its answer decodes into."""
    why: ClassVar[Mapping[str, str]] = {}
    """Field -> the refusal when its value breaks the schema (others: msgspec's own sentence)."""
    why_element: ClassVar[Mapping[str, str]] = {}
    """Field -> the refusal when one element of it is wrong (default: ``why``'s)."""

    def wire(self) -> dict[str, object]:
        """The ``request`` frame's params map (:func:`to_wire`): what ``core.events.RequestParams`` sends."""
        return to_wire(self)

    def read(self, raw: object) -> A_co:
        """``raw`` (a response's result) as this kind's answer.

        Raises:
            ProtocolError: the answer breaks the schema (a hostile or broken agent).
        """
        return cast("A_co", decode_answer(self.answer, raw))


def _finite(value: float | None, field: str) -> None:
    if value is not None and value != value:  # NaN passes msgspec's float check
        raise ValueError(f"{field} must be a number")


# -- history -----------------------------------------------------------------------
class HistoryAnswer(Answer, frozen=True, kw_only=True):
    count: int = 0
    """History frames of this request's id came before it with this many samples."""


class HistoryParams(Params[HistoryAnswer], frozen=True, kw_only=True):
    """Samples with ``since < time <= until`` (None: unbounded), sent as ``history`` frames."""

    kind: ClassVar[str] = "history"
    answer: ClassVar[type[Answer]] = HistoryAnswer
    why: ClassVar[Mapping[str, str]] = {"since": "since must be a number", "until": "until must be a number"}
    since: float | UnsetType | None = UNSET
    """Left out (or None): from the oldest sample kept."""
    until: float | UnsetType | None = UNSET
    """Left out (or None): to the newest."""

    def __post_init__(self) -> None:
        for field in ("since", "until"):
            value = getattr(self, field)
            _finite(None if value is UNSET else value, field)


# -- profile -----------------------------------------------------------------------
class ProfileAnswer(Answer, frozen=True, kw_only=True):
    files: tuple[str, ...] = ()
    """The folded stacks' file name (sent as chunks before the answer)."""
    pids: tuple[int, ...] = ()
    duration_s: float = 0.0


class ProfileParams(Params[ProfileAnswer], frozen=True, kw_only=True):
    """py-spy ``pids`` for ``duration_s`` seconds at ``rate_hz``."""

    kind: ClassVar[str] = "profile"
    answer: ClassVar[type[Answer]] = ProfileAnswer
    why: ClassVar[Mapping[str, str]] = {
        "pids": _PIDS_WHY,
        "duration_s": f"duration_s must be in (0, {MAX_PROFILE_S:g}]",
        "rate_hz": "rate_hz must be 1..1000",
    }
    why_element: ClassVar[Mapping[str, str]] = {"pids": _PIDS_ELEMENT_WHY}
    pids: Pids
    duration_s: Annotated[float, Meta(gt=0, le=MAX_PROFILE_S)] = 5.0
    rate_hz: Annotated[float, Meta(ge=1, le=1000)] = 100


# -- gpumem ------------------------------------------------------------------------
class GpuMemAnswer(Answer, frozen=True, kw_only=True):
    files: tuple[str, ...] = ()
    """The folded bytes-per-stack file name (sent as chunks before the answer)."""
    pids: tuple[int, ...] = ()
    mode: str = "live"
    since: float = 0.0
    """When tracing started (unix seconds)."""
    lost: int = 0
    """Events the tracer lost."""
    python: dict[str, str | None] = {}
    """Pid -> why its Python stacks could not be read (None: they could)."""


class GpuMemParams(Params[GpuMemAnswer], frozen=True, kw_only=True):
    """Live bytes (``live``) or bytes allocated (``total``) per Python stack of ``pids``."""

    kind: ClassVar[str] = "gpumem"
    answer: ClassVar[type[Answer]] = GpuMemAnswer
    why: ClassVar[Mapping[str, str]] = {
        "pids": _PIDS_WHY,
        "mode": "mode must be 'live' or 'total'",
        "duration_s": f"duration_s must be in (0, {MAX_WINDOW_S:g}]",
    }
    why_element: ClassVar[Mapping[str, str]] = {"pids": _PIDS_ELEMENT_WHY}
    pids: Pids
    mode: Literal["live", "total"] = "live"
    duration_s: Annotated[float, Meta(gt=0, le=MAX_WINDOW_S)] = 5.0
    """The window traced when the agent runs no tracer of its own."""


# -- trace -------------------------------------------------------------------------
class TraceAnswer(Answer, frozen=True, kw_only=True):
    request_id: str = ""
    files: dict[str, str] = {}
    """Pid (decimal) -> the trace file's name (sent as chunks before the answer)."""
    missing: dict[str, str] = {}
    """Pid -> why there is no trace of it."""
    notes: dict[str, str] = {}
    """Pid -> what its file holds when it is not what was asked."""
    elapsed_s: float = 0.0


class TraceParams(Params[TraceAnswer], frozen=True, kw_only=True):
    """A Kineto trace of ``pids``, of a ``job_key``'s or a ``job_id``'s polling processes.

    Unset fields take the trace service's defaults (``ipc.kineto.requests.TraceRequest``);
    the order of the fields is the order on the wire (``sources.tracing.trace_struct``).
    """

    kind: ClassVar[str] = "trace"
    answer: ClassVar[type[Answer]] = TraceAnswer
    why: ClassVar[Mapping[str, str]] = {
        "pids": _PIDS_WHY,
        "tag": f"tag must be {_NAME_RULE}",
        "job_key": f"job_key must be {_NAME_RULE}",
        **{k: f"{k} must be an integer" for k in ("duration_ms", "iterations", "job_id", "start_time_ms")},
        **{k: f"{k} must be true or false"
           for k in ("record_shapes", "with_stack", "with_flops", "with_modules", "profile_memory")},
        "warmup_s": "warmup_s must be a number",
        "timeout_s": "timeout_s must be a number",
    }
    why_element: ClassVar[Mapping[str, str]] = {"pids": _PIDS_ELEMENT_WHY}
    record_shapes: bool | UnsetType = UNSET
    with_stack: bool | UnsetType = UNSET
    with_flops: bool | UnsetType = UNSET
    with_modules: bool | UnsetType = UNSET
    profile_memory: bool | UnsetType = UNSET
    warmup_s: float | UnsetType | None = UNSET
    timeout_s: float | UnsetType | None = UNSET
    tag: Name | UnsetType | None = UNSET
    """Names this trace in ``trace_status`` requests (progress is kept only for a tagged trace)."""
    job_key: Name | UnsetType | None = UNSET
    pids: Pids | UnsetType = UNSET
    job_id: int | UnsetType | None = UNSET
    start_time_ms: int | UnsetType | None = UNSET
    iterations: int | UnsetType | None = UNSET
    duration_ms: int | UnsetType | None = UNSET

    def __post_init__(self) -> None:
        for field in ("warmup_s", "timeout_s"):
            value = getattr(self, field)
            _finite(None if value is UNSET else value, field)


class ProgressEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One state change of a tagged trace."""

    state: str = "?"
    detail: str = ""


class TraceStatusAnswer(Answer, frozen=True, kw_only=True):
    state: str = "unknown"
    detail: str = ""
    first: int = 0
    """Index of ``events[0]`` among every event of the trace (older ones were forgotten)."""
    events: tuple[ProgressEvent, ...] = ()


class TraceStatusParams(Params[TraceStatusAnswer], frozen=True, kw_only=True):
    """The progress of this viewer's trace tagged ``tag``."""

    kind: ClassVar[str] = "trace_status"
    answer: ClassVar[type[Answer]] = TraceStatusAnswer
    why: ClassVar[Mapping[str, str]] = {"tag": f"tag must be {_NAME_RULE}"}
    tag: Name


class TraceDiagnoseAnswer(Answer, frozen=True, kw_only=True):
    reasons: dict[str, str | None] = {}
    """Pid (decimal) -> why it cannot be traced, with the fix (None: it can)."""


class TraceDiagnoseParams(Params[TraceDiagnoseAnswer], frozen=True, kw_only=True):
    """Why each of ``pids`` can or cannot be traced now."""

    kind: ClassVar[str] = "trace_diagnose"
    answer: ClassVar[type[Answer]] = TraceDiagnoseAnswer
    why: ClassVar[Mapping[str, str]] = {"pids": _PIDS_WHY}
    why_element: ClassVar[Mapping[str, str]] = {"pids": _PIDS_ELEMENT_WHY}
    pids: Pids


class Poller(msgspec.Struct, frozen=True, kw_only=True):
    """One process polling the agent's Kineto endpoint."""

    pid: int
    ancestors: tuple[int, ...] = ()
    """Nearest first, at most 16."""
    job_id: int = 0
    job_keys: tuple[str, ...] = ()
    rank: int | None = None
    interval_s: float | None = None
    busy: bool = False


class TraceProcessesAnswer(Answer, frozen=True, kw_only=True):
    processes: tuple[Poller, ...] = ()


class TraceProcessesParams(Params[TraceProcessesAnswer], frozen=True, kw_only=True):
    """The polling processes this connection may trace (no params)."""

    kind: ClassVar[str] = "trace_processes"
    answer: ClassVar[type[Answer]] = TraceProcessesAnswer


# -- processes ---------------------------------------------------------------------
class ProcessesAnswer(Answer, frozen=True, kw_only=True):
    processes: tuple[dict[str, object], ...] = ()
    """Rows as ``core.model.JobInfo`` dicts (``sources.processes.decode_rows`` reads them)."""
    total: int = 0
    hidden: int = 0


class ProcessesParams(Params[ProcessesAnswer], frozen=True, kw_only=True):
    """Every process of the host, as ``ps`` shows them to the asker (``pids``: only those)."""

    kind: ClassVar[str] = "processes"
    answer: ClassVar[type[Answer]] = ProcessesAnswer
    why: ClassVar[Mapping[str, str]] = {
        "limit": f"limit must be an integer in 1..{MAX_ROWS}",
        "pids": f"pids must be a list of 1..{MAX_PIDS} positive process ids",
    }
    limit: Annotated[int, Meta(ge=1, le=MAX_ROWS)] = DEFAULT_ROWS
    pids: Pids | UnsetType | None = UNSET
    """Only these (left out or None: every process)."""


KINDS: Mapping[str, type[Params[Answer]]] = {
    p.kind: p for p in (HistoryParams, ProfileParams, GpuMemParams, TraceParams, TraceStatusParams,
                        TraceDiagnoseParams, TraceProcessesParams, ProcessesParams)
}
"""Request kind -> its params struct."""


# -- codec -------------------------------------------------------------------------
_AT = re.compile(r"`\$\.(\w+)(\[)?")
_MISSING = re.compile(r"missing required field `(\w+)`")


def decode_params(kind: str, raw: Mapping[str, object]) -> Params[Answer]:
    """The params struct of ``kind`` made of a request frame's ``params``.

    Raises:
        KeyError: ``kind`` is not one of :data:`KINDS`.
        ProtocolError: a value breaks the schema; the message names the field and its rule.
    """
    cls = KINDS[kind]
    try:
        return msgspec.convert(dict(raw), cls)
    except msgspec.ValidationError as err:
        raise ProtocolError(_why(cls, str(err), raw), problem=ProtocolProblem.BAD_PARAMS) from None


def _why(cls: type[Params[Answer]], message: str, raw: Mapping[str, object]) -> str:
    """The refusal for msgspec's ``message`` about ``cls``: the field's own sentence when it has one
    (a number field given no number, NaN or a bool: "<field> must be a number", before its range)."""
    at, missing = _AT.search(message), _MISSING.search(message)
    if at is not None:
        field, element = at.group(1), at.group(2) is not None
    elif missing is not None:
        field, element = missing.group(1), False
    else:
        return message  # a __post_init__ sentence, or the params are not a map
    if element and field in cls.why_element:
        return cls.why_element[field]
    value = raw.get(field)
    if field in _number_fields(cls) and value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or value != value):
        return f"{field} must be a number"
    return cls.why.get(field, message)


@functools.cache
def _number_fields(cls: type[Params[Answer]]) -> frozenset[str]:
    """The fields of ``cls`` that take a float (alone or with None)."""
    def is_float(t: msgspec.inspect.Type) -> bool:
        if isinstance(t, msgspec.inspect.UnionType):
            return any(is_float(u) for u in t.types)
        return isinstance(t, msgspec.inspect.FloatType)

    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    return frozenset(f.name for f in info.fields if is_float(f.type))


def to_wire(params: Params[Answer]) -> dict[str, object]:
    """The ``request`` frame's params map of ``params`` (unset fields left out, sequences as lists)."""
    wire: dict[str, object] = msgspec.msgpack.decode(msgspec.msgpack.encode(params))
    return wire


def answer_to_wire(answer: Answer) -> dict[str, object]:
    """The ``response`` frame's result map of ``answer``."""
    wire: dict[str, object] = msgspec.msgpack.decode(msgspec.msgpack.encode(answer))
    return wire


def decode_answer(cls: type[A], raw: object) -> A:
    """``raw`` (a response's result) as ``cls``.

    Raises:
        ProtocolError: the answer breaks the schema (a hostile or broken agent).
    """
    try:
        return msgspec.convert(raw, cls)
    except msgspec.ValidationError as err:
        raise ProtocolError(f"the agent's answer is malformed: {err}", problem=ProtocolProblem.BAD_ANSWER) from None
