"""LocalTraceService: on-demand PyTorch traces of processes on this machine.

Owns a :class:`KinetoEndpoint` (or, when a dynolog daemon holds the name,
a :class:`DynologClient`), hands trace configs to target processes on their
next poll, watches for the finished files and resolves a Future per
request. Progress is observable through ``jobs()`` and listeners.

Where files go and how they are read back: :mod:`gpulens.ipc.kineto.outputs` (fresh
random directories, nothing followed, only the target's regular files; the
target's uid is fixed when a request is accepted, ``TraceResult.owners``).
The dynolog RPC is used only when root or we hold both the Kineto name and
port 1778: never another user's process that may be squatting either.

Usage::

    svc = LocalTraceService()          # follows $KINETO_IPC_SOCKET_DIR
    svc.start()                        # EndpointBusy when the name is taken
    fut = svc.request_trace(TraceRequest(pids=(1234,), duration_ms=500))
    result = fut.result(timeout=60)    # TraceResult(files={1234: "/tmp/..."})
    svc.stop()
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from gpulens.core.procfs import current_uid, proc_environ, proc_uid
from gpulens.core.safefs import UnsafePath
from gpulens.core.threads import start_thread, stop_thread
from gpulens.ipc.errors import EndpointBusy, NotTraceable, TraceError
from gpulens.ipc.kineto.diagnose import diagnose_pid
from gpulens.ipc.kineto.dynolog_rpc import DynologClient, listener_uid
from gpulens.ipc.kineto.endpoint import KinetoEndpoint, holder_of, is_possible_squatter
from gpulens.ipc.kineto.exits import ExitWatch
from gpulens.ipc.kineto.jobs import JobTable, PidTask
from gpulens.ipc.kineto.liveness import identity
from gpulens.ipc.kineto.outputs import OutputPlanner
from gpulens.ipc.kineto.protocol import JobListener
from gpulens.ipc.kineto.registry import CONFIG_ACTIVITIES, PollingProcess
from gpulens.ipc.kineto.requests import (
    TraceJob,
    TraceRequest,
    TraceResult,
    config_text,
    new_request_id,
)
from gpulens.ipc.kineto.steps import shows_optimizer_steps
from gpulens.ipc.kineto.untraceable import Untraceable, UntraceableKind
from gpulens.ipc.refusal import HandoverKind, NotHandedOver, failed

log = logging.getLogger(__name__)


HandFn = Callable[[socket.socket], "str | None"]
"""Passes the bound Kineto socket to the next owner: None once that owner serves it, else why not."""


class LocalTraceService:
    """Trace PyTorch programs on this host through the Kineto on-demand protocol (a ``TraceService``).

    ``socket_dir``: None follows ``$KINETO_IPC_SOCKET_DIR`` (abstract name when
    unset), "" forces the abstract name, a path serves ``PATH/dynolog``.
    ``requester_uid``: whose processes may be traced (default: our euid;
    root may trace anyone). ``use_dynolog``: when the name is held by a
    dynolog daemon, send requests through its RPC instead of failing.
    """

    def __init__(
        self,
        socket_dir: str | None = None,
        *,
        requester_uid: int | None = None,
        use_dynolog: bool = True,
        dynolog: DynologClient | None = None,
        tick_s: float = 0.1,
    ) -> None:
        self.endpoint = KinetoEndpoint(socket_dir, config_provider=self._config_for)
        self.requester_uid = current_uid() if requester_uid is None else requester_uid
        self._use_dynolog = use_dynolog
        self._dynolog_client = dynolog or DynologClient()
        self.dynolog: DynologClient | None = None
        self._table = JobTable(inspect=shows_optimizer_steps)
        self._tick_s = tick_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        """Set when a job is added (and on stop): the watch thread sleeps on it while no job is open."""
        self._thread: threading.Thread | None = None
        self._refusal: str | None = None  # set while handing the endpoint over, and after
        self._accepting = threading.Lock()
        self._exits = ExitWatch(self._table.open_pids)
        """How traced processes ended (the kernel's exit events while a job is open; the watch thread's alone)."""

    # -- lifecycle ------------------------------------------------------------
    @property
    def socket_dir(self) -> str | None:
        """The socket directory served (None = abstract name)."""
        return self.endpoint.socket_dir

    @property
    def address(self) -> str:
        """Human form of the endpoint address (or the dynolog RPC in use)."""
        if self.dynolog is not None:
            return f"dynolog RPC {self.dynolog.host}:{self.dynolog.port}"
        return self.endpoint.address

    def start(self, adopt: socket.socket | None = None) -> None:
        """Bind the endpoint (or serve ``adopt``, the bound socket a previous owner passed) and start watching.

        Raises:
            EndpointBusy: the name is taken and no dynolog RPC answers.
            UnsafePath: ``adopt`` is not bound to this service's Kineto name.
        """
        if self._thread is not None:
            return
        try:
            self.endpoint.start(adopt)
        except EndpointBusy:
            if not (self._use_dynolog and self._dynolog_client.reachable()):
                raise
            holder = holder_of(self.endpoint.socket_dir)
            if holder is not None and is_possible_squatter(holder[2]):
                raise  # another user's process: trace configs (and our paths) must not go to it
            local = self._dynolog_client.host in ("127.0.0.1", "localhost", "::1")
            rpc_uid = listener_uid(self._dynolog_client.port) if local else None
            if is_possible_squatter(rpc_uid):
                log.warning(
                    "port %d listens as uid %s, neither root nor us: not sending trace configs there",
                    self._dynolog_client.port, rpc_uid,
                )
                raise
            log.info("Kineto name taken; using dynolog RPC at port %d", self._dynolog_client.port)
            self.dynolog = self._dynolog_client
        self._stop.clear()
        self._thread = start_thread(self._watch, "gpulens-trace-watch")

    # -- hand-over ----------------------------------------------------------
    def unhanded(self) -> int:
        """Accepted traces whose config has not reached Kineto yet (waiting for a poll, or queued)."""
        with self._accepting:
            return self._table.unhanded()

    def release_endpoint(self, refusal: str, drain_s: float, hand: HandFn) -> NotHandedOver | None:
        """Pass the Kineto name to another owner, losing no accepted trace; None when it serves it now, else why not
        (``THROUGH_DYNOLOG``, ``WAITING``, ``NOT_SERVING``, ``NOT_TAKEN`` or ``FAILED``).

        New requests are refused with ``refusal`` from now on. Accepted traces
        whose config is not handed yet keep the name until their target polled
        (at most ``drain_s``; then the name is kept, requests accepted again,
        and the reason returned). Traces already handed to Kineto need no
        endpoint: the watcher keeps running and their files still land here.

        The name is never unbound: the bound socket stops being served here and
        ``hand(sock)`` passes it on (``SCM_RIGHTS``), returning None once the
        other owner serves it, or why not; then this endpoint serves it again,
        requests are accepted again, and the reason is returned.
        """
        if self.dynolog is not None:
            return NotHandedOver(HandoverKind.THROUGH_DYNOLOG)
        with self._accepting:
            self._refusal = refusal
        deadline = time.monotonic() + drain_s
        while (waiting := self.unhanded()) and time.monotonic() < deadline:
            time.sleep(self._tick_s)
        why: NotHandedOver | None
        if waiting:
            why = NotHandedOver(HandoverKind.WAITING, count=waiting)
        elif (sock := self.endpoint.detach()) is None:
            why = NotHandedOver(HandoverKind.NOT_SERVING)
        else:
            with contextlib.ExitStack() as keep:
                keep.callback(self._serve_again, sock)  # unless handed over, even if hand() has a bug: ours
                try:
                    said = hand(sock)
                except (OSError, ValueError) as err:  # its socket calls; hand() says why in words otherwise
                    return failed(err)
                if said is None:
                    keep.pop_all()
                    sock.close()  # the other owner holds its own descriptor of it now
                    return None
                return NotHandedOver(HandoverKind.NOT_TAKEN, said)
        with self._accepting:
            self._refusal = None
        return why

    def _serve_again(self, sock: socket.socket) -> None:
        """Serve the bound socket a hand-over did not pass on, and accept requests again."""
        self.endpoint.start(adopt=sock)
        with self._accepting:
            self._refusal = None

    def rebind(self) -> None:
        """Take the Kineto name back after a hand-over that did not complete; raises as ``start``."""
        self.endpoint.start()
        with self._accepting:
            self._refusal = None

    def stop(self) -> None:
        """Stop serving; pending requests fail with 'service stopped'."""
        self._stop.set()
        self._wake.set()  # after the stop flag: the thread checks it when it wakes
        stop_thread(self._stop, self._thread)
        self._thread = None
        self.endpoint.stop()
        for listener_job in self._table.fail_all("the trace service stopped"):
            self._table.notify(listener_job)

    # -- queries --------------------------------------------------------------
    def polling_pids(self) -> set[int]:
        """Pids that polled recently: exactly the processes that can be traced now."""
        return {p.pid for p in self.endpoint.registry.live()}

    def processes(self) -> list[PollingProcess]:
        """The live registry entries (pid, ancestors, job id, poll timing)."""
        return self.endpoint.registry.live()

    def diagnose(self, pid: int) -> Untraceable | None:
        """None when ``pid`` can be traced now, else why not (``str()``: the one-line fix)."""
        # Under dynolog the registry is dynolog's: trust it rather than ours.
        live = [] if self.dynolog is not None else self.endpoint.registry.live()
        polling = True if self.dynolog is not None else any(p.pid == pid for p in live)
        return diagnose_pid(
            pid, polling=polling, serving_dir=self.socket_dir, requester_uid=self.requester_uid,
            pollers=live,
        )

    def has_stepped(self, pid: int) -> bool | None:
        """Did the last trace of ``pid`` show optimizer steps (None: no trace of it seen yet)."""
        return self._table.stepped.get(pid)

    def jobs(self) -> list[TraceJob]:
        """Snapshots of every trace job of this service, oldest first."""
        return self._table.snapshots()

    def add_listener(self, listener: JobListener) -> None:
        """Call ``listener(TraceJob)`` (from a service thread) on every state change."""
        self._table.listeners.append(listener)

    def remove_listener(self, listener: JobListener) -> None:
        """Undo add_listener."""
        if listener in self._table.listeners:
            self._table.listeners.remove(listener)

    # -- requests -------------------------------------------------------------
    def request_trace(self, req: TraceRequest) -> Future[TraceResult]:
        """Start a trace; the Future resolves to a TraceResult or fails with a TraceError.

        Never raises: bad requests and untraceable targets come back as a
        failed Future (ValueError / NotTraceable), so remote callers get one path.
        """
        fut: Future[TraceResult] = Future()
        try:
            req.validate()
        except ValueError as err:
            fut.set_exception(err)
            return fut
        if self._thread is None:
            fut.set_exception(TraceError("the trace service is not started"))
            return fut
        with self._accepting:  # a hand-over's drain sees every task accepted before its refusal
            if self._refusal is not None:
                fut.set_exception(TraceError(self._refusal))
                return fut
            return self._accept(req, fut)

    def _accept(self, req: TraceRequest, fut: Future[TraceResult]) -> Future[TraceResult]:
        request_id = new_request_id()
        pids = req.pids or self._pids_of_job(req.job_id)
        if not pids:
            fut.set_exception(
                NotTraceable(f"no process with job id {req.job_id} polls {self.address}")
            )
            return fut
        tasks: dict[int, PidTask] = {}
        now = time.monotonic()
        live = {p.pid: p for p in self.endpoint.registry.live()}
        with OutputPlanner() as planner:
            for pid in dict.fromkeys(pids):  # once each, in order
                tasks[pid] = self._task(req, request_id, pid, planner, live.get(pid), now)
        job = self._table.add(request_id, req, tasks, fut)
        self._wake.set()
        if self.dynolog is not None:
            self._send_via_dynolog(job.request_id)
        self._table.notify(self._table.snapshot(request_id))
        return fut

    def _pids_of_job(self, job_id: int | None) -> tuple[int, ...]:
        return tuple(p.pid for p in self.endpoint.registry.live() if p.job_id == job_id)

    def _task(
        self,
        req: TraceRequest,
        request_id: str,
        pid: int,
        planner: OutputPlanner,
        seen: PollingProcess | None,
        now: float,
    ) -> PidTask:
        reason = self.diagnose(pid)
        if reason is not None and reason.kind is not UntraceableKind.NOT_POLLED_YET:
            return PidTask(pid=pid, config="", error=str(reason), reason=reason)
        # The owner is captured now: the file read back later must be this uid's.
        target_uid = proc_uid(pid)
        ident = identity(pid)
        if target_uid is None or ident is None:
            gone = Untraceable(UntraceableKind.GONE, pid)
            return PidTask(pid=pid, config="", error=str(gone), reason=gone)
        try:
            out = planner.place(pid, target_uid, proc_environ(pid))
        except (UnsafePath, OSError) as err:
            return PidTask(pid=pid, config="", error=f"cannot prepare the trace directory: {err}")
        interval = seen.interval_s if seen is not None and seen.interval_s else 5.0
        return PidTask(
            pid=pid,
            config=config_text(req, out.log, request_id),
            output=out,
            poll_grace_s=max(3 * interval + 2, 12.0),
            ident=ident,
        )

    def _send_via_dynolog(self, request_id: str) -> None:
        assert self.dynolog is not None
        for task in self._table.waiting_tasks(request_id):
            try:
                matched = self.dynolog.set_kineto_on_demand_request(task.config, pids=(task.pid,))
            except TraceError as err:
                self._table.fail_task(request_id, task.pid, str(err))
                continue
            if task.pid in matched:
                self._table.mark_handed(task.pid)
            else:
                self._table.fail_task(request_id, task.pid, "dynolog matched no such polling process")

    # -- threads --------------------------------------------------------------
    def _config_for(self, msg: object, _sender_uid: int | None) -> str:
        """Config provider called by the endpoint thread for every poll it recorded.

        The endpoint only records (and asks about) polls whose kernel credentials
        show the sender is root or the polling process itself, so the sender's uid
        (the endpoint's ``ConfigProvider`` passes it) is not needed here: the task
        names the process by pid and start time (``PidTask.ident``, an exit ends it)
        and its files are read back as the uid fixed when the request was accepted.
        """
        pid = getattr(msg, "pid", 0)
        accepts = bool(getattr(msg, "config_type", CONFIG_ACTIVITIES) & CONFIG_ACTIVITIES)
        handed = self._table.hand_over(pid, accepts)
        if handed is None:
            return ""
        self._table.notify(handed[1])
        return handed[0]

    def _watch(self) -> None:
        # Every tick_s while a job is open; otherwise asleep until one is added (an idle
        # viewer's watch thread used to wake 10 times a second for nothing).
        while not self._stop.is_set():
            self._wake.wait(self._table.watch_interval(self._tick_s) if self._table.busy() else None)
            self._wake.clear()
            if self._stop.is_set():
                break
            self._exits.listen(self._table.busy())
            for snap in self._table.tick(self._diagnose_late, ended=self._exits.ended):
                self._table.notify(snap)
            if not self._table.busy():
                self._exits.listen(False)  # before the thread sleeps until the next job
        self._exits.listen(False)

    def _diagnose_late(self, pid: int) -> str:
        reason = self.diagnose(pid)
        return str(reason) if reason is not None else f"process {pid} did not poll in time"
