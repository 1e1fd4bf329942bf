"""The ``gpulens`` command line.

Each sub-command lives in its own module ``gpulens.commands.<name>`` exposing
``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
Modules import only light things at top level; heavy imports (textual,
pynvml, torch) happen inside ``run`` so ``gpulens sample`` stays fast.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import io
import logging
import os
import select
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NoReturn, TextIO, cast

from gpulens import __version__

if TYPE_CHECKING:
    from gpulens.core.errors import ConfigProblem
    from gpulens.core.safefs import UnsafePath

COMMANDS: tuple[str, ...] = (
    "sample",
    "jobs",
    "agent",
    "snapshot",
    "trace",
    "analyze",
    "flame",
    "profile",
    "gpumem",
)


PRUNING_COMMANDS: tuple[str | None, ...] = (None, "trace", "profile")
"""The commands that fill the caches prune them at start (None: the TUI). The others start no thread:
``analyze`` forks workers only from a single-threaded process."""


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"gpulens.commands.{name}")
    except ModuleNotFoundError as err:
        if err.name == f"gpulens.commands.{name}":
            return None
        raise


def build_parser() -> argparse.ArgumentParser:
    """The full parser: TUI options at top level, one sub-parser per command."""
    from gpulens.commands import tui as cmd_tui
    parser = _Parser(
        prog="gpulens",
        description="A terminal UI for the performance of GPU machines. "
        "With no command, opens the TUI on this machine.",
        epilog="Options of a command go after its name (gpulens sample --help). Exit status: 0 success, "
        "1 I/O or internal error, 2 bad arguments or configuration, 130 Ctrl-C, 143 SIGTERM.",
    )
    parser.add_argument("-V", "--version", action="version", version=f"gpulens {__version__}")
    parser.add_argument(
        "--config", metavar="FILE", help="config file (default $XDG_CONFIG_HOME/gpulens/config.toml)"
    )
    _add_log_flags(parser, argparse.SUPPRESS)
    _add_completion(parser)
    cmd_tui.add_arguments(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name in COMMANDS:
        module = _load(name)
        if module is None:
            continue
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        cmd.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        _add_log_flags(cmd, argparse.SUPPRESS, hidden=True)
        module.add_arguments(cmd)
        cmd.set_defaults(_module=module, _parser=cmd)
    return parser


def _add_log_flags(parser: argparse.ArgumentParser, default: object, hidden: bool = False) -> None:
    """``--log-file`` and ``--debug``, accepted before or after the command."""
    parser.add_argument(
        "--log-file", metavar="FILE", default=default,
        help=argparse.SUPPRESS if hidden else "append warnings (and --debug messages) to FILE",
    )
    parser.add_argument(
        "--debug", action="store_true", default=default,
        help=argparse.SUPPRESS if hidden else "log debug messages too (to --log-file, else "
        "$XDG_STATE_HOME/gpulens/gpulens.log) and show tracebacks of internal errors",
    )


def _add_completion(parser: argparse.ArgumentParser) -> None:
    """``--print-completion bash|zsh|tcsh``: a completion script made from this parser (shtab)."""
    try:
        import shtab
    except ImportError:  # pragma: no cover - shtab is a dependency; a broken install still runs
        return
    shtab.add_argument_to(parser, ["--print-completion"], help="print a shell completion script and exit "
                          "(e.g. gpulens --print-completion bash > ~/.local/share/bash-completion/completions/gpulens)")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code.

    Every failure ends as one line on stderr: ``gpulens: <what>: <why>``.
    Exit codes: 2 bad usage or configuration (and every GpulensError), 1 an
    I/O or unexpected error, 130 Ctrl-C, 143 SIGTERM; a reader that closed
    our stdout (``| head -1``) ends the command quietly with 0.
    """
    parser = build_parser()
    try:
        args = _parse(parser, argv)
    except BrokenPipeError as err:  # --print-completion | head
        return _report_other(err)
    module = getattr(args, "_module", None)
    on_term = module is not None and threading.current_thread() is threading.main_thread()
    if on_term and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        # Unwind like Ctrl-C so finally blocks stop children and remove temp files.
        signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _run(args, module)
    finally:
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _run(args: argparse.Namespace, module: ModuleType | None) -> int:
    from gpulens.commands._args import flags_of
    from gpulens.core.config import ConfigFlags, load_config
    from gpulens.errors import report

    if sys.stdout is None:  # started with fd 1 closed (``>&-``): writing must fail with one line
        sys.stdout = cast(TextIO, _ClosedStdout())
    try:
        _start_logging(args)
        args.cfg = load_config(args.config, flags_of(ConfigFlags, args))
        _warn_config(args.cfg.warnings)
        if getattr(args, "command", None) in PRUNING_COMMANDS:
            _housekeeping(args.cfg)
        if module is None:
            from gpulens.commands import tui as cmd_tui
            return cmd_tui.run(args)
        result: int = module.run(args)
        if sys.stdout is not None:
            sys.stdout.flush()  # a closed pipe must fail here, not in the interpreter's exit
        return result
    except KeyboardInterrupt:
        return 130
    except _Terminated:
        return 143
    except Exception as err:  # the command line's top: every error ends as one line and an exit code
        logging.getLogger("gpulens.cli").debug("the command failed", exc_info=err)  # the traceback, in --debug's log
        code = report(err)
        if code is not None:
            return code
        return _report_other(err)


def _start_logging(args: argparse.Namespace) -> None:
    from gpulens.core import logbook

    debug = bool(getattr(args, "debug", False))
    if debug:
        os.environ["GPULENS_DEBUG"] = "1"  # tracebacks of internal errors, for this process and children
    log_file = getattr(args, "log_file", None)
    from gpulens.core.errors import ConfigError, ConfigProblem
    from gpulens.core.safefs import UnsafePath

    if log_file is not None and not str(log_file).strip():
        raise ConfigError(where="--log-file", expected="a file name", got=log_file, problem=ConfigProblem.MISSING,
                          detail="expected a file name, got an empty string")
    try:
        logbook.install(Path(log_file) if log_file else None, debug=debug)
    except UnsafePath as err:  # another user's file, a FIFO, a link, an open directory: refused
        where = f"--log-file {log_file}" if log_file else "--debug log"
        raise ConfigError(where=where, problem=_refused_log(err), detail=f"cannot open: {err}") from err
    except OSError as err:
        where = f"--log-file {log_file}" if log_file else f"--debug log {err.filename}"
        raise ConfigError(where=where, problem=ConfigProblem.UNAVAILABLE, detail=f"cannot open: {err.strerror}") from err


def _refused_log(err: UnsafePath) -> ConfigProblem:
    """Why safefs refused the log file: the reason the ConfigError carries.

    UNSAFE for a path refused as it is (a link, a FIFO, another user's file, a file where a
    directory goes), UNAVAILABLE where opening it failed (a missing directory, permission denied).
    """
    from gpulens.core.errors import ConfigProblem
    from gpulens.core.safefs import PathProblem

    if err.problem in (PathProblem.MISSING, PathProblem.CANNOT_OPEN):
        return ConfigProblem.UNAVAILABLE
    return ConfigProblem.UNSAFE


def _warn_config(warnings: tuple[str, ...]) -> None:
    """Unknown config keys: one line each on stderr (before a TUI takes the screen) and in the log."""
    import logging

    for line in warnings:
        print(f"gpulens: warning: {line}", file=sys.stderr)
        logging.getLogger("gpulens.config").warning("%s", line)


def _housekeeping(cfg: object) -> None:
    """Prune old traces and downloads in the background ([cache] in config.toml)."""
    from gpulens.housekeeping import start_pruning

    start_pruning(cfg)


class _ClosedStdout(io.TextIOBase):
    """Stands in for a closed stdout: writes raise EBADF, reported as one line."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread (a BaseException, as KeyboardInterrupt is)."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated()


def _stdout_closed() -> bool:
    """True when stdout is a pipe whose reader has gone (poll reports POLLERR)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def _report_other(err: Exception) -> int:
    """One line for an error that is not a GpulensError; exit code 1 (0: stdout closed)."""
    if isinstance(err, BrokenPipeError) and _stdout_closed():
        # The reader stopped reading (``| head``): not an error. Point stdout at
        # /dev/null so the interpreter's final flush does not complain.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
    if os.environ.get("GPULENS_DEBUG"):
        traceback.print_exception(err)
    if isinstance(err, OSError) and err.strerror:
        where = f"{err.filename}" if err.filename is not None else "I/O error"
        print(f"gpulens: {where}: {err.strerror}", file=sys.stderr)
    else:
        print(
            f"gpulens: internal error: {type(err).__name__}: {err} (GPULENS_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
    return 1


class _Parser(argparse.ArgumentParser):
    """A bad flag costs one line and a pointer to ``--help`` (argparse printed the whole usage first:
    eleven lines for the TUI's flags before the one that says what is wrong)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\nsee '{self.prog} --help'\n")


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse; a wrong flag is reported by the parser of the command it was given to."""
    args, extra = parser.parse_known_args(argv)
    sub: argparse.ArgumentParser | None = getattr(args, "_parser", None)
    if extra:
        (sub or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if sub is not None:
        _reject_tui_flags(parser, list(sys.argv[1:] if argv is None else argv), args.command)
    return args


def _reject_tui_flags(parser: argparse.ArgumentParser, argv: list[str], command: str) -> None:
    """TUI flags given before a command would be silently ignored: refuse them."""
    from gpulens.commands import tui as cmd_tui
    top = argparse.ArgumentParser(add_help=False)
    top.add_argument("--config")
    cmd_tui.add_arguments(top)
    top.add_argument("rest", nargs=argparse.REMAINDER)
    ns, _ = top.parse_known_args(argv)
    given = [
        a.option_strings[-1]
        for a in top._actions
        if a.option_strings and a.dest != "config" and getattr(ns, a.dest, a.default) != a.default
    ]
    if given:
        parser.error(
            f"{', '.join(given)} before '{command}' would be ignored: those are options of the TUI "
            f"(gpulens with no command); put a command's options after its name (gpulens {command} --help)"
        )


if __name__ == "__main__":
    sys.exit(main())
