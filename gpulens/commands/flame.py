"""``gpulens flame FILE``: open a profile as an interactive flame graph, or summarise it."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpulens.analysis.flame.group import ProfileGroup

HELP = ("open a profile (folded, speedscope, py-spy, Chrome/Kineto trace, perf script, memory snapshot) "
        "as a flame graph")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``gpulens flame``."""
    from gpulens.commands._args import add_limit_arguments
    from gpulens.core.limits import FLAME_MAX_MIB

    parser.add_argument("file", metavar="FILE", nargs="?", help="folded stacks, speedscope JSON, Chrome/Kineto "
                        "trace, perf script output, memory snapshot pickle or pprof (or --pyroscope)")
    parser.add_argument("--pyroscope", metavar="URL", help="open a profile stored in Pyroscope instead of a FILE "
                        "(with --query, --from, --until)")
    parser.add_argument("--query", metavar="Q", help="Pyroscope query, e.g. 'gpulens.gpu_memory{pod=\"vllm-0\"}'")
    parser.add_argument("--from", dest="start", default="now-1h", metavar="T", help="from (unix s or now-1h)")
    parser.add_argument("--until", default="now", metavar="T", help="until (unix s or now)")
    parser.add_argument("--metric", default="auto", choices=["auto", "time", "memory", "live", "allocated"],
                        help="trace: time or memory; snapshot: live or allocated blocks (default: auto)")
    parser.add_argument("--top", type=int, metavar="N", help="print the N functions with the highest self value")
    parser.add_argument("--json", action="store_true", help="print {unit, total, frames: [{name, self, total}]} as "
                        "JSON; unit: samples, seconds, bytes or events (then event: its name, e.g. cycles)")
    parser.add_argument("--profile", metavar="N|all", help="files with one profile per thread (py-spy speedscope, "
                        "Chrome traces): the 0-based profile to show, or 'all' merged (default: the file's active one)")
    parser.add_argument("--focus", metavar="REGEX", help="keep only the stacks through a frame matching REGEX, "
                        "starting at that frame (for --export-*, --top and --json)")
    parser.add_argument("--export-folded", metavar="OUT", help="write folded stacks with integer counts: samples, "
                        "perf events, µs (time profiles) or bytes (memory); name it *.us.folded / *.bytes.folded to "
                        "keep the unit")
    parser.add_argument("--export-speedscope", metavar="OUT", help="write the profile as speedscope JSON")
    parser.add_argument("--export-pprof", metavar="OUT", help="write the profile as gzipped pprof (go tool pprof, "
                        "Pyroscope); *.pb.gz by convention")
    add_limit_arguments(parser, FLAME_MAX_MIB)


def _number(value: float, unit: str) -> int | float:
    return int(value) if unit != "seconds" and value == int(value) else value


def summary(profile: object, top: int | None) -> dict[str, object]:
    """The ``--json`` document: functions merged across the tree, highest self first."""
    from gpulens.analysis.flame.model import Profile
    from gpulens.analysis.flame.query import function_table
    from gpulens.analysis.flame.units import unit_event, unit_kind

    assert isinstance(profile, Profile)
    rows = function_table(profile)
    if top is not None:
        rows = rows[: max(top, 0)]
    unit = profile.unit
    return {
        "unit": unit_kind(unit),
        **({"event": unit_event(unit)} if unit_event(unit) else {}),
        "total": _number(profile.total, unit),
        "title": profile.title,
        "frames": [
            {"name": r.name, "file": r.file, "self": _number(r.self_value, unit), "total": _number(r.total_value, unit)}
            for r in rows
        ],
    }


def _pyroscope(args: argparse.Namespace) -> ProfileGroup:
    """The profile ``--query`` names in the Pyroscope at ``--pyroscope``, as a one-profile group."""
    from gpulens.analysis.flame.flamebearer import from_flamebearer
    from gpulens.analysis.flame.group import single
    from gpulens.core.errors import ConfigError, ConfigProblem
    from gpulens.sources.pyroscope import render

    if args.file:
        raise ConfigError("gpulens flame: a FILE or --pyroscope, not both", where="--pyroscope", expected="no FILE",
                          got=args.file, problem=ConfigProblem.CONFLICT)
    if not args.query:
        raise ConfigError("--pyroscope needs --query, e.g. 'gpulens.gpu_memory{host=\"node07\"}'", where="--pyroscope",
                          expected="--query", problem=ConfigProblem.CONFLICT)
    return single(from_flamebearer(render(args.pyroscope, args.query, args.start, args.until), args.pyroscope))


def run(args: argparse.Namespace) -> int:
    """Load FILE; export, print the summary, or open the flame graph screen."""
    from gpulens.analysis.flame.group import parse_choice
    from gpulens.analysis.flame.importers import load_group
    from gpulens.analysis.flame.subtree import focus_regex
    from gpulens.commands._args import limits_from_args
    from gpulens.core.errors import ConfigError, ConfigProblem
    from gpulens.sources.flame_export import (
        check_writable,
        export_folded,
        export_pprof,
        export_speedscope,
    )

    if args.top is not None and args.top < 1:
        raise ConfigError(where="--top", expected="1 or more functions", got=args.top, problem=ConfigProblem.OUT_OF_RANGE)
    limits = limits_from_args(args)
    for flag, out in (("--export-folded", args.export_folded), ("--export-speedscope", args.export_speedscope),
                      ("--export-pprof", args.export_pprof)):
        if out:
            check_writable(out, flag)
    group = _pyroscope(args) if args.pyroscope else None
    if group is None:
        if not args.file:
            raise ConfigError("gpulens flame: give a FILE, or --pyroscope URL --query Q", where="FILE",
                              expected="a FILE, or --pyroscope URL --query Q", problem=ConfigProblem.MISSING)
        group = load_group(args.file, args.metric, limits)
    choice = parse_choice(args.profile, len(group))
    profile = group.pick(choice)
    if args.focus is not None:
        profile = focus_regex(profile, args.focus)
    wrote = False
    if args.export_folded:
        print(export_folded(profile, args.export_folded).message(), file=sys.stderr)
        wrote = True
    if args.export_speedscope:
        print(export_speedscope(profile, args.export_speedscope).message(), file=sys.stderr)
        wrote = True
    if args.export_pprof:
        print(export_pprof(profile, args.export_pprof).message(), file=sys.stderr)
        wrote = True
    if args.json or args.top is not None:
        doc = summary(profile, args.top)
        if len(group) > 1:
            doc["profiles"] = list(group.names)
            doc["shown"] = group.label(choice)
        if args.json:
            json.dump(doc, sys.stdout, indent=1)
            sys.stdout.write("\n")
        else:
            from gpulens.analysis.flame.labels import format_value
            from gpulens.analysis.flame.units import count_suffix
            from gpulens.core.sanitize import clean_text

            print(clean_text(f"{profile.title}  total {format_value(profile.total, profile.unit)}"
                             f"{count_suffix(profile.total, profile.unit)}"))  # a file's names and event
            print(f"{'self':>12} {'total':>12}  function")
            for row in doc["frames"]:  # type: ignore[attr-defined]
                print(f"{format_value(row['self'], profile.unit):>12} {format_value(row['total'], profile.unit):>12}  {row['name']}")
        return 0
    if wrote:
        return 0
    from gpulens.tui.screens.flame import run_flame_app

    return run_flame_app(profile, group=group if args.focus is None else None, choice=choice)
