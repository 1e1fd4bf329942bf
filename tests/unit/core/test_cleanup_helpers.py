"""The two helpers that replaced blind excepts: ``closed_on_error`` (cleanup) and ``call_isolated`` (plug-ins)."""

from __future__ import annotations

import logging
import os

import pytest

from gpulens.core.logbook import call_isolated
from gpulens.core.safefs import closed_on_error


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_closed_on_error_keeps_the_fd_when_the_block_ends() -> None:
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        with closed_on_error(fd) as got:
            assert got == fd
        assert _is_open(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("exc", [ValueError("bad"), KeyboardInterrupt()])
def test_closed_on_error_closes_the_fd_and_reraises_anything(exc: BaseException) -> None:
    fd = os.open(os.devnull, os.O_RDONLY)
    with pytest.raises(type(exc)), closed_on_error(fd):
        raise exc
    assert not _is_open(fd)


def test_call_isolated_returns_the_result_or_logs_the_failure(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("gpulens.test.isolated")
    assert call_isolated(log, "adder", lambda a, b: a + b, 2, b=3) == 5

    def broken(_x: int) -> int:
        raise RuntimeError("listener bug")

    with caplog.at_level(logging.ERROR, logger="gpulens.test.isolated"):
        assert call_isolated(log, "poll listener", broken, 1) is None
    [record] = [r for r in caplog.records if r.name == "gpulens.test.isolated"]
    assert record.getMessage() == "poll listener failed"
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
