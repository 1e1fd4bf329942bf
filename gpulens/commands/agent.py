"""``gpulens agent``: sample this host and serve viewers over stdio or TCP.

What a viewer may do is decided by how it connected (``gpulens.ipc.principal``):
``--stdio`` (ssh) and a TCP viewer that proved ``--token-file`` act with this
agent's user's authority; a TCP viewer of an agent without a token gets
samples and history only; the local control socket serves each local user
for its own processes. ``/metrics`` has no authentication, so it binds
loopback unless ``--metrics-public`` says otherwise.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpulens.core.errors import ConfigError, ConfigProblem

if TYPE_CHECKING:  # the agent's modules load only when it runs (the command line starts fast)
    import socket
    import ssl

    from gpulens.agent.agent import Agent
    from gpulens.agent.gpumem import GpuMemService
    from gpulens.agent.metrics import MetricsServer
    from gpulens.agent.pyroscope import GpuMemPusher
    from gpulens.core.events import HostSampler

HELP = "sample this host and serve viewers (--stdio for ssh, --listen HOST:PORT for TCP)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Agent flags."""
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true", help="serve one viewer on stdin/stdout (what --ssh runs)")
    mode.add_argument(
        "--listen",
        metavar="[HOST:]PORT",
        help="serve viewers on TCP (PORT 0: any free port; HOST alone: port 7789, what --connect HOST "
        "uses); HOST defaults to 127.0.0.1; a non-loopback HOST needs --token-file",
    )
    parser.add_argument("--hostname", metavar="NAME", help="host name to report (default: this machine's)")
    parser.add_argument("--interval", type=float, metavar="S", help="sampling interval in seconds (default: config interval_s, 1)")
    parser.add_argument("--history-minutes", type=float, metavar="M", help="minutes of history kept for backfill (default: config history_minutes, 15)")
    parser.add_argument("--pattern", metavar="RE", help="job pattern, a regex on the process-tree ID (default: config job_pattern)")
    parser.add_argument("--token-file", metavar="FILE", help="shared token (mode 0600) viewers must prove they hold")
    parser.add_argument("--tls-cert", metavar="PEM", help="serve TLS with this certificate chain")
    parser.add_argument("--tls-key", metavar="PEM", help="private key for --tls-cert")
    parser.add_argument("--port-file", metavar="FILE", help="write the bound TCP port to FILE (for --listen HOST:0)")
    parser.add_argument(
        "--metrics-port", type=int, nargs="?", const=7790, metavar="PORT",
        help="also serve Prometheus /metrics on PORT (default 7790, outside Prometheus' exporter port range)",
    )
    parser.add_argument(
        "--metrics-addr", default="127.0.0.1", metavar="ADDR",
        help="address for --metrics-port (a non-loopback one needs --metrics-public)",
    )
    parser.add_argument(
        "--metrics-public", action="store_true",
        help="allow a non-loopback --metrics-addr (anyone who reaches it can read every metric)",
    )
    parser.add_argument(
        "--max-queue", type=int, default=128, metavar="N", help="frames queued per viewer before a slow one is dropped"
    )
    parser.add_argument("--no-trace", action="store_true", help="do not own this host's Kineto trace endpoint")
    parser.add_argument("--gpumem", action="store_true", help="trace GPU memory allocations of every process "
                        "from now on (eBPF on the CUDA libraries; root): GPU-memory flame graphs answer at once")
    parser.add_argument("--pyroscope", metavar="URL", help="with --gpumem: push each process's live GPU memory by "
                        "Python stack to this Pyroscope server (pprof, labelled host/pid/job/pod)")
    parser.add_argument("--pyroscope-app", metavar="NAME", default="gpulens.gpu_memory", help=argparse.SUPPRESS)
    parser.add_argument("--pyroscope-token-file", metavar="FILE", help="bearer token for --pyroscope")
    parser.add_argument("--pyroscope-every", type=float, default=15.0, metavar="S", help=argparse.SUPPRESS)
    parser.add_argument("--quiet", action="store_true", help="log warnings only")
    # SIMULATED samples for tests and benchmarks of many agents on one machine.
    parser.add_argument("--simulated-gpus", type=int, default=None, help=argparse.SUPPRESS)
    # How often a taken Kineto name is tried again (tests; the default is 15 s).
    parser.add_argument("--claim-retry", type=float, default=None, help=argparse.SUPPRESS)


def parse_listen(value: str) -> tuple[str, int]:
    """``PORT``, ``HOST``, ``HOST:PORT``, ``[V6]`` or ``[V6]:PORT`` -> (host, port); raises ConfigError.

    A HOST alone listens on the viewer's default port (7789), so ``gpulens
    agent --listen node1`` pairs with ``gpulens --connect node1``.
    """
    from gpulens.sources.stream.source import DEFAULT_PORT

    text = value.strip()
    if not text:
        raise ConfigError(where="--listen", expected="[HOST:]PORT", got=value, problem=ConfigProblem.MISSING,
                          detail="expected [HOST:]PORT, got an empty string")
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ConfigError(where="--listen", expected="[HOST:]PORT", got=value, problem=ConfigProblem.BAD_FORMAT)
        port_s = rest[1:] if rest else str(DEFAULT_PORT)
    elif text.isdigit():
        host, port_s = "", text
    else:
        host, sep, port_s = text.rpartition(":")
        if not sep:
            host, port_s = text, str(DEFAULT_PORT)
    host = host or "127.0.0.1"
    try:
        port = int(port_s)
    except ValueError:
        raise ConfigError(where="--listen", expected="[HOST:]PORT", got=value, problem=ConfigProblem.BAD_FORMAT) from None
    if not 0 <= port <= 65535:
        raise ConfigError(where="--listen", expected="a port from 0 to 65535", got=port, problem=ConfigProblem.OUT_OF_RANGE,
                          detail=f"port must be 0..65535, got {port}")
    return host, port


def _make_sampler(args: argparse.Namespace, hostname: str) -> HostSampler:
    cfg = args.cfg
    if args.simulated_gpus is not None:
        from gpulens.collectors.synthetic import SyntheticSampler

        return SyntheticSampler(hostname=hostname, gpus=args.simulated_gpus, interval_s=cfg.interval_s)
    from gpulens.collectors.sampler import Sampler

    return Sampler(hostname=hostname, job_pattern=cfg.job_pattern, job_key_env=cfg.job_key_env)


def run(args: argparse.Namespace) -> int:
    """Run the agent until the viewer leaves (--stdio) or a signal arrives."""
    import socket

    from gpulens import __version__
    from gpulens.agent.agent import Agent
    from gpulens.ipc import auth

    _setup_logging(args.quiet)
    cfg = args.cfg
    _check_flags(args)
    token = auth.load_token(args.token_file) if args.token_file else None
    host, port = _listen_address(args, token)
    ssl_context = _tls_context(args)

    hostname = args.hostname or socket.gethostname()
    history_s = 60.0 * (args.history_minutes if args.history_minutes is not None else cfg.history_minutes)
    sock = _bind(args, host, port)
    agent = Agent(
        _make_sampler(args, hostname),
        hostname=hostname,
        interval_s=cfg.interval_s,
        history_s=history_s,
        token=token,
        max_queued_frames=args.max_queue,
        version=__version__,
        job_key_env=cfg.job_key_env,
    )
    if args.claim_retry is not None:
        agent.claim_retry_s = args.claim_retry
    if args.pyroscope and not args.gpumem:
        raise ConfigError("--pyroscope pushes --gpumem's profiles: add --gpumem", where="--pyroscope",
                          expected="--gpumem", problem=ConfigProblem.CONFLICT)
    services = _Services()
    try:
        services.start(args, hostname, agent)
        if args.stdio:
            return _serve_stdio(agent)
        assert sock is not None
        notes = f"{'token' if token else 'no token'}{', TLS' if ssl_context else ''}"
        return _serve_tcp(args, agent, sock, ssl_context,
                          lambda bound: f"{_shown(host)}:{bound} as {hostname} ({notes})")
    finally:
        if sock is not None:
            sock.close()
        agent.stop()
        services.close(agent)


def _setup_logging(quiet: bool) -> None:
    """Log to stderr, prefixed, and rate-limited: peers cause warnings (bad datagrams): 10 a kind a minute."""
    import logging

    logging.basicConfig(
        stream=sys.stderr,
        level=logging.WARNING if quiet else logging.INFO,
        format="gpulens agent: %(message)s",
    )
    from gpulens.core import logbook

    for handler in logging.getLogger().handlers:
        logbook.rate_limit(handler)


def _check_flags(args: argparse.Namespace) -> None:
    """The checks that need nothing but the flags themselves; ConfigError on the first that fails."""
    if args.stdio:
        tcp_only = [flag for flag, v in (("--port-file", args.port_file), ("--tls-cert", args.tls_cert),
                                         ("--tls-key", args.tls_key)) if v]
        if tcp_only:
            raise ConfigError(where=", ".join(tcp_only), expected="--listen", problem=ConfigProblem.CONFLICT,
                              detail="only with --listen (--stdio has no port; ssh encrypts)")
    if args.hostname is not None and not args.hostname.strip():
        raise ConfigError(where="--hostname", expected="a name", got=args.hostname, problem=ConfigProblem.MISSING,
                          detail="expected a name, got an empty string")
    if args.claim_retry is not None and not 0 < args.claim_retry <= 3600:
        raise ConfigError(where="--claim-retry", expected="seconds in (0, 3600]", got=args.claim_retry,
                          problem=ConfigProblem.OUT_OF_RANGE, detail=f"expected seconds in (0, 3600], got {args.claim_retry:g}")
    if args.max_queue < 1:
        raise ConfigError(where="--max-queue", expected="at least 1", problem=ConfigProblem.OUT_OF_RANGE)
    if args.history_minutes is not None and not 0 < args.history_minutes <= 24 * 60:
        raise ConfigError(where="--history-minutes", expected="minutes in (0, 1440]", got=args.history_minutes,
                          problem=ConfigProblem.OUT_OF_RANGE,
                          detail=f"expected minutes in (0, 1440], got {args.history_minutes:g}")
    _check_metrics_flags(args)


def _check_metrics_flags(args: argparse.Namespace) -> None:
    """``--metrics-port`` in range, and a non-loopback ``--metrics-addr`` only with ``--metrics-public``."""
    from gpulens.agent.listener import is_loopback

    if args.metrics_port is not None and not 1 <= args.metrics_port <= 65535:
        raise ConfigError(where="--metrics-port", expected="a port from 1 to 65535", got=args.metrics_port,
                          problem=ConfigProblem.OUT_OF_RANGE)
    if args.metrics_port is not None and not args.metrics_public and not is_loopback(args.metrics_addr):
        raise ConfigError(where=f"--metrics-addr {args.metrics_addr}", expected="--metrics-public",
                          problem=ConfigProblem.CONFLICT,
                          detail="/metrics has no authentication, so a non-loopback address needs --metrics-public")


def _listen_address(args: argparse.Namespace, token: bytes | None) -> tuple[str, int]:
    """``--listen``'s (host, port), ("", 0) without it; a non-loopback host needs a token."""
    from gpulens.agent.listener import is_loopback

    if args.listen is None:
        return "", 0
    host, port = parse_listen(args.listen)
    if not is_loopback(host) and token is None:
        raise ConfigError(where=f"--listen {args.listen}", expected="--token-file", problem=ConfigProblem.CONFLICT,
                          detail="a non-loopback address needs --token-file "
                                 "(or use --ssh from the viewer, which opens no port)")
    return host, port


def _tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """``--tls-cert``/``--tls-key``: a server SSL context (None: no TLS), or ConfigError in one line."""
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together", where="--tls-cert/--tls-key",
                          expected="both or neither", problem=ConfigProblem.CONFLICT)
    if not args.tls_cert:
        return None
    import ssl

    ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    for flag, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise ConfigError(where=f"{flag} {path}", expected="a readable file", got=path,
                              problem=ConfigProblem.UNREADABLE, detail="not a readable file")
    try:
        ssl_context.load_cert_chain(args.tls_cert, args.tls_key)
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(where="--tls-cert/--tls-key", expected="a PEM certificate chain and its key",
                          problem=ConfigProblem.UNREADABLE,
                          detail=f"cannot load a PEM certificate chain and its key: {err}") from err
    return ssl_context


def _bind(args: argparse.Namespace, host: str, port: int) -> socket.socket | None:
    """``--listen``: the bound socket (None: --stdio).

    Bound before starting anything, so a port in use fails at once with one line.
    """
    from gpulens.agent.listener import listen

    if args.listen is None:
        return None
    try:
        return listen(host, port)
    except OSError as err:
        raise ConfigError(where=f"--listen {args.listen}", problem=ConfigProblem.UNAVAILABLE,
                          detail=f"cannot listen: {err.strerror or err}") from err


class _Services:
    """What runs beside the agent, as asked: /metrics, the Kineto trace endpoint, GPU-memory tracing."""

    def __init__(self) -> None:
        self.metrics: MetricsServer | None = None
        self.pusher: GpuMemPusher | None = None

    def start(self, args: argparse.Namespace, hostname: str, agent: Agent) -> None:
        """Start each asked-for service; those started before a failure are still closed by :meth:`close`."""
        if args.metrics_port is not None:
            self.metrics = _serve_metrics(args, hostname, agent)
        if not args.no_trace:
            agent.start_trace_service()
        if args.gpumem:
            gpumem = agent.requests.gpumem = _start_gpumem()
            self.pusher = _start_pyroscope(args, agent, hostname, gpumem)
        else:
            from gpulens.agent.gpumem import gpumem_possible

            agent.requests.gpumem_windows = gpumem_possible()

    def close(self, agent: Agent) -> None:
        """Close what :meth:`start` started (after ``agent.stop()``)."""
        if self.metrics is not None:
            self.metrics.close()
        if self.pusher is not None:
            self.pusher.close()
        if agent.requests.gpumem is not None:
            agent.requests.gpumem.close()


def _shown(host: str) -> str:
    """A host as a viewer types it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def _serve_stdio(agent: Agent) -> int:
    """``--stdio``: serve one viewer; the protocol owns the real stdout, anything a library prints goes to stderr."""
    rfd, wfd = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    agent.start()
    agent.serve_stdio(rfd, wfd)
    return 0


def _serve_tcp(
    args: argparse.Namespace, agent: Agent, sock: socket.socket, ssl_context: ssl.SSLContext | None,
    where: Callable[[int], str],
) -> int:
    """``--listen``: serve viewers until SIGTERM; ``where(port)`` says where, for the one line on stderr."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    bound = sock.getsockname()[1]
    if args.port_file:
        _write_port_file(args.port_file, bound)
    print(f"gpulens agent: listening on {where(bound)}", file=sys.stderr, flush=True)
    agent.start()
    agent.serve_tcp(sock, ssl_context, stop)
    return 143 if stop.is_set() else 0  # as --help promises: SIGTERM is 143 (issue 31 item 19)


def _start_pyroscope(
    args: argparse.Namespace, agent: Agent, hostname: str, service: GpuMemService
) -> GpuMemPusher | None:
    """``--pyroscope URL``: push live GPU memory by stack every ``--pyroscope-every`` seconds (None: not asked)."""
    if not args.pyroscope:
        return None
    from gpulens.agent.pyroscope import GpuMemPusher, target_from

    target = target_from(args.pyroscope, args.pyroscope_app, args.pyroscope_token_file)
    pusher = GpuMemPusher(target, service.live_stacks, service.live_pids, agent.latest, hostname,
                          every_s=max(1.0, args.pyroscope_every))
    pusher.start()
    return pusher


def _start_gpumem() -> GpuMemService:
    """``--gpumem``: the system-wide GPU-memory tracer, or ConfigError in one line (not root, no libbpf…)."""
    from gpulens.agent.gpumem import GpuMemService
    from gpulens.collectors.gpumem.libbpf import BpfError

    try:
        service = GpuMemService()
    except BpfError as err:
        raise ConfigError(where="--gpumem", problem=ConfigProblem.UNAVAILABLE, detail=str(err)) from err
    found = ", ".join(service.paths) or "none found by ldconfig (a job's own copy is probed when asked)"
    print(f"gpulens agent: tracing GPU memory allocations through {found}", file=sys.stderr, flush=True)
    return service


def _write_port_file(path: str, port: int) -> None:
    from gpulens.core.safefs import write_new_file

    try:
        # A fresh unpredictable temporary name (O_EXCL | O_NOFOLLOW), renamed over PATH.
        write_new_file(path, f"{port}\n".encode())
    except OSError as err:
        raise ConfigError(where=f"--port-file {path}", problem=ConfigProblem.UNAVAILABLE,
                          detail=f"cannot write: {err.strerror or err}") from err


def _serve_metrics(args: argparse.Namespace, hostname: str, agent: Agent) -> MetricsServer:
    try:
        from gpulens.agent.metrics import serve_metrics
        from gpulens.collectors.host import read_cpu_times
    except ImportError as err:
        raise ConfigError(where="--metrics-port", problem=ConfigProblem.UNAVAILABLE,
                          detail=f"the Prometheus exporter is not installed ({err})") from err
    try:
        return serve_metrics(
            args.metrics_port, hostname, agent.latest, addr=args.metrics_addr, public=args.metrics_public,
            history=agent.history_since, cpu_times=read_cpu_times,
        )
    except OSError as err:
        raise ConfigError(where=f"--metrics-port {args.metrics_port}", problem=ConfigProblem.UNAVAILABLE,
                          detail=f"cannot listen: {err.strerror or err}") from err
