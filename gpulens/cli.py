"""The ``gpulens`` command line.

Each sub-command lives in its own module ``gpulens.cmd_<name>`` exposing
``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
Modules import only light things at top level; heavy imports (textual,
pynvml, torch) happen inside ``run`` so ``gpulens sample`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from . import __version__

COMMANDS: tuple[str, ...] = (
    "sample",
    "jobs",
    "agent",
    "snapshot",
    "trace",
    "analyze",
    "flame",
    "profile",
)


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"gpulens.cmd_{name}")
    except ModuleNotFoundError as err:
        if err.name == f"gpulens.cmd_{name}":
            return None
        raise


def build_parser() -> argparse.ArgumentParser:
    """The full parser: TUI options at top level, one sub-parser per command."""
    from . import cmd_tui

    parser = argparse.ArgumentParser(
        prog="gpulens",
        description="A terminal UI for the performance of GPU machines. "
        "With no command, opens the TUI on this machine.",
    )
    parser.add_argument("--version", action="version", version=f"gpulens {__version__}")
    parser.add_argument(
        "--config", metavar="FILE", help="config file (default $XDG_CONFIG_HOME/gpulens/config.toml)"
    )
    cmd_tui.add_arguments(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name in COMMANDS:
        module = _load(name)
        if module is None:
            continue
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        cmd.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        module.add_arguments(cmd)
        cmd.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    from .config import load_config
    from .errors import report

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.cfg = load_config(args.config, args)
        module = getattr(args, "_module", None)
        if module is None:
            from . import cmd_tui

            return cmd_tui.run(args)
        result: int = module.run(args)
        return result
    except KeyboardInterrupt:
        return 130
    except Exception as err:
        code = report(err)
        if code is None:
            raise
        return code


if __name__ == "__main__":
    sys.exit(main())
