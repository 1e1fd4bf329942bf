"""Lay sorted stack keys down as a pre-order call tree, mostly in C-level passes.

A key is a stack's frames (UTF-8) joined by NUL. Sorted keys put stacks
that share a prefix next to each other, so each stack adds one chain of
new nodes below the deepest frame it shares with the previous stack. The
shared length of two neighbours is the first differing byte, found with a
big-integer XOR; every per-stack step that can run as ``map`` over all
stacks does, so the Python loops left are a few operations per stack.

Only the shape (``node_end``, ``node_self``) is laid down eagerly: that is
all a first frame needs. Frame ids, parents, depths and totals are derived
from the kept :class:`Skeleton` on first use (see :mod:`.model`).
"""

from __future__ import annotations

import gc
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate, chain, compress, repeat
from operator import add, and_, getitem, neg, rshift, sub, xor
from typing import Literal

SEP = b"\x00"
_CHUNK = 4096  # stacks per C-level pass where a whole pass would hold the GIL or memory
_NO_DIFF = (1 << 62) - 1


class Interner(dict[bytes, int]):
    """Frame text -> id; a new frame gets the next id on first lookup."""

    def __missing__(self, key: bytes) -> int:
        value = self[key] = len(self)
        return value


class Skeleton:
    """A call tree's shape and what is needed to derive the rest lazily.

    Stack ``s`` (``keys[s]``) shares ``n_shared[s]`` frames with stack
    ``s - 1``; its new frames start at byte ``offsets[s]`` (found on first
    use) and become nodes ``firsts[s] .. firsts[s + 1] - 1`` (a chain; the
    last one holds the stack's weight). ``firsts[-1]`` is the node count.
    """

    __slots__ = ("_cum", "_new_frames", "_offsets", "firsts", "keys", "n_shared", "node_end", "node_self")

    def __init__(
        self,
        keys: tuple[bytes, ...],
        offsets: _Offsets,
        n_shared: array[int],
        firsts: array[int],
        node_end: array[int],
        node_self: array[float],
        cum: array[float],
    ) -> None:
        self.keys: tuple[bytes, ...] | None = keys
        self._offsets = offsets
        self.n_shared = n_shared
        self.firsts = firsts
        self.node_end = node_end
        self.node_self = node_self
        self._cum = cum
        self._new_frames: dict[int, list[bytes]] = {}

    @property
    def n_nodes(self) -> int:
        return self.firsts[-1]

    @property
    def offsets(self) -> list[int]:
        """Byte offset of each key's first new frame."""
        return self._offsets.get()

    def frame_of(self, node: int) -> bytes | None:
        """The frame text of one node (node >= 1) without interning every frame.

        None once the keys are released (every frame is interned by then).
        """
        keys = self.keys
        if keys is None:
            return None
        s = bisect_right(self.firsts, node) - 1
        # A layout reads a chain's frames one row at a time: split each stack once.
        frames = self._new_frames.get(s)
        if frames is None:
            frames = self._new_frames[s] = keys[s][self._offsets.one(s) :].split(SEP)
        return frames[node - self.firsts[s]]

    def total_of(self, node: int) -> float:
        """Self plus the stack weights below ``node``, from per-stack prefix sums.

        Exact for integer weights below 2**53 (the only case it is used for).
        """
        cum = self._cum  # weights of stacks 0 .. s-1; stack s's weight is on its last node
        if node == 0:
            return self.node_self[0] + cum[-1]
        firsts = self.firsts
        return cum[bisect_left(firsts, self.node_end[node])] - cum[bisect_right(firsts, node) - 1]

    def child_totals(self, node: int) -> Iterator[tuple[int, float]]:
        """(child, total) for each child of ``node``: one bisect per child.

        A child's subtree ends where the next sibling's stack begins, so the
        stack range of each child starts where the previous one ended.
        """
        end, firsts, cum = self.node_end, self.firsts, self._cum
        child = node + 1
        stop = end[node]
        if child >= stop:
            return
        s = bisect_right(firsts, child) - 1
        while child < stop:
            nxt = end[child]
            t = bisect_left(firsts, nxt, s)
            yield child, cum[t] - cum[s]
            s, child = t, nxt

    def node_frames(self) -> tuple[Interner, array[int]]:
        """Intern every node's frame: (frame ids in pre-order of first use, node_frame)."""
        keys = self.keys
        if keys is None:
            raise RuntimeError("stack keys already released")
        frame_ids = Interner()
        node_frame = array("i", [-1])
        intern = frame_ids.__getitem__
        with no_gc():
            # In chunks: a worker thread warming this must let the UI thread run in between.
            for lo in range(0, len(keys), _CHUNK):
                hi = lo + _CHUNK
                tails: Iterator[bytes] = map(getitem, keys[lo:hi], map(slice, self.offsets[lo:hi], repeat(None)))  # type: ignore[arg-type]  # overloaded getitem
                node_frame.extend(map(intern, chain.from_iterable(map(bytes.split, tails, repeat(SEP)))))
        if len(node_frame) != self.n_nodes:
            raise AssertionError("frame count mismatch while building the call tree")
        return frame_ids, node_frame

    def release_keys(self) -> None:
        """Drop the stack keys once every frame is interned (they hold the input's text)."""
        self.keys = None
        self._new_frames = {}

    def node_depths(self) -> array[int]:
        """Depth of every node (root 0)."""
        starts = list(map(add, self.n_shared, repeat(1)))
        ks = list(map(sub, self.firsts[1:], self.firsts[:-1]))
        node_depth = array("i", [0])
        node_depth.extend(chain.from_iterable(map(range, starts, map(add, starts, ks))))
        return node_depth

    def node_parents(self) -> array[int]:
        """Parent of every node (root -1): inside a chain, the previous node."""
        firsts = self.firsts
        n_nodes = firsts[-1]
        node_parent = array("i", range(-1, n_nodes - 1))
        depth_max = max(map(add, self.n_shared, map(sub, firsts[1:], firsts[:-1])), default=0)
        path = array("i", [0]) * (depth_max + 1)  # node ids on the current root-to-leaf path
        for first, shared, nxt in zip(firsts, self.n_shared, firsts[1:], strict=False):
            node_parent[first] = path[shared]
            path[shared + 1 : shared + 1 + nxt - first] = array("i", range(first, nxt))
        return node_parent


class no_gc:  # used like a function: ``with no_gc():``
    """Pause the cyclic GC: hundreds of thousands of new tuples, lists and bytes
    would trigger it over and over, and none of them can form cycles."""

    def __enter__(self) -> None:
        self.was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.was_enabled:
            gc.enable()


def _shared(keys: Sequence[bytes], lens: list[int]) -> tuple[list[int], list[int], list[int]]:
    """For each key: frames shared with the previous key and the first byte where they differ.

    Also returns the stacks whose previous stack is a whole-frame prefix of
    them (one more shared frame than the NULs before the mismatch count).
    """
    if len(keys) < 2:
        return [0] * len(keys), [0] * len(keys), []
    prev_lens = lens[:-1]
    little: Iterator[Literal["little"]] = repeat("little")
    mismatch = [0]
    # In chunks: the big integers are as large as the keys, so a whole list of them
    # would add the input's size again to the peak memory.
    for lo in range(0, len(keys) - 1, _CHUNK):
        hi = min(lo + _CHUNK, len(keys) - 1)
        # Little-endian, so the first differing byte is the lowest set bit of the XOR
        # (bytes past a key's end read as zero; no alignment needed).
        ints = list(map(int.from_bytes, keys[lo : hi + 1], little))
        diff = list(map(xor, ints[:-1], ints[1:]))
        lowest = map(int.bit_length, map(and_, diff, map(neg, diff)))  # x & -x keeps the lowest set bit
        # An XOR of 0 (the next key is the previous plus NULs) wraps to a huge index.
        first_diff = map(rshift, map(and_, map(add, lowest, repeat(-1)), repeat(_NO_DIFF)), repeat(3))
        # min(): past the previous key's end means it is a prefix (it never sorts
        # after a longer key it prefixes).
        mismatch.extend(map(min, first_diff, prev_lens[lo:hi]))
    n_shared = list(map(bytes.count, keys, repeat(SEP), repeat(0), mismatch))
    whole = []
    for i in compress(range(1, len(keys)), map(int.__eq__, mismatch[1:], prev_lens)):
        if keys[i][mismatch[i]] == 0:
            n_shared[i] += 1
            whole.append(i)
    return n_shared, mismatch, whole


def lay_out(keys: list[bytes], weights: Sequence[float]) -> Skeleton:
    """The shape of the pre-order tree for sorted, distinct, non-empty keys with their self weights.

    Node 0 is the root; its self weight is left 0 for the caller to set.
    """
    with no_gc():
        lens = list(map(len, keys))
        n_shared, mismatch, whole = _shared(keys, lens)
        # New frames: the one the mismatch falls in, and one per NUL after it.
        ks = list(map(add, map(bytes.count, keys, repeat(SEP), mismatch), repeat(1)))
        for i in whole:
            ks[i] -= 1  # the NUL at the mismatch ends a shared frame
        firsts = list(accumulate(ks, initial=1))
        n_nodes = firsts[-1]
        node_end = array("i", bytes(4 * n_nodes))
        node_self = array("d", bytes(8 * n_nodes))
        node_end[0] = n_nodes
        depth_max = max(map(add, n_shared, ks), default=0)
        # Walk the stacks backwards: nxt[d] is the first node of the nearest later
        # stack that shares fewer than d frames, so it ends every node at depth d.
        nxt = array("i", [n_nodes]) * (depth_max + 2)
        fill = array("i", [0])
        for first, shared, k, w in zip(reversed(firsts[:-1]), reversed(n_shared), reversed(ks), reversed(weights), strict=True):
            node_end[first : first + k] = nxt[shared + 1 : shared + 1 + k]
            fill[0] = first
            nxt[shared + 1 :] = fill * (depth_max + 1 - shared)
            node_self[first + k - 1] = w
    # Arrays and a tuple, not lists: the cyclic GC skips them (a first frame runs a
    # full collection, which would walk every element of a list).
    stacks = tuple(keys)
    offsets = _Offsets(stacks, array("i", mismatch), array("i", whole))
    cum = array("d", accumulate(weights, initial=0.0))
    return Skeleton(stacks, offsets, array("i", n_shared), array("i", firsts), node_end, node_self, cum)


class _Offsets:
    """Where each key's new frames start, found only when first asked for."""

    __slots__ = ("_keys", "_mismatch", "_offsets", "_whole")

    def __init__(self, keys: tuple[bytes, ...], mismatch: array[int], whole: array[int]) -> None:
        self._keys: tuple[bytes, ...] | None = keys
        self._mismatch = mismatch
        self._whole = whole  # sorted
        self._offsets: list[int] | None = None

    def get(self) -> list[int]:
        """Byte offset of each key's first new frame (after the last NUL before the mismatch)."""
        if self._offsets is None:
            keys = self._keys
            if keys is None:
                raise RuntimeError("stack keys already released")
            offsets = list(map(add, map(bytes.rfind, keys, repeat(SEP), repeat(0), self._mismatch), repeat(1)))
            for i in self._whole:
                offsets[i] = self._mismatch[i] + 1
            self._offsets, self._keys = offsets, None
        return self._offsets

    def one(self, s: int) -> int:
        """The offset of key ``s`` alone (what :meth:`get` would say)."""
        keys = self._keys  # read once: a worker may release it meanwhile
        if self._offsets is not None or keys is None:
            return self.get()[s]
        m = self._mismatch[s]
        whole = self._whole
        i = bisect_left(whole, s)
        return m + 1 if i < len(whole) and whole[i] == s else keys[s].rfind(SEP, 0, m) + 1
