"""Lay sorted stack keys down as a pre-order call tree, mostly in C-level passes.

A key is a stack's frames (UTF-8) joined by NUL. Sorted keys put stacks
that share a prefix next to each other, so each stack adds one chain of
new nodes below the deepest frame it shares with the previous stack. The
shared length of two neighbours is the first differing byte, found with a
big-integer XOR; every per-stack step that can run as ``map`` over all
stacks does, so the Python loop left is a few operations per stack.
"""

from __future__ import annotations

import gc
from array import array
from collections.abc import Iterator, Sequence
from itertools import accumulate, chain, repeat
from operator import add, floordiv, getitem, sub, xor
from typing import Literal

SEP = b"\x00"


class Interner(dict[bytes, int]):
    """Frame text -> id; a new frame gets the next id on first lookup."""

    def __missing__(self, key: bytes) -> int:
        value = self[key] = len(self)
        return value


def _shared(keys: Sequence[bytes], lens: list[int]) -> tuple[list[int], list[int]]:
    """For each key: frames shared with the previous key, and where its new part starts."""
    if len(keys) < 2:
        return [0] * len(keys), [0] * len(keys)
    prev, nxt = keys[:-1], keys[1:]
    widths = list(map(max, lens[:-1], lens[1:]))
    pad = repeat(b"\xff")
    big: Iterator[Literal["big"]] = repeat("big")
    a = map(int.from_bytes, map(bytes.ljust, prev, widths, pad), big)
    b = map(int.from_bytes, map(bytes.ljust, nxt, widths, pad), big)
    nbytes = map(floordiv, map(add, map(int.bit_length, map(xor, a, b)), repeat(7)), repeat(8))
    # First differing byte; a key never sorts after a longer key it prefixes.
    mismatch = list(map(min, map(sub, widths, nbytes), lens[:-1]))
    n_shared = [0, *map(bytes.count, nxt, repeat(SEP), repeat(0), mismatch)]
    offsets = [0, *map(add, map(bytes.rfind, nxt, repeat(SEP), repeat(0), mismatch), repeat(1))]
    # The previous stack is a whole-frame prefix of this one: one more shared frame.
    for i, (m, lp) in enumerate(zip(mismatch, lens, strict=False), 1):
        if m == lp and keys[i][m] == 0:
            n_shared[i] += 1
            offsets[i] = m + 1
    return n_shared, offsets


def build_arrays(
    keys: Sequence[bytes], weights: Sequence[float]
) -> tuple[Interner, array[int], array[int], array[int], array[int], array[float]]:
    """Pre-order arrays for sorted, distinct, non-empty keys with their self weights.

    Returns (frame ids, node_frame, node_parent, node_depth, node_end,
    node_self); node 0 is the root.
    """
    # Hundreds of thousands of new lists and bytes would trigger the cyclic
    # GC over and over; none of them can form cycles.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _build(keys, weights)
    finally:
        if was_enabled:
            gc.enable()


def _build(
    keys: Sequence[bytes], weights: Sequence[float]
) -> tuple[Interner, array[int], array[int], array[int], array[int], array[float]]:
    frame_ids = Interner()
    lens = list(map(len, keys))
    n_shared, offsets = _shared(keys, lens)
    ks = list(map(sub, map(bytes.count, keys, repeat(SEP)), map(add, n_shared, repeat(-1))))
    firsts = list(accumulate(ks, initial=1))
    n_nodes = firsts[-1]
    # The new part of each key, split and interned lazily: no list of lists kept.
    slices = map(slice, offsets, repeat(None))
    tails: Iterator[bytes] = map(getitem, keys, slices)  # type: ignore[arg-type]  # overloaded getitem
    node_frame = array("i", [-1])
    node_frame.extend(map(frame_ids.__getitem__, chain.from_iterable(map(bytes.split, tails, repeat(SEP)))))
    if len(node_frame) != n_nodes:
        raise AssertionError("frame count mismatch while building the call tree")
    starts = list(map(add, n_shared, repeat(1)))
    node_depth = array("i", [0])
    node_depth.extend(chain.from_iterable(map(range, starts, map(add, starts, ks))))
    node_parent = array("i", range(-1, n_nodes - 1))  # inside a chain the parent is the previous node
    node_end = array("i", bytes(4 * n_nodes))
    node_self = array("d", bytes(8 * n_nodes))
    path = [0]  # node ids on the current root-to-leaf path, by depth
    for first, shared, k, w in zip(firsts, n_shared, ks, weights, strict=False):
        for closed in path[shared + 1 :]:
            node_end[closed] = first
        del path[shared + 1 :]
        node_parent[first] = path[shared]
        path.extend(range(first, first + k))
        node_self[first + k - 1] = w
    for closed in path:
        node_end[closed] = n_nodes
    return frame_ids, node_frame, node_parent, node_depth, node_end, node_self
