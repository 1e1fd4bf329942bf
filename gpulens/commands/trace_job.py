"""``gpulens trace --job KEY [--hosts A,B]``: every rank of a job, on every host, from one start time.

The peer is dyno's ``unitrace.py``: it asks each host's dynolog to trace
the job's processes. Here each host's gpulens agent (``HOST:PORT`` or
``ssh:NODE``; this host when ``--hosts`` is not given: the gpulens owning
the Kineto endpoint, or this command as its owner) is asked which of its
polling processes belong to the job (``trace_processes``: the Slurm job id
or torchrun run id in their environment, and their ``RANK``), then every
host gets one ``trace`` request with the same ``job_key`` and the same
``start_time_ms`` (Kineto's ``PROFILE_START_TIME``): a little more than the
longest poll interval seen in the future, so every rank has its config
before the window opens and the ranks' windows line up. One file per rank
lands in ``-o DIR`` as ``rank<R>-<host>-<pid>.json``.

A job that has not started polling yet is waited for up to ``--wait`` seconds
(:data:`~gpulens.commands.trace_common.JOB_WAIT_S` by default). A rank whose
profiler is busy with another trace is named before the start; if it is still
busy when the start comes it is not traced (a start the ranks share cannot
wait for it) and is reported, while the free ranks are traced and written.
"""

from __future__ import annotations

import argparse
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpulens.commands.trace_common import EXIT_FAILED, EXIT_OK, JOB_WAIT_S, Progress, hand_back, say
from gpulens.core.errors import ConfigError, ConfigProblem, GpulensError
from gpulens.ipc.kineto.kconfig import MIN_LEAD_S
from gpulens.ipc.kineto.requests import TraceRequest
from gpulens.ipc.request_schema import TraceProcessesParams
from gpulens.sources.tracing import (
    Received,
    Requester,
    copy_trace,
    default_download_dir,
    fetch_trace,
    new_tag,
)

KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
DEFAULT_POLL_S = 5.0
START_MARGIN_S = MIN_LEAD_S + 0.3
"""After the longest poll interval (and the warm-up): Kineto's profiler loop ticks once a second, and a config
reaching a rank less than MIN_LEAD_S before the start is refused (ipc/kineto/kconfig.py)."""


@dataclass
class _Host:
    """One host of the job: how to reach its agent, and what it said."""

    label: str
    agent: Requester
    address: str
    close: Callable[[], None]
    ranks: dict[int, int | None] = field(default_factory=dict)
    intervals: list[float] = field(default_factory=list)
    busy: list[int] = field(default_factory=list)
    got: Received | None = None
    error: str = ""


def run_job(args: argparse.Namespace, req: TraceRequest, hosts: list[str]) -> int:
    """Trace job ``args.job`` on ``hosts`` (this host when empty); the exit status of ``gpulens trace``."""
    key = str(args.job)
    if not KEY.fullmatch(key):
        raise ConfigError(where=f"--job {key!r}", expected="1..64 characters of [A-Za-z0-9._-]", got=key,
                          problem=ConfigProblem.BAD_FORMAT, detail="expected 1..64 characters of [A-Za-z0-9._-]")
    out_dir = _output_dir(args.output, key)
    opened: list[_Host] = []
    try:
        unreached = _open_all(args, hosts, opened)
        if not opened:
            return EXIT_FAILED
        wait = JOB_WAIT_S if args.wait is None else args.wait
        _discover(opened, key, wait)
        found = sum(len(h.ranks) for h in opened)
        if not found:
            say(f"job {key}: no polling process of this job on {', '.join(h.label for h in opened)} within "
                f"{wait:g} s (a job still starting: give it longer with --wait S)")
            return EXIT_FAILED
        jreq = _job_request(args, req, opened, key, found)
        _trace_all(opened, jreq, key)
        if any(h.got is not None and h.got.files for h in opened):
            _make_dir(out_dir, default=args.output is None)
        code = _write(opened, out_dir)
        return EXIT_FAILED if unreached else code
    finally:
        for h in opened:
            h.close()


def _open_all(args: argparse.Namespace, hosts: list[str], opened: list[_Host]) -> list[str]:
    """Reach each host's agent into ``opened``; the hosts not reached (one host down: trace the others, and say so)."""
    unreached = []
    for target in hosts or [""]:
        try:
            opened.append(_open(args, target))
        except GpulensError as err:
            say(f"[{_label(target) if target else 'local'}] not reached: {err}")
            unreached.append(target)
    return unreached


def _job_request(
    args: argparse.Namespace, req: TraceRequest, opened: list[_Host], key: str, found: int
) -> TraceRequest:
    """The request every host gets: the job's key and one start time, after the longest poll interval seen.

    Says when every rank starts, and which ranks are busy with another trace now.
    """
    longest = max((iv for h in opened for iv in h.intervals), default=DEFAULT_POLL_S)
    lead = args.start_in if args.start_in is not None else longest + START_MARGIN_S + req.warmup_s
    start = time.time() + lead
    jreq = replace(req, pids=(), job_id=0, start_time_ms=int(start * 1000), timeout_s=req.timeout_s + lead)
    stamp = time.strftime("%H:%M:%S", time.localtime(start)) + f".{int(start * 1000) % 1000:03d}"
    say(f"job {key}: {found} processes on {len(opened)} host(s); every rank starts at {stamp} (in {lead:.1f} s)")
    for h in opened:
        for pid in h.busy:
            say(f"[{h.label}] process {pid} (rank {_rank(h, pid)}) is busy with another trace: it is traced only "
                "if that trace is written before the start; the other ranks are traced either way")
    return jreq


def _trace_all(opened: list[_Host], jreq: TraceRequest, key: str) -> None:
    """Send ``jreq`` to every host at once; returns when each has answered."""
    workers = [threading.Thread(target=_trace_host, args=(h, jreq, key), daemon=True) for h in opened]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def _output_dir(output: str | None, key: str) -> Path:
    """``-o DIR`` (made, when first written, only if its parent exists), else a fresh cache directory."""
    if output is None:
        return default_download_dir() / f"job-{key}-{time.strftime('%Y%m%d-%H%M%S')}"
    d = Path(output).expanduser()
    if d.exists() and not d.is_dir():
        raise ConfigError(where=f"-o {output}", expected="a directory", got=output, problem=ConfigProblem.NOT_A_DIRECTORY,
                          detail="not a directory (--job writes one file per rank into a directory)")
    if not d.parent.is_dir():
        raise ConfigError(where=f"-o {output}", expected="a directory in a directory", got=str(d.parent),
                          problem=ConfigProblem.NOT_FOUND,
                          detail=f"{d.parent} is not a directory; gpulens does not create parent directories")
    return d


def _make_dir(d: Path, default: bool) -> None:
    try:
        d.mkdir(parents=default, exist_ok=True, mode=0o700)
    except OSError as err:
        raise ConfigError(where=f"-o {d}", problem=ConfigProblem.UNAVAILABLE,
                          detail=f"cannot create the directory: {err.strerror or err}") from err


def _open(args: argparse.Namespace, target: str) -> _Host:
    """Reach ``target``'s agent ("": this host's endpoint owner, possibly this very process)."""
    if target:
        from gpulens.sources.stream.connect import open_agent

        say(f"connecting to the agent at {target}")
        src, address = open_agent(
            target, token_file=args.token_file, ssh_command=args.ssh_command, download_dir=default_download_dir(),
        tls_ca=getattr(args, "tls_ca", None),
        )
        return _Host(_label(target), src, address, src.stop)
    return _open_here(args)


def _open_here(args: argparse.Namespace) -> _Host:
    import socket

    from gpulens import __version__
    from gpulens.agent.agent import endpoint_owner
    from gpulens.ipc.errors import EndpointBusy
    from gpulens.sources.stream.control_trace import connect_owner
    from gpulens.sources.stream.local_agent import LocalAgentLink

    try:
        cfg = getattr(args, "cfg", None)
        owner = endpoint_owner(socket.gethostname(), args.ipc_socket_dir, version=__version__,
                               job_key_env=cfg.job_key_env if cfg is not None else None)
    except EndpointBusy:
        link = connect_owner(args.ipc_socket_dir, default_download_dir())
        say(f"tracing through the gpulens holding the Kineto name ({link.address})")
        return _Host("local", link, link.address, link.close)
    svc = owner.requests.trace_service
    say(f"serving the Kineto endpoint at {getattr(svc, 'address', '?')}")
    # The same request path as every other host: this process's own control socket.
    link = LocalAgentLink(args.ipc_socket_dir, os.getpid(), os.geteuid(), default_download_dir())

    def close() -> None:
        link.close()
        hand_back(owner)

    return _Host("local", link, link.address, close)


def _label(target: str) -> str:
    text = target.removeprefix("ssh:").removeprefix("tls://")
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:64] or "host"


def _discover(hosts: list[_Host], key: str, wait_s: float) -> None:
    """Each host's processes of the job (pid -> rank), poll intervals and busy ranks; waits up to ``wait_s``
    for them to poll (twice: the interval is known then). A job not polling at the first look is starting:
    its ranks begin polling seconds apart, so its set must also stay the same for ``SETTLE_S``."""
    from gpulens.commands.trace_children import SETTLE_S

    deadline = time.monotonic() + wait_s
    settled: set[int] = set()
    starting = False
    seen: tuple[int, ...] = ()
    since = time.monotonic()
    while True:
        for i, h in enumerate(hosts):
            if i in settled and not starting:
                continue
            if _look(h, key):
                settled.add(i)
            else:
                settled.discard(i)
        now_seen = tuple(sorted(pid for h in hosts for pid in h.ranks))
        starting = starting or not now_seen
        if now_seen != seen:
            seen, since = now_seen, time.monotonic()
        steady = not starting or time.monotonic() - since >= SETTLE_S
        if (len(settled) == len(hosts) and steady) or time.monotonic() > deadline:
            return
        time.sleep(0.3)


def _look(h: _Host, key: str) -> bool:
    """Ask ``h`` for the job's processes (ranks, poll intervals, busy ones); True when each has polled twice."""
    procs = _processes(h)
    mine = [p for p in procs if key in p.get("job_keys", []) or str(p.get("job_id")) == key]
    h.ranks = {int(p["pid"]): p.get("rank") if isinstance(p.get("rank"), int) else None for p in mine}
    h.intervals = [float(p["interval_s"]) for p in mine if isinstance(p.get("interval_s"), (int, float))]
    h.busy = [int(p["pid"]) for p in mine if p.get("busy") is True]
    return bool(mine) and len(h.intervals) == len(mine)  # each polled twice: its interval is known


def _processes(h: _Host) -> list[dict[str, Any]]:
    try:
        res = h.agent.request(h.address, TraceProcessesParams(), 5.0).result(timeout=6)
    except (GpulensError, TimeoutError, CancelledError) as err:  # RequestFailed, or no answer in time
        h.error = f"cannot list its polling processes: {err}"
        return []
    body = res.result if isinstance(res.result, dict) else {}
    raw = body.get("processes")
    return [p for p in raw if isinstance(p, dict) and isinstance(p.get("pid"), int)] if isinstance(raw, list) else []


def _trace_host(h: _Host, req: TraceRequest, key: str) -> None:
    if not h.ranks:
        h.error = h.error or f"no polling process of job {key} there"
        return

    try:
        h.got = fetch_trace(h.agent, h.address, req, new_tag(), Progress(f"[{h.label}] "), job_key=key)
    except (GpulensError, TimeoutError, CancelledError) as err:  # RequestFailed, TimeoutError: that host's reason
        h.error = str(err) or type(err).__name__


def _rank(h: _Host, pid: int) -> str:
    rank = h.ranks.get(pid)
    return "?" if rank is None else str(rank)


def _write(hosts: list[_Host], out_dir: Path) -> int:
    ok = True
    wrote = 0
    for h in hosts:
        if h.got is None:
            say(f"[{h.label}] failed: {h.error}")
            ok = False
            continue
        for pid_s, (_name, path) in sorted(h.got.files.items()):
            rank = h.ranks.get(int(pid_s))
            dest = out_dir / f"rank{rank if rank is not None else 'NA'}-{h.label}-{pid_s}.json"
            final = copy_trace(path, str(dest), pid_s, 1, owner_uid=os.geteuid())
            path.unlink(missing_ok=True)
            print(f"{h.label} {pid_s} {final}", flush=True)
            wrote += 1
        for pid_s, note in sorted(h.got.notes.items()):
            say(f"[{h.label}] process {pid_s}: {note}")
        for pid_s, why in sorted(h.got.missing.items()):
            which = f" (rank {_rank(h, int(pid_s))})" if pid_s.isdigit() else ""
            say(f"[{h.label}] process {pid_s}{which}: {why}")
            ok = False
        ok = ok and bool(h.got.files)
    asked = sum(len(h.ranks) for h in hosts)
    if not ok and wrote:
        say(f"{wrote} of {asked} processes traced (their files are written); the others are named above")
    return EXIT_OK if ok else EXIT_FAILED
