"""A folded file with a malformed line leaves nothing of itself behind once parsed (review of issue #33)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator

import pytest

from gpulens.analysis.flame.folded import parse_folded

MIB = 1 << 20


@pytest.fixture
def no_collector() -> Iterator[None]:
    """The garbage collector off: what a reference cycle holds stays held, as between two collections."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_a_skipped_line_does_not_keep_the_lines_read(no_collector: None) -> None:
    lines = b"".join(b"main;work;step_%d %d\n" % (k % 997, k % 7 + 1) for k in range(300_000))
    data = lines + b"this line has no count\n"
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        profile = parse_folded(data, source="big.folded")
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert "1 malformed line(s) skipped" in profile.title  # the line was skipped and said
    # The profile itself is small (997 stacks); the 300,000 split lines (over 20 MiB) must be gone.
    assert held < 8 * MIB, f"{held / MIB:.1f} MiB still held after parsing"
