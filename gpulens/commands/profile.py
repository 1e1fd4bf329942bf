"""``gpulens profile --pid P``: sample a running Python process with py-spy into folded stacks.

Locally py-spy runs here; with ``--connect HOST:PORT`` or ``--ssh NODE``
(spelled as everywhere, :mod:`gpulens.commands._args`) the request goes to
that host's agent over the gpulens stream, which samples its own processes
and sends the folded stacks back.
"""

from __future__ import annotations

import argparse
import sys

from gpulens.commands._args import add_pid_argument, add_remote_arguments, pids_of, remote_target

HELP = "sample a running Python process with py-spy and write folded stacks"
AGENT_WAIT_S = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``gpulens profile``."""
    add_pid_argument(parser, required=True, help="processes to sample")
    parser.add_argument("--duration", type=float, default=10.0, metavar="S", help="seconds to sample (default 10)")
    parser.add_argument("--rate", type=int, default=100, metavar="HZ", help="samples per second (default 100)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="output file: folded stacks (speedscope JSON if it ends in .json)")
    add_remote_arguments(parser, what="sample")


def run(args: argparse.Namespace) -> int:
    """Sample (here or through an agent), write the file, print a one-line summary."""
    from gpulens.core.errors import ConfigError, ConfigProblem
    from gpulens.sources.flame_export import check_writable, export_folded, export_speedscope

    args.pid = list(pids_of(args))
    args.host = remote_target(args)
    if not 0 < args.duration <= 24 * 3600:
        raise ConfigError(where="--duration", expected="seconds in (0, 86400]", got=args.duration,
                          problem=ConfigProblem.OUT_OF_RANGE,
                          detail=f"expected seconds in (0, 86400], got {args.duration:g}")
    if not 1 <= args.rate <= 10_000:
        raise ConfigError(where="--rate", expected="1 to 10000 samples per second", got=args.rate,
                          problem=ConfigProblem.OUT_OF_RANGE)
    check_writable(args.output, "-o/--output")
    if args.host:
        from gpulens.analysis.flame.folded import parse_folded

        profile = parse_folded(_remote_folded(args), source=f"profile from {args.host}")
    else:
        from gpulens.agent.pyspy import sample_pids

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
    from pathlib import Path

    from gpulens.core.errors import CollectorError
    from gpulens.core.limits import InputLimits, InputRefused, read_input
    from gpulens.core.pyspy import MAX_OUTPUT_BYTES
    from gpulens.ipc.errors import RequestFailed
    from gpulens.ipc.request_schema import ProfileParams
    from gpulens.sources.stream.connect import open_agent

    with tempfile.TemporaryDirectory(prefix="gpulens-profile-") as tmp:
        src, address = open_agent(
            args.host,
            token_file=args.token_file,
            ssh_command=args.ssh_command,
            download_dir=Path(tmp),
            wait_s=AGENT_WAIT_S,
            tls_ca=args.tls_ca,
        )
        try:
            params = ProfileParams(pids=tuple(args.pid), duration_s=args.duration, rate_hz=args.rate)
            timeout = args.duration + 60.0
            try:
                result = src.request(address, params, timeout).result(timeout=timeout + 30)
            except RequestFailed as err:
                raise CollectorError(f"the agent at {address} could not profile: {err}") from err
            except TimeoutError as err:
                raise CollectorError(f"the agent at {address} sent no profile within {timeout:.0f} s") from err
            files = list(result.files.values())
            if len(files) != 1:
                raise CollectorError(f"the agent at {address} sent {len(files)} files, expected 1")
            try:  # bounded like every input: a regular file, at most py-spy's output limit
                return bytes(read_input(str(files[0]), InputLimits(max_bytes=MAX_OUTPUT_BYTES),
                                        what="folded profile"))
            except InputRefused as err:
                raise CollectorError(f"the profile from {address} was refused: {err}") from err
        finally:
            src.stop()
