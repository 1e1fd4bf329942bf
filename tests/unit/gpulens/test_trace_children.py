"""Issue 32 item 1: ``--children`` picks every rank, leaves the launcher out, and warns when ranks are missing."""

from __future__ import annotations

from gpulens.commands.trace_children import Ranks, expected_ranks, ranks_of, wait_for_ranks

TORCHRUN = 100
# torchrun (100, polls: it inherits KINETO_USE_DAEMON=1) -> ranks 101..104; a rank's own helper 105 (no poll).
POLLING = {TORCHRUN: (1, 50), 101: (1, 50, 100), 102: (1, 50, 100), 103: (1, 50, 100), 104: (1, 50, 100)}


def test_the_ranks_are_the_leaves_and_the_launcher_is_left_out() -> None:
    assert ranks_of(TORCHRUN, POLLING) == (101, 102, 103, 104)
    # A wrapper shell between torchrun and python that polls too is a launcher as well.
    wrapped = {TORCHRUN: (1,), 200: (1, 100), 201: (1, 100, 200), 202: (1, 100, 200)}
    assert ranks_of(TORCHRUN, wrapped) == (201, 202)
    assert ranks_of(101, POLLING) == (101,)  # a parent with no polling descendant stands for itself
    assert ranks_of(999, POLLING) == ()


def test_the_launchers_count_from_its_command_line() -> None:
    assert expected_ranks(b"torchrun\0--nproc-per-node=4\0train.py\0") == 4
    assert expected_ranks(b"python\0-m\0torch.distributed.run\0--nproc_per_node\x008\0t.py\0") == 8
    assert expected_ranks(b"python\0train.py\0--nproc-per-node-ish=3\0") is None
    assert Ranks(1, (2, 3, 4), 4).warning() == (
        "warning: 3 of 4 ranks of process 1 poll the Kineto endpoint (its --nproc-per-node is 4); tracing those: "
        "the others are missing from the window")
    assert Ranks(1, (2, 3, 4, 5), 4).warning() is None and Ranks(1, (2,), None).warning() is None


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_it_waits_for_every_rank_the_launcher_starts() -> None:
    """Ranks start polling seconds apart: the first to poll is not the set (it traced 2 of 4)."""
    clock = Clock()

    def polling() -> dict[int, tuple[int, ...]]:
        started = 1 + int(clock.t // 2)  # one more rank polls every 2 s
        return {TORCHRUN: (1,), **{100 + r: (1, TORCHRUN) for r in range(1, min(started, 4) + 1)}}

    (got,) = wait_for_ranks([TORCHRUN], polling, 30.0, cmdline=lambda pid: b"torchrun\0--nproc-per-node=4\0",
                            clock=clock, sleep=clock.sleep)
    assert got.pids == (101, 102, 103, 104) and got.warning() is None
    assert 6.0 <= clock.t < 7.0  # the fourth rank polled at 6 s: taken at once


def test_without_a_count_it_takes_a_settled_set_and_at_the_deadline_warns() -> None:
    clock = Clock()
    steady = {TORCHRUN: (1,), 101: (1, TORCHRUN), 102: (1, TORCHRUN)}
    (got,) = wait_for_ranks([TORCHRUN], lambda: steady, 30.0, cmdline=lambda pid: b"python\0launch.py\0",
                            clock=clock, sleep=clock.sleep)
    assert got.pids == (101, 102) and 3.0 <= clock.t < 3.5  # unchanged for SETTLE_S
    clock = Clock()
    (short,) = wait_for_ranks([TORCHRUN], lambda: steady, 30.0, cmdline=lambda pid: b"torchrun\0--nproc-per-node=4\0",
                              clock=clock, sleep=clock.sleep)
    assert short.pids == (101, 102) and short.expected == 4 and "2 of 4 ranks" in (short.warning() or "")
    assert clock.t >= 30.0  # the launcher said 4: waited for them to the deadline
