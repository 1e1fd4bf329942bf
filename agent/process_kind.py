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

from gpulens.agent.request_kinds import RequestConn
from gpulens.collectors.processes import ProcessLister, proc_hides_pids
from gpulens.core.model import HostSample
from gpulens.core.processes import gpu_memory, order
from gpulens.ipc.request_schema import ProcessesAnswer, ProcessesParams
from gpulens.ipc.serialize import to_dict

KIND = ProcessesParams.kind


def processes(conn: RequestConn, rid: int, p: ProcessesParams, lister: ProcessLister,
              latest: Callable[[], HostSample | None], hides: Callable[[], bool] = proc_hides_pids,
              ) -> ProcessesAnswer:
    """The rows ``conn``'s principal may see (module docstring)."""
    limit, pids = p.limit, set(p.pids) if isinstance(p.pids, tuple) else None
    rows, total = lister.listing(gpu_memory(latest()))
    if pids is not None:
        rows = tuple(r for r in rows if r.pid in pids)
    hidden = 0
    principal = conn.principal
    if principal.uid != 0 and hides():  # the owners the listing read: no /proc read per row and request
        owners = lister.owners()
        seen = tuple(r for r in rows if principal.may_act_for(owners.get(r.pid)))
        hidden, rows = len(rows) - len(seen), seen
    listed = tuple(d for r in order(rows)[:limit] if isinstance(d := to_dict(r), dict))
    return ProcessesAnswer(processes=listed, total=total, hidden=hidden)
