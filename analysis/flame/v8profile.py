"""Chrome DevTools / V8 profiles: ``.cpuprofile`` (time) and ``.heapprofile`` (bytes).

Read as speedscope reads them (``src/import/chrome.ts``, ``v8cpuFormatter.ts``,
``v8heapalloc.ts``), so both tools show the same stacks:

- ``.cpuprofile``: ``nodes`` (``id``, ``callFrame`` {functionName, url,
  lineNumber, columnNumber}, ``children`` ids), ``samples`` (node ids) and
  ``timeDeltas`` (µs). Runs of equal samples fold into one; a run lasts until
  the next run starts (the last one weighs 0, as in speedscope). ``(root)``
  and ``(idle)`` are not frames (idle time is not counted);
  ``(garbage collector)`` and ``(program)`` sit on top of the previous
  sample's stack. The old V8 format (a ``head`` tree and absolute
  ``timestamps``) is read too.
- ``.heapprofile``: a ``head`` tree whose nodes have a ``selfSize`` in bytes.

Frames are ``name (url:line)`` with 1-based lines (Chrome writes 0-based
ones); a function without a name is ``(anonymous file:line)``.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem, Where
from gpulens.analysis.flame.model import Profile, build_from_stacks
from gpulens.core.limits import too_many

_IGNORED = ("(root)", "(idle)")
_ON_TOP = ("(garbage collector)", "(program)")


def is_cpuprofile(doc: object) -> TypeGuard[dict[str, Any]]:
    return isinstance(doc, dict) and all(k in doc for k in ("nodes", "samples", "timeDeltas"))


def is_old_cpuprofile(doc: object) -> TypeGuard[dict[str, Any]]:
    return isinstance(doc, dict) and all(k in doc for k in ("head", "samples", "timestamps"))


def is_heapprofile(doc: object) -> TypeGuard[dict[str, Any]]:
    return isinstance(doc, dict) and isinstance(doc.get("head"), dict) and "selfSize" in doc["head"]


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def frame_text(call: object, shift: int = 1) -> str:
    """``name (url:line)`` of a callFrame (speedscope's frame name, with the file and line).

    CPU profiles' lines are 0-based (``shift`` 1 makes them 1-based, as speedscope
    shows them); speedscope keeps heap profiles' lines as written (``shift`` 0).
    """
    if not isinstance(call, dict):
        return "(anonymous)"
    url = call.get("url")
    url = url if isinstance(url, str) else ""
    line = _num(call.get("lineNumber"))
    shown = None if line is None else int(line) + shift
    name = call.get("functionName")
    if not isinstance(name, str) or not name:
        name = f"(anonymous {url.split('/')[-1]}:{shown})" if url else "(anonymous)"
    if url and shown is not None and shown > 0:
        return f"{name} ({url}:{shown})"
    return f"{name} ({url})" if url else name


def _old_to_new(doc: dict[str, Any], source: str, max_nodes: int) -> dict[str, Any]:
    """The old tree format as the new flat one (``v8cpuFormatter.ts``)."""
    nodes: list[dict[str, Any]] = []
    todo = [doc["head"]]
    while todo:
        node = todo.pop()
        if not isinstance(node, dict):
            raise Where(source, "head").error("expected nodes to be objects")
        kids = node.get("children") or []
        if not isinstance(kids, list):
            raise Where(source, f"node {node.get('id')!r}").error("expected 'children' to be a list")
        nodes.append({"id": node.get("id"), "children": [k.get("id") for k in kids if isinstance(k, dict)],
                      "callFrame": {"functionName": node.get("functionName"), "url": node.get("url"),
                                    "lineNumber": node.get("lineNumber"), "columnNumber": 0}})
        if len(nodes) > max_nodes:
            raise FlameFormatError(too_many(source, "profile nodes", max_nodes), problem=FlameProblem.TOO_LARGE)
        todo.extend(reversed(kids))
    start = (_num(doc.get("startTime")) or 0.0) * 1e6
    stamps = doc["timestamps"]
    if not isinstance(stamps, list) or any(_num(t) is None for t in stamps):
        raise FlameFormatError(f"{source}: expected 'timestamps' to be a list of numbers")
    deltas = [t - (start if i == 0 else stamps[i - 1]) for i, t in enumerate(stamps)]
    return {"nodes": nodes, "samples": doc["samples"], "timeDeltas": deltas}


def cpuprofile_profile(doc: dict[str, Any], source: str, title: str = "", max_nodes: int = 10_000_000) -> Profile:
    """A ``.cpuprofile`` (new or old format) in seconds, as speedscope weighs it."""
    if is_old_cpuprofile(doc) and not is_cpuprofile(doc):
        doc = _old_to_new(doc, source, max_nodes)
    nodes, samples, deltas = _checked_lists(doc, source)
    by_id, parent = _node_tree(nodes, source)
    runs, times = _runs(samples, deltas)
    weights = _stack_weights(runs, times, by_id, parent)
    stacks = [([frame_text(by_id[n].get("callFrame")) for n in stack], us * 1e-6) for stack, us in weights.items()]
    return build_from_stacks(stacks, "seconds", title or "Chrome CPU profile")


def _checked_lists(doc: dict[str, Any], source: str) -> tuple[list[Any], list[Any], list[Any]]:
    """``nodes``, ``samples`` and ``timeDeltas``: lists, with a numeric delta for every sample."""
    nodes, samples, deltas = doc["nodes"], doc["samples"], doc["timeDeltas"]
    if not isinstance(nodes, list) or not isinstance(samples, list) or not isinstance(deltas, list):
        raise FlameFormatError(f"{source}: expected 'nodes', 'samples' and 'timeDeltas' to be lists")
    if len(deltas) < len(samples) or any(_num(d) is None for d in deltas[:len(samples)]):
        raise FlameFormatError(f"{source}: expected a numeric time delta for each of the {len(samples)} samples")
    return nodes, samples, deltas


def _node_tree(nodes: list[Any], source: str) -> tuple[dict[Any, dict[str, Any]], dict[Any, Any]]:
    """Node by id, and parent by id (from ``parent`` fields, then from ``children`` lists)."""
    by_id: dict[Any, dict[str, Any]] = {}
    parent: dict[Any, Any] = {}
    for k, node in enumerate(nodes):
        if not isinstance(node, dict) or "id" not in node:
            raise Where(source, f"nodes[{k}]").error("expected an object with an 'id'")
        by_id[node["id"]] = node
    for node in nodes:
        if isinstance(node.get("parent"), (int, str)):
            parent.setdefault(node["id"], node["parent"])
        kids = node.get("children") or []
        for kid in kids if isinstance(kids, list) else ():
            if kid in by_id:
                parent[kid] = node["id"]
    return by_id, parent


def _runs(samples: list[Any], deltas: list[Any]) -> tuple[list[Any], list[float]]:
    """speedscope's folding of equal consecutive samples: (node id, start µs) per run, with its end quirk."""
    out: list[Any] = []
    times: list[float] = []
    elapsed = float(deltas[0]) if deltas else 0.0
    last_valid = elapsed
    last: Any = None
    for i, node in enumerate(samples):
        if i == 0 or node != last:
            out.append(node)
            times.append(max(elapsed, last_valid))
            last_valid = max(elapsed, last_valid)
        if i == len(samples) - 1:
            if i > 0:  # speedscope reopens the previous run's stack at the end (the last run weighs 0)
                out.append(last)
                times.append(max(elapsed, last_valid))
        else:
            elapsed += float(deltas[i + 1])
            last = node
    return out, times


def _stack_weights(runs: list[Any], times: list[float], by_id: dict[Any, dict[str, Any]],
                   parent: dict[Any, Any]) -> dict[tuple[Any, ...], float]:
    def name(n: object) -> object:
        call = by_id[n].get("callFrame")
        return call.get("functionName") if isinstance(call, dict) else None

    def ignored(n: object) -> bool:
        call = by_id[n].get("callFrame")
        return isinstance(call, dict) and (call.get("url") == "native dummy.js" or call.get("functionName") in _IGNORED)

    weights: dict[tuple[Any, ...], float] = {}
    prev: list[Any] = []
    limit = len(by_id) + 1
    for i, top in enumerate(runs):
        if top not in by_id:
            continue
        lca: Any = top
        steps = 0
        while lca is not None and lca not in prev and steps <= limit:
            lca = (prev[-1] if prev else None) if name(lca) in _ON_TOP else parent.get(lca)
            steps += 1
        keep = len(prev) - prev[::-1].index(lca) if lca is not None and lca in prev else 0
        opened: list[Any] = []
        node: Any = top
        while node is not None and node != lca and not ignored(node) and len(opened) <= limit:
            opened.append(node)
            node = (prev[-1] if prev else None) if name(node) in _ON_TOP else parent.get(node)
        prev = prev[:keep] + opened[::-1]
        if prev and i + 1 < len(runs):
            key = tuple(prev)
            weights[key] = weights.get(key, 0.0) + times[i + 1] - times[i]
    return weights


def heapprofile_profile(doc: dict[str, Any], source: str, title: str = "", max_nodes: int = 10_000_000) -> Profile:
    """A Chrome ``.heapprofile``: each node's stack weighs its ``selfSize`` bytes (speedscope's reading)."""
    stacks: list[tuple[list[str], float]] = []
    todo: list[tuple[Any, list[str]]] = [(doc["head"], [])]
    seen = 0
    while todo:
        node, path = todo.pop()
        if not isinstance(node, dict):
            raise Where(source, "head").error("expected nodes to be objects")
        seen += 1
        if seen > max_nodes:
            raise FlameFormatError(too_many(source, "profile nodes", max_nodes), problem=FlameProblem.TOO_LARGE)
        here = [*path, frame_text(node.get("callFrame"), 0)]
        size = _num(node.get("selfSize")) or 0.0
        if size < 0:
            raise Where(source, f"node {node.get('id')!r}").error(f"negative selfSize {size:g}")
        if size:
            stacks.append((here, size))
        kids = node.get("children") or []
        todo.extend((kid, here) for kid in (kids if isinstance(kids, list) else ()))
    return build_from_stacks(stacks, "bytes", title or "Chrome heap profile")
