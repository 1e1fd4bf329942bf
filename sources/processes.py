"""A host's process table through whichever source knows the host (``:ps``, ``:proc PID``).

A source that lists its hosts' processes itself (this machine's
in-process collector, the demo) offers ``process_table(host, limit, pids)``;
any other is asked through its agent (the ``processes`` request). A
recording refuses: its pids are from then, and may name other processes now.
"""

from __future__ import annotations

from collections.abc import Collection
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from msgspec import UNSET

from gpulens.core.errors import GpulensError
from gpulens.core.events import Requester, RequestResult
from gpulens.core.model import JobInfo
from gpulens.core.processes import DEFAULT_ROWS, MAX_ROWS
from gpulens.core.sanitize import clean_text
from gpulens.ipc.errors import RequestFailed
from gpulens.ipc.request_schema import ProcessesParams
from gpulens.ipc.serialize import from_dict
from gpulens.sources.local import MultiSource, offered, replays

KIND = ProcessesParams.kind


def _failed(message: str) -> Future[dict[str, Any]]:
    fut: Future[dict[str, Any]] = Future()
    fut.set_exception(RequestFailed(message))
    return fut


def process_table(source: object, host: str, *, limit: int = DEFAULT_ROWS, pids: Collection[int] | None = None,
                  timeout_s: float = 10.0) -> Future[dict[str, Any]]:
    """``{"processes": [JobInfo dicts], "total": n, "hidden": n}`` of ``host``, or a future that fails with why."""
    for own in offered(source, "process_table"):
        fut: Future[dict[str, Any]] | None = own(host, limit, pids)
        if fut is not None:
            return fut
    if replays(source):
        return _failed("a recording: its processes are not running now, and its pids may name others")
    params = ProcessesParams(limit=limit, pids=UNSET if pids is None else tuple(sorted(pids)))
    if isinstance(source, Requester):
        return _answer_map(source.request(host, params, timeout_s))
    return _answer_map(MultiSource([source]).request(host, params, timeout_s))  # type: ignore[list-item]


def _answer_map(fut: Future[RequestResult]) -> Future[dict[str, Any]]:
    """The agent's answer map of a ``processes`` request (``{}`` when it sent no map: :func:`decode_rows` says so)."""
    out: Future[dict[str, Any]] = Future()

    def done(f: Future[RequestResult]) -> None:
        if f.cancelled():
            out.cancel()
        elif (err := f.exception()) is not None:
            out.set_exception(err)
        else:
            result = f.result().result
            out.set_result(result if isinstance(result, dict) else {})

    fut.add_done_callback(done)
    return out


def decode_rows(result: object) -> tuple[list[JobInfo], int, int]:
    """(rows, total, hidden) of a ``processes`` answer; raises ValueError on a malformed one."""
    if not isinstance(result, dict) or not isinstance(result.get("processes"), list):
        raise ValueError("the answer has no process list")
    raw = result["processes"][:MAX_ROWS]
    try:
        rows = [_cleaned(from_dict(JobInfo, r)) for r in raw]
    except (GpulensError, TypeError, ValueError, KeyError, AttributeError) as err:  # a hostile or newer agent
        raise ValueError(f"a malformed process row: {str(err)[:200]}") from err
    total, hidden = result.get("total", len(rows)), result.get("hidden", 0)
    return rows, total if isinstance(total, int) else len(rows), hidden if isinstance(hidden, int) else 0


def _cleaned(row: JobInfo) -> JobInfo:
    """A row's words as a table shows them: no escape sequence and no newline from the peer reaches the terminal
    (a request's result keeps its newlines, ``clean_data``; a process row has none to keep)."""
    return replace(row, tree_id=clean_text(row.tree_id), user=clean_text(row.user), cmdline=clean_text(row.cmdline))
