"""Untraceable: the reason a process cannot be traced is a value; these pin the sentences people (and the
wire's ``trace_diagnose`` answers) read, word for word, as they were when the reasons were strings."""

from __future__ import annotations

from gpulens.core.reasons import rendered
from gpulens.ipc.kineto.untraceable import Untraceable, UntraceableKind, descendants_poll


def test_descendants_are_named_then_counted() -> None:
    why = descendants_poll(10, list(range(100, 120)))
    assert why.kind is UntraceableKind.DESCENDANTS_POLL and why.pids == tuple(range(100, 116)) and why.more == 4
    shown = ",".join(map(str, range(100, 116)))
    assert str(why) == (
        f"process 10 polls nothing itself, but its descendants do: {shown} (and 4 more); trace those "
        f"(gpulens trace --pid {shown}, or --pid 10 --children)"
    )


def test_socket_dir_sentences() -> None:
    mismatch = Untraceable(UntraceableKind.SOCKET_DIR_MISMATCH, 5, theirs="/run/k", serving=None)
    assert str(mismatch) == (
        "socket-dir mismatch: it talks to /run/k/dynolog but gpulens serves abstract \\0dynolog\\0: "
        "start gpulens with --ipc-socket-dir /run/k"
    )
    back = Untraceable(UntraceableKind.SOCKET_DIR_MISMATCH, 5, theirs=None, serving="/run/k")
    assert str(back).endswith("start gpulens without --ipc-socket-dir / KINETO_IPC_SOCKET_DIR")
    closed = Untraceable(UntraceableKind.SOCKET_DIR_CLOSED, 5, uid=1001, serving="/run/k", mode=0o755)
    assert closed.render() == (
        "the socket dir /run/k has mode 0755: programs of uid 1001 cannot create their client sockets there, "
        "so they never poll: chmod 1733 /run/k"
    )


def test_rendered_keeps_none_and_ranks_a_launchers_reason_low() -> None:
    assert rendered(None) is None
    assert rendered(Untraceable(UntraceableKind.GONE, 7)) == "process 7 is gone"
    assert Untraceable(UntraceableKind.NO_TORCH).ranks_low and Untraceable(UntraceableKind.GONE).ranks_low
    assert not Untraceable(UntraceableKind.NO_DAEMON_ENV).ranks_low
    assert not Untraceable(UntraceableKind.NOT_POLLED_YET).ranks_low
