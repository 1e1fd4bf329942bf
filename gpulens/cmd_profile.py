"""``gpulens profile --pid P``: sample a running Python process with py-spy into folded stacks.

Locally py-spy runs here; with ``--host`` the request goes to that host's
agent over the gpulens stream (``HOST:PORT`` as for ``--connect``, or
``ssh:NODE`` to start ``gpulens agent --stdio`` there), which samples its
own processes and sends the folded stacks back.
"""

from __future__ import annotations

import argparse
import sys

HELP = "sample a running Python process with py-spy and write folded stacks"
AGENT_WAIT_S = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``gpulens profile``."""
    parser.add_argument("--pid", type=int, action="append", required=True, metavar="P",
                        help="process to sample (repeat for several)")
    parser.add_argument("--duration", type=float, default=10.0, metavar="S", help="seconds to sample (default 10)")
    parser.add_argument("--rate", type=int, default=100, metavar="HZ", help="samples per second (default 100)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="output file: folded stacks (speedscope JSON if it ends in .json)")
    parser.add_argument("--host", metavar="HOST:PORT|ssh:NODE",
                        help="sample on that host through its gpulens agent (TCP as for --connect, or ssh)")
    parser.add_argument("--token-file", metavar="FILE", help="token for a non-loopback TCP agent")


def run(args: argparse.Namespace) -> int:
    """Sample (here or through an agent), write the file, print a one-line summary."""
    from gpulens.collectors.flame.exporters import export_folded, export_speedscope

    if args.host:
        from gpulens.collectors.flame.folded import parse_folded

        profile = parse_folded(_remote_folded(args), source=f"profile from {args.host}")
    else:
        from gpulens.collectors.flame.pyspy import sample_pids

        profile = sample_pids(args.pid, args.duration, args.rate)
    if args.output.endswith(".json"):
        export_speedscope(profile, args.output)
    else:
        export_folded(profile, args.output)
    print(f"wrote {args.output}: {int(profile.total)} samples, {len(profile.frames)} frames", file=sys.stderr)
    return 0


def _remote_folded(args: argparse.Namespace) -> bytes:
    """Ask the agent on ``args.host`` for a profile; the folded bytes it sent back."""
    import tempfile
    import threading
    from pathlib import Path

    from gpulens.collectors.errors import CollectorError
    from gpulens.collectors.source import SampleEvent, SourceEvent
    from gpulens.collectors.stream_source import LinkOptions, StreamSource, ssh_target, tcp_target
    from gpulens.ipc.errors import RequestFailed

    target = ssh_target(args.host[4:]) if args.host.startswith("ssh:") else tcp_target(args.host)
    token = None
    if args.token_file:
        from gpulens.ipc.auth import load_token

        token = load_token(args.token_file)
    up = threading.Event()

    def emit(event: SourceEvent) -> None:
        if isinstance(event, SampleEvent):
            up.set()

    with tempfile.TemporaryDirectory(prefix="gpulens-profile-") as tmp:
        src = StreamSource([target], LinkOptions(token=token, download_dir=Path(tmp)))
        src.start(emit)
        try:
            if not up.wait(AGENT_WAIT_S):
                raise CollectorError(f"no gpulens agent answered at {target.address} within {AGENT_WAIT_S:.0f} s")
            params = {"pids": list(args.pid), "duration_s": args.duration, "rate_hz": args.rate}
            timeout = args.duration + 60.0
            try:
                result = src.request(target.address, "profile", params, timeout).result(timeout=timeout + 30)
            except RequestFailed as err:
                raise CollectorError(f"the agent at {target.address} could not profile: {err}") from err
            except TimeoutError as err:
                raise CollectorError(f"the agent at {target.address} sent no profile within {timeout:.0f} s") from err
            files = list(result.files.values())
            if len(files) != 1:
                raise CollectorError(f"the agent at {target.address} sent {len(files)} files, expected 1")
            return Path(files[0]).read_bytes()
        finally:
            src.stop()
