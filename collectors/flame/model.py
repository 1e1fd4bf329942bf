"""The call tree: a frozen :class:`Profile` built from weighted stacks.

Nodes live in flat arrays in pre-order (children sorted by frame text), so a
node's subtree is the contiguous range ``[i, end[i])`` and every query
(search, focus, sandwich, function table; see :mod:`.query`) walks ranges
instead of rebuilding the tree. Node 0 is the root (frame -1, "all").
Frames are interned: ``node_frame[i]`` indexes ``frames``.

Values are float64 (exact for integer counts below 2**53) in the profile's
``unit``: ``samples``, ``seconds`` or ``bytes``.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from operator import sub
from typing import Any

from .build import SEP, build_arrays
from .errors import FlameError
from .labels import FrameInfo, parse_frame

UNITS = ("samples", "seconds", "bytes")
INF = float("inf")


@dataclass(frozen=True, slots=True, eq=False)
class Profile:
    """An immutable call tree with self and total value per node.

    ``node_end[i]`` is one past the last node of ``i``'s subtree;
    ``node_total[i]`` = ``node_self[i]`` + the totals of its children.
    """

    unit: str
    frames: tuple[str, ...]
    node_frame: array[int]
    node_parent: array[int]
    node_depth: array[int]
    node_end: array[int]
    node_self: array[float]
    node_total: array[float]
    title: str = ""
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_nodes(self) -> int:
        return len(self.node_frame)

    @property
    def total(self) -> float:
        """The root's total: every sample (or second, or byte) in the profile."""
        return self.node_total[0]

    @property
    def max_depth(self) -> int:
        cached = self._cache.get("max_depth")
        if cached is None:
            cached = self._cache["max_depth"] = max(self.node_depth)
        return int(cached)

    def children(self, node: int) -> Iterator[int]:
        """The children of ``node`` in display order (jumping over subtrees)."""
        end = self.node_end
        child = node + 1
        stop = end[node]
        while child < stop:
            yield child
            child = end[child]

    def only_child(self, node: int) -> int | None:
        """The single child of ``node`` if it has exactly one and no self value."""
        end = self.node_end
        if end[node] > node + 1 and end[node + 1] == end[node] and self.node_self[node] == 0:
            return node + 1
        return None

    def info(self, frame: int) -> FrameInfo:
        """Parsed name, file, line and label of a frame id (cached)."""
        infos: dict[int, FrameInfo] = self._cache.setdefault("infos", {})
        got = infos.get(frame)
        if got is None:
            got = infos[frame] = (
                parse_frame(self.frames[frame]) if frame >= 0 else parse_frame("all")
            )
        return got

    def node_info(self, node: int) -> FrameInfo:
        return self.info(self.node_frame[node])

    def label(self, node: int) -> str:
        return "all" if node == 0 else self.node_info(node).label

    def ancestors(self, node: int) -> list[int]:
        """Nodes from the root down to ``node`` (inclusive)."""
        out = []
        parent = self.node_parent
        while node >= 0:
            out.append(node)
            node = parent[node]
        out.reverse()
        return out

    def stacks(self) -> Iterator[tuple[list[str], float]]:
        """Every node with a self value as (frame texts root..leaf, self value)."""
        path: list[str] = []
        frames, fr, depth, selfv = self.frames, self.node_frame, self.node_depth, self.node_self
        for i in range(1, self.n_nodes):
            d = depth[i]
            del path[d - 1 :]
            path.append(frames[fr[i]])
            if selfv[i]:
                yield list(path), selfv[i]


def _check_unit(unit: str) -> None:
    if unit not in UNITS:
        raise FlameError(f"unknown profile unit {unit!r}; expected one of {', '.join(UNITS)}")


def build_profile(stacks: Mapping[bytes, float], unit: str, title: str = "") -> Profile:
    """Build a :class:`Profile` from stack keys (UTF-8 frames joined by NUL) -> weight.

    Sorting the keys makes stacks that share a prefix adjacent, so the tree
    is laid down in pre-order in one pass (see :mod:`.build`).
    Zero weights are dropped; negative weights raise :class:`FlameError`.
    """
    _check_unit(unit)
    integral = True
    for key, w in stacks.items():
        if not 0 <= w < INF:  # also catches NaN
            raise FlameError(f"negative or non-finite weight {w} for stack {key[:80]!r}")
        if integral and type(w) is not int and w != int(w):
            integral = False
    keys = sorted(k for k, w in stacks.items() if w)
    root_self = 0.0
    if keys and not keys[0]:
        root_self = stacks[keys.pop(0)]
    frame_ids, node_frame, node_parent, node_depth, node_end, node_self = build_arrays(
        keys, list(map(stacks.__getitem__, keys))
    )
    node_self[0] = root_self
    n_nodes = len(node_frame)
    if integral:
        # Totals from prefix sums (exact for integers): the subtree is [i, end[i]).
        cum = array("d", [0.0])
        cum.extend(accumulate(node_self))
        node_total = array("d", map(sub, map(cum.__getitem__, node_end), cum))
    else:
        node_total = array("d", node_self)
        for i in range(n_nodes - 1, 0, -1):
            node_total[node_parent[i]] += node_total[i]
    frames = tuple(f.decode("utf-8", "replace") for f in frame_ids)
    return Profile(unit, frames, node_frame, node_parent, node_depth, node_end, node_self, node_total, title)


def stack_key(frames: Sequence[str]) -> bytes:
    """The key :func:`build_profile` expects for a stack of frame texts (root first)."""
    return SEP.join(f.replace("\x00", "\\0").encode("utf-8", "replace") for f in frames)


def build_from_stacks(
    stacks: Iterable[tuple[Sequence[str], float]], unit: str, title: str = ""
) -> Profile:
    """Build a profile from (frame texts root..leaf, weight) pairs; repeats add up."""
    merged: dict[bytes, float] = {}
    for frames, weight in stacks:
        key = stack_key(frames)
        merged[key] = merged.get(key, 0.0) + weight
    return build_profile(merged, unit, title)


def subtree_stacks(profile: Profile, root: int) -> Iterator[tuple[list[str], float]]:
    """Stacks of ``root``'s subtree, with paths starting at ``root``'s frame."""
    frames, fr, depth, selfv = profile.frames, profile.node_frame, profile.node_depth, profile.node_self
    base = depth[root]
    path: list[str] = []
    for i in range(root, profile.node_end[root]):
        d = depth[i] - base
        del path[d:]
        path.append(frames[fr[i]] if fr[i] >= 0 else "all")
        if selfv[i]:
            yield list(path), selfv[i]
