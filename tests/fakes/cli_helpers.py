"""``gpulens ARGV`` run in this process, for the tests of its refusals: the ConfigError it ended with.

The command line turns a ConfigError into one line on stderr and exit 2 (gpulens/errors.py). A test of
*why* a command refused compares the error's fields (``where``, ``problem``, ``got``), not the words of that
line; :func:`refusal` checks the line is the error's own and alone, and hands the error back.
"""

from __future__ import annotations

import contextlib
import io
from unittest import mock

import gpulens.errors
from gpulens.cli import main
from gpulens.core.errors import ConfigError


def refusal(*argv: str) -> ConfigError:
    """Run ``gpulens ARGV``; it must exit 2 with one line on stderr, nothing on stdout, for a ConfigError."""
    seen: list[BaseException] = []
    report = gpulens.errors.report

    def keep(err: BaseException) -> int | None:
        seen.append(err)
        return report(err)

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.object(gpulens.errors, "report", keep), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        code = main(list(argv))
    assert code == 2, (argv, code, err.getvalue())
    assert len(seen) == 1 and isinstance(seen[0], ConfigError), seen
    assert out.getvalue() == "", out.getvalue()
    assert err.getvalue() == f"gpulens: configuration error: {seen[0]}\n", err.getvalue()
    return seen[0]
