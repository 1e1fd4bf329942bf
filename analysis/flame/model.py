"""The call tree: a frozen :class:`Profile` built from weighted stacks.

Nodes live in flat arrays in pre-order (children sorted by frame text), so a
node's subtree is the contiguous range ``[i, end[i])`` and every query
(search, focus, sandwich, function table; see :mod:`.query`) walks ranges
instead of rebuilding the tree. Node 0 is the root (frame -1, "all").
Frames are interned: ``node_frame[i]`` indexes ``frames``. A frame's text
loses its terminal control once decoded (a profiled process names its own
functions and files; :func:`~gpulens.core.sanitize.clean_text`).

Values are float64 (exact for integer counts below 2**53) in the profile's
``unit``: ``samples``, ``seconds``, ``bytes`` or ``events:NAME`` (see :mod:`.units`).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from math import isnan
from operator import sub
from threading import RLock
from typing import Any, cast

from gpulens.analysis.flame.build import SEP, Skeleton, lay_out
from gpulens.analysis.flame.errors import FlameError
from gpulens.analysis.flame.labels import FrameInfo, parse_frame
from gpulens.analysis.flame.units import check_unit
from gpulens.core.sanitize import clean_text

INF = float("inf")


@dataclass(frozen=True, slots=True, eq=False)
class Profile:
    """An immutable call tree with self and total value per node.

    ``node_end[i]`` is one past the last node of ``i``'s subtree;
    ``node_total[i]`` = ``node_self[i]`` + the totals of its children.
    ``frames``, ``node_frame``, ``node_parent``, ``node_depth`` and (for
    integer values) ``node_total`` are derived on first use: a first frame
    needs only the shape, :meth:`node_info` and :meth:`total_of`.
    """

    unit: str
    node_end: array[int]
    node_self: array[float]
    _tree: Skeleton = field(repr=False)
    title: str = ""
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _infos: dict[int, FrameInfo] = field(default_factory=dict, repr=False, compare=False)
    _infos_by_text: dict[bytes, FrameInfo] = field(default_factory=dict, repr=False, compare=False)
    _infos_by_node: dict[int, FrameInfo] = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_nodes(self) -> int:
        return len(self.node_end)

    @property
    def total(self) -> float:
        """The root's total: every sample (or second, byte, event) in the profile."""
        return self.total_of(0)

    def total_of(self, node: int) -> float:
        """``node_total[node]``, without deriving every node's total first."""
        totals: array[float] | None = self._cache.get("node_total")
        if totals is not None:
            return totals[node]
        return self._tree.total_of(node)

    def child_totals(self, node: int) -> Iterator[tuple[int, float]]:
        """(child, its total) for the children of ``node``, without deriving every total."""
        totals: array[float] | None = self._cache.get("node_total")
        if totals is None:
            yield from self._tree.child_totals(node)
            return
        end = self.node_end
        child = node + 1
        stop = end[node]
        while child < stop:
            yield child, totals[child]
            child = end[child]

    @property
    def frames(self) -> tuple[str, ...]:
        """Distinct frame texts; ``node_frame[i]`` indexes this tuple."""
        return cast("tuple[str, ...]", self._derived("frames"))

    @property
    def node_frame(self) -> array[int]:
        return cast("array[int]", self._derived("node_frame"))

    @property
    def node_parent(self) -> array[int]:
        return cast("array[int]", self._derived("node_parent"))

    @property
    def node_depth(self) -> array[int]:
        return cast("array[int]", self._derived("node_depth"))

    @property
    def node_total(self) -> array[float]:
        return cast("array[float]", self._derived("node_total"))

    def _derived(self, name: str) -> object:
        """One value of the per-name cache (differently typed: each property above names its type)."""
        got = self._cache.get(name)
        if got is None:
            # A worker thread may warm the same arrays: derive each once.
            with _DERIVE_LOCK:
                got = self._cache.get(name)
                if got is None:
                    got = _derive(self, name)
        return got

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
        got = self._infos.get(frame)
        if got is None:
            got = self._infos[frame] = (
                parse_frame(self.frames[frame]) if frame >= 0 else parse_frame("all")
            )
        return got

    def node_info(self, node: int) -> FrameInfo:
        """:meth:`info` of a node's frame; before frames are interned, parsed from its text."""
        node_frame: array[int] | None = self._cache.get("node_frame")
        if node_frame is not None:
            got = self._infos.get(node_frame[node])
            return got if got is not None else self.info(node_frame[node])
        if node == 0:
            return self.info(-1)
        # Never wait for a worker interning every frame: read this one from its stack.
        got = self._infos_by_node.get(node)
        if got is not None:
            return got
        raw = self._tree.frame_of(node)
        if raw is None:
            return self.info(self.node_frame[node])
        got = self._infos_by_text.get(raw)
        if got is None:
            got = self._infos_by_text[raw] = parse_frame(clean_text(raw.decode("utf-8", "replace")))
        self._infos_by_node[node] = got
        return got

    def label(self, node: int) -> str:
        return "all" if node == 0 else self.node_info(node).label

    def ancestors(self, node: int) -> list[int]:
        """Nodes from the root down to ``node`` (inclusive)."""
        if node == 0:
            return [0]
        out = []
        parent = self._cache.get("node_parent") or self.node_parent
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


_DERIVE_LOCK = RLock()


def _derive(profile: Profile, name: str) -> object:
    cache, tree = profile._cache, profile._tree
    if name in ("frames", "node_frame"):
        frame_ids, node_frame = tree.node_frames()
        # Keep what the first frames parsed, now under frame ids.
        for raw, info in list(profile._infos_by_text.items()):
            fid = frame_ids.get(raw)
            if fid is not None:
                profile._infos.setdefault(fid, info)
        cache["frames"] = tuple(clean_text(f.decode("utf-8", "replace")) for f in frame_ids)
        cache["node_frame"] = node_frame
        tree.release_keys()
    elif name == "node_parent":
        cache[name] = tree.node_parents()
    elif name == "node_depth":
        cache[name] = tree.node_depths()
    elif name == "node_total":
        cache[name] = _integral_totals(profile.node_self, profile.node_end)
    else:
        raise KeyError(name)
    return cache[name]


def _integral_totals(node_self: array[float], node_end: array[int]) -> array[float]:
    # Totals from prefix sums (exact for integers): the subtree is [i, end[i]).
    cum = array("d", [0.0])
    cum.extend(accumulate(node_self))
    return array("d", map(sub, map(cum.__getitem__, node_end), cum))


def _check_weights(stacks: Mapping[bytes, float]) -> bool:
    """Raise FlameError for a negative or non-finite weight; True when all are integers."""
    values = stacks.values()
    try:
        # One C-level pass per check; anything odd falls through to the exact loop below.
        if values and not any(map(isnan, values)) and min(values) >= 0 and max(values) < INF:
            if set(map(type, values)) <= {int}:
                return True
            return all(map(float.is_integer, map(float, values)))
    except (OverflowError, TypeError, ValueError):
        pass
    integral = True
    for key, w in stacks.items():
        if not 0 <= w < INF:  # also catches NaN
            raise FlameError(f"negative or non-finite weight {w} for stack {key[:80]!r}")
        if integral and type(w) is not int and w != int(w):
            integral = False
    return integral


def build_profile(stacks: Mapping[bytes, float], unit: str, title: str = "") -> Profile:
    """Build a :class:`Profile` from stack keys (UTF-8 frames joined by NUL) -> weight.

    Sorting the keys makes stacks that share a prefix adjacent, so the tree
    is laid down in pre-order in one pass (see :mod:`.build`).
    Zero weights are dropped; negative weights raise :class:`FlameError`.
    """
    check_unit(unit)
    integral = _check_weights(stacks)
    keys = sorted(stacks)
    if 0 in stacks.values():
        keys = [k for k in keys if stacks[k]]
    root_self = 0.0
    if keys and not keys[0]:
        root_self = stacks[keys.pop(0)]
    tree = lay_out(keys, list(map(stacks.__getitem__, keys)))
    tree.node_self[0] = root_self
    profile = Profile(unit, tree.node_end, tree.node_self, tree, title)
    if not integral:
        # Float sums depend on the order of addition: add children to parents bottom-up.
        node_total = array("d", tree.node_self)
        node_parent = profile.node_parent
        for i in range(len(node_total) - 1, 0, -1):
            node_total[node_parent[i]] += node_total[i]
        profile._cache["node_total"] = node_total
    return profile


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
