"""One thread's ``B``/``E``/``X`` trace events as one stack timeline, with speedscope's rules.

A thread's events form a single timeline: an ``X`` (complete) event is a
begin at ``ts`` and an end at ``ts + dur`` (``tdur`` where ``dur`` is absent,
else 0), so ``B``/``E`` pairs and ``X`` events on one thread nest into each
other instead of being counted twice. The time between two events goes to
the stack open then (its self time, in µs); time with nothing open is not
counted. The rules for what trace producers get wrong are speedscope's
(``src/import/trace-event.ts``), so a trace reads the same in both:

* timestamps are rebased on the thread's first one; begins are taken in
  ``ts`` order, ``B`` events in file order before ``X`` events, and ``X``
  events with one ``ts`` longest first (a longer event encloses a shorter);
* ends are taken in ``ts`` order (``E`` events before the ends of ``X``
  events); at a timestamp with both, a begin goes first only when it is the
  same event (name and args) as the end, else ends go first;
* among the ends at one timestamp, the one matching the open frame goes
  first: same frame key (name and args) if there is one, else same name;
* an end closes the innermost open frame when their names match and is
  ignored otherwise (or when nothing is open); frames still open at the end
  close at the last event.

Frames are named ``name {args as JSON}`` (``(unnamed)`` without a name), as
speedscope names them; py-spy's frames (``args`` of only ``filename`` and
``line``) read ``name (file:line)`` like its other formats, and Hermes
frames (a bare array whose first event has Hermes' args) ``name (url:line)``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from gpulens.analysis.flame.build import SEP
from gpulens.analysis.flame.jsvalues import MISSING, identity, stringify, template, to_text, truthy
from gpulens.analysis.flame.model import stack_key

_PYSPY_ARGS = frozenset(("filename", "line"))


class TraceEvent:
    """An importable event of one thread, reduced to what the timeline reads (not the event's dict).

    ``ts`` and ``dur`` (µs; 0 but for ``X``) are checked numbers; ``name``
    compares as JavaScript's ``===`` would; ``eid`` is speedscope's event id
    (the name, then the args as JSON when there are any); ``key`` is what ends
    are matched by (the event id, or Hermes' ``name:url:line:column``);
    ``text`` is the frame as the flame graph shows it.
    """

    __slots__ = ("dur", "eid", "k", "key", "name", "ph", "text", "ts")

    def __init__(self, ts: float, k: int, ph: str, dur: float, ev: dict[str, Any], hermes: bool,
                 shared: dict[str, str]) -> None:
        """``shared``: one string per distinct text across events (a trace repeats its frames)."""
        self.ts, self.k, self.ph, self.dur = ts, k, ph, dur
        name, args = ev.get("name", MISSING), ev.get("args")
        self.name = name if type(name) is str else identity(name, k)  # a string never equals a token tuple
        if args is None and type(name) is str and name:
            eid = name
        else:
            eid = _name(name) + (" " + stringify(args) if truthy(args) else "")
        self.eid = shared.setdefault(eid, eid)
        self.key = self.text = self.eid
        if hermes:
            hargs = args if isinstance(args, dict) else {}
            key = ":".join(template(v) for v in (name, hargs.get("url", MISSING), hargs.get("line", MISSING),
                                                 hargs.get("column", MISSING)))
            self.key = shared.setdefault(key, key)
        if ph != "E":  # an end never names a frame
            text = _frame_text(name, args, hermes)
            if text is not None:
                self.text = shared.setdefault(text, text)


def _name(name: object) -> str:
    return to_text(name) if truthy(name) else "(unnamed)"


def _frame_text(name: object, args: object, hermes: bool) -> str | None:
    """The frame's text where it is not the event id: Hermes' and py-spy's frames carry a file and line."""
    if hermes:
        url = args.get("url") if isinstance(args, dict) else None
        if not isinstance(url, str) or not url:
            return _name(name)
        line = args.get("line") if isinstance(args, dict) else None
        if isinstance(line, int) and not isinstance(line, bool):
            return f"{_name(name)} ({url}:{line})"
        return f"{_name(name)} ({url})"
    if isinstance(args, dict) and args.keys() <= _PYSPY_ARGS and isinstance(args.get("filename"), str):
        line = args.get("line")
        if line is None or (isinstance(line, int) and not isinstance(line, bool)):
            return f"{_name(name)} ({args['filename']}:{line})" if line is not None \
                else f"{_name(name)} ({args['filename']})"
    return None


class _Ends:
    """The ``E`` queue's entries at one timestamp, in queue order, with speedscope's swaps.

    Taking an end may first swap the front with a later entry that matches
    the open frame. Index heaps (positions by key and by name) find that
    entry without scanning: a trace with a million ends at one timestamp
    stays linear-logarithmic.
    """

    __slots__ = ("_by_key", "_by_name", "pos", "slots", "ts")

    def __init__(self, ts: float, slots: list[TraceEvent]) -> None:
        self.ts, self.slots, self.pos = ts, slots, 0
        self._by_key: dict[str, list[int]] | None = None
        self._by_name: dict[Any, list[int]] | None = None  # by name: a string, or an identity() token

    def front(self) -> TraceEvent:
        return self.slots[self.pos]

    def empty(self) -> bool:
        return self.pos >= len(self.slots)

    def take(self, top: TraceEvent | None) -> TraceEvent:
        """The end to process now: the front, or a later one matching ``top`` by key, else by name."""
        if top is not None and len(self.slots) - self.pos > 1:
            if self._by_key is None:
                self._index()
            i = self._find(self._by_key, top.key, lambda r: r.key)
            if i is None:
                i = self._find(self._by_name, top.name, lambda r: r.name)
            if i is not None:
                slots, front = self.slots, self.slots[self.pos]
                slots[self.pos], slots[i] = slots[i], front
                self._push(i, front)
        rec = self.slots[self.pos]
        self.pos += 1
        return rec

    def _index(self) -> None:
        self._by_key, self._by_name = {}, {}
        for i in range(self.pos + 1, len(self.slots)):
            self._push(i, self.slots[i])

    def _push(self, i: int, rec: TraceEvent) -> None:
        if self._by_key is not None and self._by_name is not None:
            heapq.heappush(self._by_key.setdefault(rec.key, []), i)
            heapq.heappush(self._by_name.setdefault(rec.name, []), i)

    def _find(self, index: dict[Any, list[int]] | None, token: object, attr: Callable[[TraceEvent], object]) -> int | None:
        """The first position after the front whose entry still has ``token``; stale positions are dropped."""
        heap = index.get(token) if index is not None else None
        while heap:
            i = heap[0]
            if i > self.pos and attr(self.slots[i]) == token:
                return i
            heapq.heappop(heap)  # taken, or a swap moved another entry there (it was pushed anew)
        return None


def _queues(events: list[TraceEvent]) -> tuple[list[tuple[float, TraceEvent]], list[tuple[float, TraceEvent]]]:
    """Begins and ends, each in speedscope's order, on timestamps rebased to the first event."""
    first = min(e.ts for e in events)
    begins: list[tuple[float, TraceEvent]] = []
    ends: list[tuple[float, TraceEvent]] = []
    xs: list[tuple[float, TraceEvent]] = []
    for e in events:
        ts = e.ts - first
        (begins if e.ph == "B" else ends if e.ph == "E" else xs).append((ts, e))
    xs.sort(key=lambda x: (x[0], -x[1].dur))  # stable: file order after ts, then longest first
    begins.extend(xs)
    ends.extend((ts + x.dur, x) for ts, x in xs)
    begins.sort(key=lambda b: b[0])
    ends.sort(key=lambda e: e[0])
    return begins, ends


class Timeline:
    """Self time (µs) per stack of one thread, as a tree of frames: node 0 is "nothing open"."""

    __slots__ = ("children", "parent", "text", "weight")

    def __init__(self) -> None:
        self.children: dict[tuple[int, str], int] = {}
        self.parent = [-1]
        self.text = [""]
        self.weight = [0.0]

    def child(self, node: int, text: str) -> int:
        got = self.children.get((node, text))
        if got is None:
            got = self.children[(node, text)] = len(self.parent)
            self.parent.append(node)
            self.text.append(text)
            self.weight.append(0.0)
        return got

    def keys(self, max_frames: int) -> dict[bytes, float] | None:
        """µs per stack that had time, keyed as :func:`~.model.build_profile` wants (:func:`~.model.stack_key`).

        None when those stacks hold more than ``max_frames`` frames in all. A
        node's key extends the key of its nearest ancestor that had time, so
        a long chain of frames is walked once.
        """
        parent, text, weight = self.parent, self.text, self.weight
        depth = [0] * len(parent)
        frames = 0
        for node in range(1, len(parent)):
            d = depth[node] = depth[parent[node]] + 1
            if weight[node] > 0:
                frames += d
        if frames > max_frames:
            return None
        known: dict[int, bytes] = {0: b""}  # the keys of the nodes that had time (ids grow from parent to child)
        out: dict[bytes, float] = {}
        for node in range(1, len(parent)):
            w = weight[node]
            if w <= 0:
                continue
            tail: list[bytes] = []
            at = node
            while at not in known:
                tail.append(stack_key((text[at],)))
                at = parent[at]
            tail.reverse()
            key = known[at] + SEP + SEP.join(tail) if at else SEP.join(tail)
            known[node] = key
            out[key] = out.get(key, 0.0) + w
        return out


def _end_group(ends: list[tuple[float, TraceEvent]], ei: int) -> tuple[_Ends | None, int]:
    """The ends at the timestamp of ``ends[ei]`` and the index after them; (None, ``ei``) when none are left."""
    ne = len(ends)
    if ei >= ne:
        return None, ei
    j, ts = ei + 1, ends[ei][0]
    while j < ne and ends[j][0] == ts:
        j += 1
    return _Ends(ts, [r for _, r in ends[ei:j]]), j


def _begins_first(begin: tuple[float, TraceEvent], group: _Ends | None) -> bool:
    """Does this begin come before the pending ends (earlier, or at their time and the front's own event)?"""
    return (group is None or begin[0] < group.ts
            or (begin[0] == group.ts and begin[1].eid == group.front().eid))


def timeline(events: list[TraceEvent]) -> Timeline:
    """Play one thread's events (see the module docstring) into a :class:`Timeline`."""
    tree = Timeline()
    if not events:
        return tree
    begins, ends = _queues(events)
    weight, parent = tree.weight, tree.parent
    stack: list[TraceEvent] = []
    node, now = 0, 0.0
    bi, ei, nb = 0, 0, len(begins)
    group: _Ends | None = None
    while True:
        if group is None or group.empty():
            group, ei = _end_group(ends, ei)
        if bi < nb and _begins_first(begins[bi], group):
            ts, rec = begins[bi]
            bi += 1
            if node and ts > now:
                weight[node] += ts - now
            now = ts
            node = tree.child(node, rec.text)
            stack.append(rec)
        elif group is not None:
            top = stack[-1] if stack else None
            end = group.take(top)
            if top is None or end.name != top.name:
                continue  # an end with nothing open, or not the open frame's: ignored
            if group.ts > now:
                weight[node] += group.ts - now
            now = group.ts
            node = parent[node]
            stack.pop()
        else:
            return tree  # frames still open close at the last event: no more time
