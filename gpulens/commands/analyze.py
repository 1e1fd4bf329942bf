"""``gpulens analyze TRACE``: summarise a PyTorch/Kineto Chrome trace (.json or .json.gz)."""

from __future__ import annotations

import argparse

HELP = "summarise a PyTorch profiler trace: torch-style op table, GPU breakdown, findings"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``gpulens analyze``."""
    from gpulens.core.limits import ANALYZE_MAX_MIB, add_limit_arguments

    parser.add_argument("trace", metavar="TRACE", help="Chrome-trace file (.json or .json.gz)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--top", type=int, default=30, metavar="N", help="rows in the op and kernel tables (default 30)")
    add_limit_arguments(parser, ANALYZE_MAX_MIB)


def run(args: argparse.Namespace) -> int:
    """Analyse and print; TraceFileError becomes one clear line (exit 2), also for a trace
    without a single CPU or GPU event (nothing to summarise is not a success)."""
    import json
    import sys

    from gpulens.analysis.trace.analyze import analyze_file
    from gpulens.analysis.trace.errors import TraceFileError
    from gpulens.analysis.trace.report import summary_text
    from gpulens.analysis.trace.summary import to_dict
    from gpulens.core.limits import limits_from_args

    summary = analyze_file(args.trace, top=max(args.top, 1), limits=limits_from_args(args))
    if not summary.processes:
        raise TraceFileError(
            f"{args.trace}: no CPU or GPU events in its {summary.events} events "
            "(not a PyTorch profiler / Kineto trace?)"
        )
    if args.json:
        json.dump(to_dict(summary), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(summary_text(summary))
    return 0
