"""The ``processes`` request: every process of the host, as ``top`` lists them (``:ps``, ``:proc PID``).

Params: ``limit`` (1..:data:`MAX_ROWS`, default :data:`DEFAULT_ROWS`) and
optionally ``pids`` (at most 64: only those). Result: ``processes`` (rows
as :class:`~gpulens.core.model.JobInfo` dicts: GPU processes first, then
by CPU), ``total`` (processes on the host) and ``hidden`` (rows left out
because the asker may not see them).

What an asker sees is what ``ps`` would show them on the host: every
process, unless ``/proc`` is mounted with ``hidepid`` -- then only the
processes of users the principal may act for (the agent, root, must not
show through its own eyes what the kernel hides from the asker). No
environment is read. The listing is shared for a second by all askers
(``collectors.processes``), so no peer makes the agent read ``/proc`` faster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpulens.agent.request_kinds import MAX_PIDS, RequestConn, RequestError
from gpulens.collectors.processes import ProcessLister, proc_hides_pids
from gpulens.core.model import HostSample
from gpulens.core.processes import DEFAULT_ROWS, MAX_ROWS, gpu_memory, order
from gpulens.ipc import stream
from gpulens.ipc.serialize import to_dict

KIND = "processes"


def _params(req: stream.Request) -> tuple[int, set[int] | None]:
    limit = req.params.get("limit", DEFAULT_ROWS)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_ROWS:
        raise RequestError(f"limit must be an integer in 1..{MAX_ROWS}")
    pids = req.params.get("pids")
    if pids is None:
        return limit, None
    if (not isinstance(pids, list) or not pids or len(pids) > MAX_PIDS
            or not all(isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in pids)):
        raise RequestError(f"pids must be a list of 1..{MAX_PIDS} positive process ids")
    return limit, set(pids)


def processes(conn: RequestConn, req: stream.Request, lister: ProcessLister,
              latest: Callable[[], HostSample | None], hides: Callable[[], bool] = proc_hides_pids) -> dict[str, Any]:
    """The rows ``conn``'s principal may see (module docstring)."""
    limit, pids = _params(req)
    rows, total = lister.listing(gpu_memory(latest()))
    if pids is not None:
        rows = tuple(r for r in rows if r.pid in pids)
    hidden = 0
    principal = conn.principal
    if principal.uid != 0 and hides():  # the owners the listing read: no /proc read per row and request
        owners = lister.owners()
        seen = tuple(r for r in rows if principal.may_act_for(owners.get(r.pid)))
        hidden, rows = len(rows) - len(seen), seen
    return {"processes": [to_dict(r) for r in order(rows)[:limit]], "total": total, "hidden": hidden}
