"""``gpulens analyze TRACE|DIR...``: summarise one PyTorch/Kineto trace, every rank of a job, or two traces' difference."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpulens.core.limits import InputLimits

HELP = "summarise PyTorch profiler traces: op table and GPU breakdown; all ranks of a job; or --diff A B"
EPILOG = (
    "One file: torch-style op table, GPU breakdown, findings. Several files, or a directory (its *.json, "
    "*.json.gz and *.pt.trace.json* files): every rank together, with step times per rank, spread, "
    "stragglers, communication/computation overlap and time in collectives. --diff A B: per-op and "
    "per-kernel deltas, step-time delta, new and vanished ops (B - A). JSON shapes: docs/analyze-json.md. "
    "Exit status: 0 success; 2 a file that cannot be read or has nothing to analyse (no CPU op or GPU "
    "activity: the message says what it looks like), two files of one rank, or bad arguments; "
    "1 an I/O or internal error; 130 Ctrl-C; 143 SIGTERM."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``gpulens analyze``."""
    from gpulens.commands._args import add_limit_arguments
    from gpulens.core.limits import ANALYZE_MAX_MIB

    parser.epilog = EPILOG
    parser.add_argument("trace", metavar="TRACE|DIR", nargs="+",
                        help="Chrome-trace files (.json or .json.gz) or directories of them, one per rank")
    parser.add_argument("--diff", action="store_true",
                        help="compare two traces: TRACE A (baseline) and TRACE B")
    parser.add_argument("--json", action="store_true", help="print the result as JSON (schema_version 1)")
    parser.add_argument("--top", type=int, default=30, metavar="N", help="rows in the op and kernel tables (default 30)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="ranks read in parallel, one process each (default: CPU count, at most 2)")
    parser.add_argument("--straggler-pct", type=float, default=5.0, metavar="PCT",
                        help="the smallest excess per step, in %% of the median step, that can name a straggler "
                             "(the noise the steps show raises it; default 5)")
    add_limit_arguments(parser, ANALYZE_MAX_MIB)


def run(args: argparse.Namespace) -> int:
    """Analyse and print; a TraceFileError becomes one clear line (exit 2)."""
    import os

    from gpulens.analysis.trace.rank_files import trace_files
    from gpulens.commands._args import limits_from_args
    from gpulens.core.errors import ConfigError, ConfigProblem

    limits = limits_from_args(args)
    top = max(args.top, 1)
    if not args.straggler_pct >= 0:
        raise ConfigError(where="--straggler-pct", expected="0 or more", got=args.straggler_pct,
                          problem=ConfigProblem.OUT_OF_RANGE, detail=f"expected 0 or more, got {args.straggler_pct:g}")
    if args.diff:
        _check_diff(args.trace)
        return _diff(args, limits, top)
    files = trace_files(args.trace)
    if len(files) == 1:
        return _single(files[0], args, limits, top)
    jobs = args.jobs if args.jobs is not None else min(os.cpu_count() or 1, 2)
    if jobs < 1:
        raise ConfigError(where="--jobs", expected="1 or more", got=jobs, problem=ConfigProblem.OUT_OF_RANGE)
    return _ranks(files, args, limits, jobs)


def _check_diff(paths: list[str]) -> None:
    """``--diff A B``: two files, neither a directory; ConfigError (OUT_OF_RANGE, NOT_REGULAR) otherwise."""
    import os

    from gpulens.core.errors import ConfigError, ConfigProblem

    sentence = "--diff takes exactly two trace files: A (the baseline) and B"
    if len(paths) != 2:
        raise ConfigError(sentence, where="--diff", expected="two trace files", got=len(paths),
                          problem=ConfigProblem.OUT_OF_RANGE)
    folder = next((p for p in paths if os.path.isdir(p)), None)
    if folder is not None:
        raise ConfigError(sentence, where="--diff", expected="two trace files", got=folder,
                          problem=ConfigProblem.NOT_REGULAR)


def _emit(doc: object, text: str, as_json: bool) -> int:
    import json
    import sys

    if as_json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text)
    return 0


def _single(path: str, args: argparse.Namespace, limits: InputLimits, top: int) -> int:
    from gpulens.analysis.trace.analyze import analyze_file
    from gpulens.analysis.trace.errors import TraceFileError, TraceProblem
    from gpulens.analysis.trace.json_out import trace_json
    from gpulens.analysis.trace.rank_reduce import RankFold
    from gpulens.analysis.trace.report import summary_text
    from gpulens.analysis.trace.sniff import what_it_is
    from gpulens.core.sanitize import clean_text
    summary = analyze_file(path, top=top, limits=limits)
    if not summary.processes:
        from gpulens.analysis.trace.load import stream_events

        fold = RankFold()
        meta = stream_events(path, fold.add_batch, limits=limits)
        raise TraceFileError(f"{clean_text(path)}: {what_it_is(fold, meta.events, path)}", problem=TraceProblem.NO_EVENTS)
    return _emit(trace_json(summary) if args.json else None, "" if args.json else summary_text(summary), args.json)


def _ranks(files: list[str], args: argparse.Namespace, limits: InputLimits, jobs: int) -> int:
    from gpulens.analysis.trace.json_out import ranks_json
    from gpulens.analysis.trace.rank_text import ranks_text
    from gpulens.analysis.trace.ranks import analyze_ranks
    rep = analyze_ranks(files, limits=limits, jobs=jobs, threshold_pct=args.straggler_pct)
    return _emit(ranks_json(rep) if args.json else None, "" if args.json else ranks_text(rep), args.json)


def _diff(args: argparse.Namespace, limits: InputLimits, top: int) -> int:
    from gpulens.analysis.trace.diff import diff_files
    from gpulens.analysis.trace.diff_text import diff_text
    from gpulens.analysis.trace.json_out import diff_json
    d = diff_files(args.trace[0], args.trace[1], limits=limits)
    return _emit(diff_json(d) if args.json else None, "" if args.json else diff_text(d, top), args.json)
