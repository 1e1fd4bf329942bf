"""``gpulens analyze TRACE``: summarise a PyTorch/Kineto Chrome trace (.json or .json.gz)."""

from __future__ import annotations

import argparse

HELP = "summarise a PyTorch profiler trace: torch-style op table, GPU breakdown, findings"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``gpulens analyze``."""
    parser.add_argument("trace", metavar="TRACE", help="Chrome-trace file (.json or .json.gz)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--top", type=int, default=30, metavar="N", help="rows in the op and kernel tables (default 30)")
    parser.add_argument(
        "--max-mib", type=int, default=4096, metavar="MIB", help="refuse traces larger than this uncompressed (default 4096)"
    )


def run(args: argparse.Namespace) -> int:
    """Analyse and print; TraceFileError becomes one clear line (exit 2)."""
    import json
    import sys

    from gpulens.collectors.trace.analyze import analyze_file
    from gpulens.collectors.trace.report import summary_text
    from gpulens.collectors.trace.summary import to_dict

    summary = analyze_file(args.trace, top=max(args.top, 1), max_bytes=args.max_mib << 20)
    if args.json:
        json.dump(to_dict(summary), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(summary_text(summary))
    return 0
