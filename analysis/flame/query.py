"""Queries on a built :class:`~.model.Profile`, none of which rebuild its tree.

Search, function table and sandwich walk pre-order node ranges; a frame ->
nodes index is built once per profile and cached on it.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass

from gpulens.analysis.flame.errors import FlameError
from gpulens.analysis.flame.model import Profile, build_from_stacks

MAX_PATTERN_CHARS = 500


def frame_nodes(profile: Profile) -> list[array[int]]:
    """For each frame id, its nodes in pre-order (cached on the profile)."""
    index: list[array[int]] | None = profile._cache.get("frame_nodes")
    if index is None:
        index = [array("i") for _ in profile.frames]
        fr = profile.node_frame
        for i in range(1, profile.n_nodes):
            index[fr[i]].append(i)
        profile._cache["frame_nodes"] = index
    return index


def _outermost_total(profile: Profile, nodes: list[int]) -> float:
    """Sum of totals over ``nodes`` (pre-order) skipping those inside an earlier one."""
    end, total = profile.node_end, profile.node_total
    value = 0.0
    cover = -1
    for i in nodes:
        if i >= cover:
            value += total[i]
            cover = end[i]
    return value


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Frames matching a regex within the subtree of ``root``.

    ``value`` counts each sample once even when several frames of its stack
    match; ``share`` is ``value`` over the root's total (0..1).
    """

    pattern: str
    root: int
    matched_frames: frozenset[int]
    nodes: tuple[int, ...]
    value: float
    root_total: float

    @property
    def share(self) -> float:
        return self.value / self.root_total if self.root_total else 0.0


def search(profile: Profile, pattern: str, root: int = 0) -> SearchResult:
    """Find frames whose text or label matches ``pattern`` (a Python regex).

    Raises FlameError for an invalid or over-long pattern.
    """
    if len(pattern) > MAX_PATTERN_CHARS:
        raise FlameError(f"search pattern longer than {MAX_PATTERN_CHARS} characters")
    try:
        rx = re.compile(pattern)
    except re.error as err:
        raise FlameError(f"bad search pattern {pattern!r}: {err}") from err
    matched = frozenset(
        fid
        for fid, text in enumerate(profile.frames)
        if rx.search(text) or rx.search(profile.info(fid).label)
    )
    index = frame_nodes(profile)
    lo, hi = root, profile.node_end[root]
    hits: list[int] = []
    for fid in matched:
        hits.extend(i for i in index[fid] if lo <= i < hi)
    hits.sort()
    return SearchResult(pattern, root, matched, tuple(hits), _outermost_total(profile, hits), profile.node_total[root])


@dataclass(frozen=True, slots=True)
class FunctionRow:
    """One function merged across the tree.

    ``name`` is the function as written in the input; ``total`` counts a
    sample once even when the function recurses.
    """

    name: str
    file: str | None
    label: str
    self_value: float
    total_value: float
    frames: tuple[int, ...]


def function_of(profile: Profile, frame: int) -> tuple[str, str | None]:
    """The function key (name, file) of a frame: lines of one function merge."""
    info = profile.info(frame)
    return info.name, info.file


def function_table(profile: Profile) -> tuple[FunctionRow, ...]:
    """Every function with its self and total value, highest self first (cached)."""
    cached: tuple[FunctionRow, ...] | None = profile._cache.get("functions")
    if cached is not None:
        return cached
    groups: dict[tuple[str, str | None], list[int]] = {}
    for fid in range(len(profile.frames)):
        groups.setdefault(function_of(profile, fid), []).append(fid)
    index = frame_nodes(profile)
    selfv = profile.node_self
    rows = []
    for (name, file), fids in groups.items():
        nodes: list[int] = []
        for fid in fids:
            nodes.extend(index[fid])
        if len(fids) > 1:
            nodes.sort()
        rows.append(
            FunctionRow(
                name,
                file,
                profile.info(fids[0]).label,
                sum(selfv[i] for i in nodes),
                _outermost_total(profile, nodes),
                tuple(fids),
            )
        )
    rows.sort(key=lambda r: (-r.self_value, -r.total_value, r.name))
    result = tuple(rows)
    profile._cache["functions"] = result
    return result


def _function_frame_text(name: str, file: str | None) -> str:
    return f"{name} ({file})" if file else name


@dataclass(frozen=True, slots=True)
class Sandwich:
    """Callers (inverted: the function at the root, its callers above) and callees."""

    name: str
    callers: Profile
    callees: Profile


def sandwich(profile: Profile, node: int) -> Sandwich:
    """Callers and callees of the function of ``node``, merged over all its nodes.

    Recursion is counted once: only the outermost calls of the function seed
    the views, so the root of each view holds the function's total.
    """
    if node <= 0:
        raise FlameError("sandwich needs a function, not the root")
    key = function_of(profile, profile.node_frame[node])
    fids = [f for f in range(len(profile.frames)) if function_of(profile, f) == key]
    index = frame_nodes(profile)
    nodes = sorted(i for f in fids for i in index[f])
    end, fr, frames, parent = profile.node_end, profile.node_frame, profile.frames, profile.node_parent
    top = _function_frame_text(*key)
    outer: list[int] = []
    cover = -1
    for i in nodes:
        if i >= cover:
            outer.append(i)
            cover = end[i]
    caller_stacks = []
    callee_stacks: list[tuple[list[str], float]] = []
    depth, selfv, total = profile.node_depth, profile.node_self, profile.node_total
    for i in outer:
        chain = [top]
        a = parent[i]
        while a > 0:
            chain.append(frames[fr[a]])
            a = parent[a]
        caller_stacks.append((chain, total[i]))
        base = depth[i]
        path: list[str] = []
        for j in range(i, end[i]):
            del path[depth[j] - base :]
            path.append(top if j == i else frames[fr[j]])
            if selfv[j]:
                callee_stacks.append((list(path), selfv[j]))
    title = profile.info(fids[0]).label
    return Sandwich(
        key[0],
        build_from_stacks(caller_stacks, profile.unit, f"callers of {title}"),
        build_from_stacks(callee_stacks, profile.unit, f"callees of {title}"),
    )


@dataclass(frozen=True, slots=True)
class Focus:
    """A focused frame: its subtree becomes the whole graph; ancestors stay below it."""

    node: int
    ancestors: tuple[int, ...]
    total: float
    share_of_root: float


def focus(profile: Profile, node: int) -> Focus:
    """Describe focusing ``node`` (no copying: the subtree is ``[node, node_end[node])``)."""
    if not 0 <= node < profile.n_nodes:
        raise FlameError(f"no node {node} in this profile")
    total = profile.node_total[node]
    return Focus(node, tuple(profile.ancestors(node)[:-1]), total, total / profile.total if profile.total else 0.0)


def chain_end(profile: Profile, node: int) -> int:
    """The last frame of the linear chain starting at ``node`` (single children, no self).

    The root is never part of a chain, so it keeps its own row.
    """
    if node == 0:
        return 0
    tail = node
    while (child := profile.only_child(tail)) is not None:
        tail = child
    return tail


def path_of(profile: Profile, node: int) -> list[str]:
    """Frame texts from the root's child down to ``node``: a node's identity across profiles."""
    return [profile.frames[profile.node_frame[n]] for n in profile.ancestors(node)[1:]]


def find_path(profile: Profile, texts: list[str]) -> int:
    """The deepest node of ``profile`` along ``texts`` (0, the root, when nothing matches).

    Used to keep the user's place when a live profile is replaced by a newer one.
    """
    node = 0
    frames, fr = profile.frames, profile.node_frame
    for text in texts:
        for child in profile.children(node):
            if frames[fr[child]] == text:
                node = child
                break
        else:
            break
    return node
