"""The flame-graph call tree: sums, focus, search share, sandwich, chains, labels.

Expected values are computed here independently, straight from the fixture
files, never from the model under test.
"""

from __future__ import annotations

import pickle
import re
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulens.analysis.flame.folded import parse_folded, to_folded
from gpulens.analysis.flame.importers import load_profile
from gpulens.analysis.flame.labels import TRAMPOLINE, parse_frame
from gpulens.analysis.flame.model import Profile, build_from_stacks, build_profile
from gpulens.analysis.flame.query import (
    chain_end,
    function_table,
    sandwich,
    search,
)
from gpulens.analysis.flame.query import focus as focus_of
from gpulens.analysis.flame.speedscope import speedscope_group, to_speedscope
from gpulens.tui.widgets.flame_layout import compute_layout
from tests.paths import DATA

FOLDED = sorted((DATA / "stacks").glob("*.txt"))
SNAPSHOT = DATA / "memory_snapshots" / "mini_snapshot.pickle"


def read_folded(path: Path) -> list[tuple[tuple[str, ...], int]]:
    """Independent parse: (frames, count) per line."""
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.strip():
            stack, count = line.rsplit(" ", 1)
            out.append((tuple(stack.strip().split(";")), int(count)))
    return out


def node_path(profile: Profile, node: int) -> tuple[str, ...]:
    return tuple(profile.frames[profile.node_frame[n]] for n in profile.ancestors(node)[1:])


def find(profile: Profile, path: tuple[str, ...]) -> int:
    node = 0
    for text in path:
        node = next(c for c in profile.children(node) if profile.frames[profile.node_frame[c]] == text)
    return node


@pytest.mark.parametrize("path", FOLDED, ids=lambda p: p.name)
def test_self_and_total_match_independent_sums(path: Path) -> None:
    lines = read_folded(path)
    profile = load_profile(str(path))
    assert profile.unit == "samples"
    assert profile.total == sum(c for _, c in lines)
    expected_self: dict[tuple[str, ...], int] = {}
    expected_total: dict[tuple[str, ...], int] = {}
    for frames, count in lines:
        expected_self[frames] = expected_self.get(frames, 0) + count
        for k in range(1, len(frames) + 1):
            expected_total[frames[:k]] = expected_total.get(frames[:k], 0) + count
    assert profile.n_nodes - 1 == len(expected_total)
    for node in range(1, profile.n_nodes):
        p = node_path(profile, node)
        assert profile.node_total[node] == expected_total[p]
        assert profile.node_self[node] == expected_self.get(p, 0)
        kids = sum(profile.node_total[c] for c in profile.children(node))
        assert profile.node_total[node] == profile.node_self[node] + kids


def test_children_sorted_and_subtrees_contiguous() -> None:
    profile = load_profile(str(DATA / "stacks" / "perf-vertx-stacks-01-collapsed-all.txt"))
    for node in range(profile.n_nodes):
        kids = list(profile.children(node))
        names = [profile.frames[profile.node_frame[c]].encode() for c in kids]
        assert names == sorted(names)
        for c in kids:
            assert profile.node_parent[c] == node
            assert node < c < profile.node_end[c] <= profile.node_end[node]


def test_function_table_counts_a_sample_once_under_recursion() -> None:
    profile = build_from_stacks(
        [(["main", "a", "b", "a", "c"], 5), (["main", "a", "b"], 2), (["main", "c"], 3)], "samples"
    )
    rows = {r.name: r for r in function_table(profile)}
    assert rows["a"].total_value == 7  # not 12: the inner 'a' is inside the outer one
    assert rows["a"].self_value == 0
    assert rows["c"].self_value == 8 and rows["c"].total_value == 8
    assert rows["main"].total_value == 10
    assert [r.name for r in function_table(profile)[:2]] == ["c", "b"]


@pytest.mark.parametrize("path", FOLDED, ids=lambda p: p.name)
def test_function_table_matches_independent_sums(path: Path) -> None:
    lines = read_folded(path)
    profile = load_profile(str(path))

    def key(text: str) -> tuple[str, str | None]:
        info = parse_frame(text)
        return info.name, info.file

    self_: dict[tuple[str, str | None], int] = {}
    total: dict[tuple[str, str | None], int] = {}
    for frames, count in lines:
        self_[key(frames[-1])] = self_.get(key(frames[-1]), 0) + count
        for k in {key(f) for f in frames}:
            total[k] = total.get(k, 0) + count
    rows = function_table(profile)
    assert len(rows) == len(total)
    for row in rows:
        assert row.total_value == total[(row.name, row.file)]
        assert row.self_value == self_.get((row.name, row.file), 0)
    assert [r.self_value for r in rows] == sorted((r.self_value for r in rows), reverse=True)


def test_search_share_counts_each_sample_once() -> None:
    path = DATA / "stacks" / "perf-vertx-stacks-01-collapsed-all.txt"
    lines = read_folded(path)
    profile = load_profile(str(path))
    rx = re.compile("vertx")
    expected = sum(c for frames, c in lines if any(rx.search(f) for f in frames))
    result = search(profile, "vertx")
    assert result.value == expected
    assert result.share == pytest.approx(expected / sum(c for _, c in lines))
    assert all(rx.search(profile.frames[profile.node_frame[n]]) for n in result.nodes)
    assert list(result.nodes) == sorted(result.nodes)


def test_focus_restricts_search_and_layout() -> None:
    path = DATA / "stacks" / "perf-vertx-stacks-01-collapsed-all.txt"
    lines = read_folded(path)
    profile = load_profile(str(path))
    focus = max(profile.children(0), key=lambda c: profile.node_total[c])
    prefix = node_path(profile, focus)
    inside = [(f, c) for f, c in lines if f[: len(prefix)] == prefix]
    assert profile.node_total[focus] == sum(c for _, c in inside)
    view = focus_of(profile, focus)
    assert view.total == sum(c for _, c in inside)
    assert view.share_of_root == pytest.approx(view.total / sum(c for _, c in lines))
    assert view.ancestors == (0,)
    result = search(profile, "Thread", focus)
    assert result.value == sum(c for f, c in inside if any("Thread" in x for x in f))
    assert all(focus <= n < profile.node_end[focus] for n in result.nodes)
    layout = compute_layout(profile, focus, 100, collapsed=False)
    assert layout.by_node[focus].x0 == 0 and layout.by_node[focus].x1 == 100
    for row in layout.rows:
        for a, b in pairwise(row):
            assert a.x1 <= b.x0  # no overlap within a row


def test_bad_search_pattern_is_a_clear_error() -> None:
    profile = build_from_stacks([(["a"], 1)], "samples")
    with pytest.raises(Exception, match="bad search pattern"):
        search(profile, "(")


def test_sandwich_callers_and_callees() -> None:
    profile = build_from_stacks(
        [
            (["main", "load", "read"], 4),
            (["main", "step", "read"], 6),
            (["main", "step", "read", "decode"], 2),
            (["main", "step", "read", "read"], 1),
            (["main", "step", "compute"], 10),
        ],
        "samples",
    )
    read = find(profile, ("main", "step", "read"))
    sw = sandwich(profile, read)
    expected = 4 + 6 + 2 + 1  # every sample with 'read' on the stack, once
    assert sw.callers.total == expected
    assert sw.callees.total == expected
    callers = {profile_label(sw.callers, c): sw.callers.node_total[c] for c in sw.callers.children(find_first(sw.callers))}
    assert callers == {"load": 4, "step": 9}
    callees = {profile_label(sw.callees, c): sw.callees.node_total[c] for c in sw.callees.children(find_first(sw.callees))}
    assert callees == {"decode": 2, "read": 1}
    assert sw.callees.node_self[find_first(sw.callees)] == 10


def profile_label(profile: Profile, node: int) -> str:
    return profile.label(node)


def find_first(profile: Profile) -> int:
    kids = list(profile.children(0))
    assert len(kids) == 1
    return kids[0]


def test_chain_grouping_collapses_single_child_runs() -> None:
    profile = build_from_stacks([(["a", "b", "c", "d"], 5), (["a", "b", "c", "d", "x"], 1), (["a", "b", "c", "d", "y"], 2)], "samples")
    a = find(profile, ("a",))
    assert profile.only_child(a) == find(profile, ("a", "b"))
    assert chain_end(profile, a) == find(profile, ("a", "b", "c", "d"))
    assert chain_end(profile, 0) == 0
    expanded = compute_layout(profile, 0, 80, collapsed=False)
    collapsed = compute_layout(profile, 0, 80, collapsed=True)
    assert len(expanded.rows) == 6  # all, a, b, c, d, x|y
    assert len(collapsed.rows) == 3  # all, then a..d as one chain, then x|y
    head = collapsed.rows[1][0]
    assert head.node == a and head.tail == find(profile, ("a", "b", "c", "d"))
    assert head.chain_length == 4
    assert {profile.label(s.node) for s in collapsed.rows[2]} == {"x", "y"}


def test_memory_snapshot_allocated_bytes_by_stack() -> None:
    class Plain(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> object:
            raise AssertionError(f"fixture needs {module}.{name}")

    with SNAPSHOT.open("rb") as fh:
        doc = Plain(fh).load()
    allocs = [e for trace in doc["device_traces"] for e in trace if e["action"] == "alloc"]
    profile = load_profile(str(SNAPSHOT))
    assert profile.unit == "bytes"
    assert profile.total == sum(e["size"] for e in allocs)
    roots = {profile.label(c) for c in profile.children(0)}
    assert roots == {"<module>"}
    labels = {profile.label(n) for n in range(1, profile.n_nodes)}
    assert TRAMPOLINE in labels
    assert not any("CUDACachingAllocator" in profile.frames[f] for f in range(len(profile.frames)))
    live = load_profile(str(SNAPSHOT), "live")
    live_blocks = [b for s in doc["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    assert live.total == sum(b["size"] for b in live_blocks) == 0  # this snapshot freed everything


@pytest.mark.parametrize(
    ("text", "label", "name"),
    [
        ("K.run (hot.py:9)", "K > run", "K.run"),
        ("LlamaMLP.__init__ (vllm/model.py:30)", "LlamaMLP > __init__", "LlamaMLP.__init__"),
        ("_compile_fx_inner (torch/_inductor/compile_fx.py:500)", "_compile_fx_inner", "_compile_fx_inner"),
        ("_PyEval_EvalFrameDefault", TRAMPOLINE, "_PyEval_EvalFrameDefault"),
        ("_PyEval_EvalFrameDefault (Python/ceval.c:4200)", TRAMPOLINE, "_PyEval_EvalFrameDefault"),
        ("0x7f151a2b3c4d", "0x7f151a2b3c4d", "0x7f151a2b3c4d"),
        ("torch/nn/modules/module.py(1501): _call_impl", "_call_impl", "_call_impl"),
        ("java/lang/Thread.run()V_[j]", "java/lang/Thread.run()V_[j]", "java/lang/Thread.run()V_[j]"),
    ],
)
def test_labels_follow_the_azure_conventions(text: str, label: str, name: str) -> None:
    info = parse_frame(text)
    assert info.label == label
    assert info.name == name


def test_file_and_line_kept_for_a_frame() -> None:
    info = parse_frame("Model.forward (site-packages/mypkg/model.py:42)")
    assert (info.file, info.line, info.module) == ("site-packages/mypkg/model.py", 42, "mypkg")


@pytest.mark.parametrize("path", FOLDED, ids=lambda p: p.name)
def test_folded_and_speedscope_round_trip(path: Path) -> None:
    profile = load_profile(str(path))
    again = parse_folded(to_folded(profile).encode())
    assert sorted(again.stacks()) == sorted(profile.stacks())
    via_ss = speedscope_group(to_speedscope(profile)).pick(None)
    assert sorted(via_ss.stacks()) == sorted(profile.stacks())


_ALPHABET = [b"", b"a", b"a!", b"ab", b"b", b"\xff", b"\xff\xff", b"a\xff", b"!"]
# Decoding with errors="replace" is one-to-one on this alphabet, so texts map back to bytes.
_RAW_BY_TEXT = {b.decode("utf-8", "replace"): b for b in _ALPHABET}


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.lists(st.sampled_from(_ALPHABET), max_size=6).map(tuple), st.integers(0, 50), max_size=25))
def test_build_matches_a_naive_tree(stacks: dict[tuple[bytes, ...], int]) -> None:
    """Any frames (empty, non-UTF-8, prefixes of each other): the same tree as a naive build."""
    keys: dict[bytes, float] = {}
    merged: dict[tuple[bytes, ...], int] = {}
    for frames, w in stacks.items():
        key = b"\x00".join(frames)
        keys[key] = keys.get(key, 0) + w
        # The empty key and the one-empty-frame stack are both b"": the root's own value.
        path = frames if key else ()
        merged[path] = merged.get(path, 0) + w
    profile = build_profile(keys, "samples")
    expected_total: dict[tuple[bytes, ...], int] = {}
    expected_self: dict[tuple[bytes, ...], int] = {}
    for frames, w in merged.items():
        if not w:
            continue
        expected_self[frames] = expected_self.get(frames, 0) + w
        for k in range(len(frames) + 1):
            expected_total[frames[:k]] = expected_total.get(frames[:k], 0) + w
    assert profile.total == expected_total.get((), 0)
    assert profile.node_self[0] == expected_self.get((), 0)
    seen = set()
    for node in range(1, profile.n_nodes):
        raw = tuple(_RAW_BY_TEXT[profile.frames[profile.node_frame[n]]] for n in profile.ancestors(node)[1:])
        assert raw not in seen  # prefix sharing found every time: no duplicate paths
        seen.add(raw)
        assert profile.node_total[node] == expected_total[raw]
        assert profile.node_self[node] == expected_self.get(raw, 0)
        assert profile.node_end[node] > node and profile.node_depth[node] == len(raw)
    assert seen == {p for p in expected_total if p}


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.lists(st.sampled_from(_ALPHABET), min_size=1, max_size=6).map(tuple), st.integers(0, 50), max_size=25))
def test_first_frame_reads_match_the_derived_arrays(stacks: dict[tuple[bytes, ...], int]) -> None:
    """What a first frame reads before frame ids and totals exist equals what they say later."""
    keys: dict[bytes, float] = {}
    for frames, w in stacks.items():
        key = b"\x00".join(frames)
        keys[key] = keys.get(key, 0) + w
    early = build_profile(keys, "samples")
    early_reads = [(early.node_info(n), early.label(n), early.total_of(n)) for n in range(early.n_nodes)]
    late = build_profile(keys, "samples")
    late_totals, late_frames = late.node_total, late.node_frame
    late_reads = [
        (late.info(late_frames[n] if n else -1), late.label(n), late_totals[n]) for n in range(late.n_nodes)
    ]
    assert early_reads == late_reads
    assert [early.total_of(n) for n in range(early.n_nodes)] == list(late_totals)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.lists(st.sampled_from(_ALPHABET), min_size=1, max_size=6).map(tuple), st.integers(1, 50), max_size=25))
def test_chunk_boundaries_do_not_change_the_tree(stacks: dict[tuple[bytes, ...], int]) -> None:
    """The build works in chunks of stacks; tiny chunks put a boundary between every pair."""
    from gpulens.analysis.flame import build
    keys = {b"\x00".join(frames): float(w) for frames, w in stacks.items()}

    def shape(profile: Profile) -> tuple[object, ...]:
        return (profile.frames, list(profile.node_frame), list(profile.node_end), list(profile.node_total))

    expected = shape(build_profile(keys, "samples"))
    saved = build._CHUNK
    try:
        for chunk in (1, 2, 3):
            build._CHUNK = chunk
            assert shape(build_profile(keys, "samples")) == expected
    finally:
        build._CHUNK = saved
