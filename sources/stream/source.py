"""StreamSource: many agents over TCP (``--connect``) or ssh (``--ssh``, ``--slurm-job``).

Usage::

    src = StreamSource([tcp_target("node1:7789"), ssh_target("node2")])
    src.start(emit)                      # one thread per agent
    reply = ask(src, "node1", ProfileParams(pids=(1234,), duration_s=5), 30).result()
    reply.files                          # {"profile-....folded": Path(...)}
    src.stop()

Each agent is a :class:`~gpulens.sources.stream.link.HostLink`; a host that
drops is reported down (HostStatusEvent with reason and time) and retried
with capped exponential backoff; on return its gap is backfilled from the
agent's history (SampleEvent(backfill=True)).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from gpulens.core.errors import ConfigError, ConfigProblem
from gpulens.core.events import Emit, RequestParams
from gpulens.core.hostlist import expand
from gpulens.ipc.errors import RequestFailed
from gpulens.ipc.reactor import Reactor
from gpulens.sources.stream.link import HostLink, LinkOptions, Target
from gpulens.sources.stream.requests import RequestResult

__all__ = [
    "LinkOptions",
    "RequestResult",
    "StreamFlags",
    "StreamSource",
    "Target",
    "command_target",
    "parse_connect",
    "slurm_hosts",
    "ssh_target",
    "stream_source_from_flags",
    "tcp_target",
    "token_from_file",
]

DEFAULT_PORT = 7789
AGENT_ARGV = ("gpulens", "agent", "--stdio")


def tcp_target(spec: str) -> Target:
    """``host:port``, ``[v6]:port``, or ``tls://host:port``; raises ConfigError."""
    text = spec.strip()
    tls = text.startswith("tls://")
    if tls:
        text = text[len("tls://") :]
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_s = rest[1:] if rest.startswith(":") else ""
    else:
        host, sep, port_s = text.rpartition(":")
        if not sep:
            host, port_s = text, ""
    if not host:
        raise ConfigError(where="--connect", expected="HOST:PORT", got=spec, problem=ConfigProblem.BAD_FORMAT)
    try:
        port = int(port_s) if port_s else DEFAULT_PORT
    except ValueError:
        raise ConfigError(where="--connect", expected="a port number", got=spec, problem=ConfigProblem.BAD_FORMAT,
                          detail=f"bad port in {spec!r}") from None
    if not 1 <= port <= 65535:
        raise ConfigError(where="--connect", expected="a port from 1 to 65535", got=port,
                          problem=ConfigProblem.OUT_OF_RANGE, detail=f"port must be 1..65535 in {spec!r}")
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return Target(address=("tls://" if tls else "") + address, kind="tcp", host=host, port=port, tls=tls)


def parse_connect(value: str) -> list[Target]:
    """Comma-separated ``--connect`` list."""
    return [tcp_target(p) for p in value.split(",") if p.strip()]


def command_target(host: str, argv: Sequence[str]) -> Target:
    """A target reached by running ``argv`` (its stdin/stdout carry the stream)."""
    return Target(address=host, kind="command", argv=tuple(argv))


def ssh_target(host: str, ssh_command: str | None = None) -> Target:
    """``ssh HOST gpulens agent --stdio``, or ``ssh_command`` with ``{host}`` replaced.

    Without ``{host}`` in ``ssh_command``, the host and ``gpulens agent
    --stdio`` are appended to it. Host names come from hostlist expansion
    (letters, digits, ``._-``), so substitution cannot inject shell syntax.
    """
    if ssh_command is None:
        argv = ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=15", host, *AGENT_ARGV]
    else:
        try:
            parts = shlex.split(ssh_command)
        except ValueError as err:
            raise ConfigError(where="--ssh-command", expected="a command in shell words", got=ssh_command,
                              problem=ConfigProblem.BAD_FORMAT, detail=str(err)) from err
        if not parts:
            raise ConfigError("--ssh-command is empty", where="--ssh-command", expected="a command",
                              got=ssh_command, problem=ConfigProblem.MISSING)
        if any("{host}" in p for p in parts):
            argv = [p.replace("{host}", host) for p in parts]
        else:
            argv = [*parts, host, *AGENT_ARGV]
    return command_target(host, argv)


def slurm_hosts(job_id: str) -> list[str]:
    """The nodes of Slurm job ``job_id`` (``squeue -h -j ID -o %N``, expanded).

    Raises:
        ConfigError: Slurm is not installed, the job is unknown, or has no nodes yet.
    """
    if not job_id.strip().replace("_", "").isalnum():
        raise ConfigError(where="--slurm-job", expected="a job id", got=job_id, problem=ConfigProblem.BAD_FORMAT)
    squeue = shutil.which("squeue")
    if squeue is None:
        raise ConfigError("--slurm-job needs Slurm's 'squeue' on PATH, and it is not there", where="--slurm-job",
                          expected="Slurm's 'squeue' on PATH", problem=ConfigProblem.UNAVAILABLE)
    try:
        out = subprocess.run(
            [squeue, "-h", "-j", job_id, "-o", "%N"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ConfigError(where=f"--slurm-job {job_id}", got=job_id, problem=ConfigProblem.UNAVAILABLE,
                          detail=f"squeue failed: {err}") from err
    if out.returncode != 0:  # squeue's own words say why ('Invalid job id specified', no controller...)
        raise ConfigError(where=f"--slurm-job {job_id}", got=job_id, problem=ConfigProblem.UNAVAILABLE,
                          detail=f"squeue: {out.stderr.strip()[:300] or 'failed'}")
    lists = [line.strip() for line in out.stdout.splitlines() if line.strip() and line.strip() != "(null)"]
    if not lists:
        raise ConfigError(where=f"--slurm-job {job_id}", expected="a job with nodes", got=job_id,
                          problem=ConfigProblem.NOT_FOUND, detail="no nodes (job unknown, or still pending)")
    hosts: dict[str, None] = {}
    for nodelist in lists:
        for h in expand(nodelist):
            hosts[h] = None
    return list(hosts)


class StreamSource:
    """Agents over msgpack streams; implements Source and RequestSource."""

    def __init__(self, targets: Sequence[Target], options: LinkOptions | None = None) -> None:
        seen: dict[str, Target] = {}
        for t in targets:
            seen.setdefault(t.address, t)
        if not seen:
            raise ConfigError("no agents to connect to", expected="an agent", problem=ConfigProblem.MISSING)
        self.targets = list(seen.values())
        self.options = options or LinkOptions()
        self._stop = threading.Event()
        self._links: list[HostLink] = []
        self._by_host: dict[str, HostLink] = {}
        self._lock = threading.Lock()
        self._reactor: Reactor | None = None

    @property
    def name(self) -> str:
        """``1 agent`` / ``N agents``."""
        n = len(self.targets)
        return f"{n} agent" if n == 1 else f"{n} agents"

    @property
    def simulated(self) -> bool:
        """Agents send real data (a simulated agent marks its samples)."""
        return False

    def expected_hosts(self) -> list[str]:
        """The address of every agent (``host:port`` or ssh host name)."""
        return [t.address for t in self.targets]

    def start(self, emit: Emit) -> None:
        """Start one link thread per agent; returns at once."""
        self._stop.clear()
        if any(t.kind == "tcp" and not t.tls for t in self.targets):
            self._reactor = Reactor()
        for t in self.targets:
            link = HostLink(t, emit, self.options, self._stop, self._reactor)
            link.on_host = self._register
            self._links.append(link)
            link.thread.start()

    def _register(self, link: HostLink) -> None:
        with self._lock:
            if link.host is not None:
                self._by_host[link.host] = link

    def stop(self) -> None:
        """Stop every link and wait briefly for the threads; idempotent."""
        self._stop.set()
        for link in self._links:
            link.close()
        for link in self._links:
            link.thread.join(timeout=3)
        if self._reactor is not None:
            self._reactor.close()
            self._reactor = None

    def request(self, host: str, params: RequestParams, timeout_s: float) -> Future[RequestResult]:
        """Send ``params`` (history, profile, trace: a ``request_schema`` struct) to ``host``'s agent.

        ``host`` is the reported name or the address. The future holds a
        :class:`RequestResult`; it fails with RequestFailed (agent error or
        not connected) or TimeoutError after ``timeout_s``.
        """
        with self._lock:
            link = self._by_host.get(host)
        if link is None:
            link = next((x for x in self._links if x.target.address == host), None)
        if link is None:
            fut: Future[RequestResult] = Future()
            fut.set_exception(RequestFailed(f"unknown host {host!r}"))
            return fut
        return link.request(params, timeout_s)


def token_from_file(path: str | None) -> bytes | None:
    """The token in ``--token-file PATH`` (None without one); ConfigError when the file is unsafe or bad."""
    from gpulens.ipc.auth import load_token
    from gpulens.ipc.errors import AuthError

    if not path:
        return None
    try:
        return load_token(path)
    except AuthError as err:
        raise ConfigError(where="--token-file", got=path, problem=err.file_problem or ConfigProblem.INVALID,
                          detail=str(err)) from err


@dataclass(frozen=True, slots=True)
class StreamFlags:
    """The agents the command line names, and how to reach them (None: flag not given)."""

    connect: str | None = None
    """``--connect HOST:PORT[,...]`` (an empty value is an error, never "no flag")."""
    ssh: str | None = None
    """``--ssh HOSTLIST``."""
    slurm_job: str | None = None
    """``--slurm-job ID``."""
    ssh_command: str | None = None
    """``--ssh-command CMD``, for ``ssh`` and ``slurm_job``."""
    token_file: str | None = None
    """``--token-file FILE``."""
    tls_ca: str | None = None
    """``--tls-ca PEM``, for ``tls://`` agents."""


def stream_source_from_flags(flags: StreamFlags) -> StreamSource:
    """Build a StreamSource from ``--connect``, ``--ssh``, ``--slurm-job`` (any mix).

    Raises:
        ConfigError: a malformed flag, unsafe token file, or Slurm missing.
    """
    targets: list[Target] = []
    if flags.connect is not None:
        found = parse_connect(flags.connect)
        if not found:
            raise ConfigError(where="--connect", expected="HOST:PORT[,HOST:PORT...]", got=flags.connect,
                              problem=ConfigProblem.MISSING)
        targets.extend(found)
    if flags.ssh is not None:
        try:
            names = expand(flags.ssh)
        except ConfigError as err:
            raise ConfigError(where="--ssh", expected=err.expected, got=err.got, problem=err.problem,
                              detail=str(err)) from err
        targets.extend(ssh_target(h, flags.ssh_command) for h in names)
    if flags.slurm_job is not None:
        targets.extend(ssh_target(h, flags.ssh_command) for h in slurm_hosts(flags.slurm_job))
    token = token_from_file(flags.token_file)
    ssl_context = None
    if any(t.tls for t in targets):
        import ssl

        try:
            ssl_context = ssl.create_default_context(cafile=flags.tls_ca)
        except (OSError, ssl.SSLError) as err:
            raise ConfigError(where=f"--tls-ca {flags.tls_ca}", expected="a PEM CA file", got=flags.tls_ca,
                              problem=ConfigProblem.UNREADABLE, detail=f"cannot load: {err}") from err
    return StreamSource(targets, LinkOptions(token=token, ssl_context=ssl_context))
