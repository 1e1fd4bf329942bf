"""Firefox / Gecko profiles: one profile per sampled thread, weighed by time.

Two layouts, both ``{"meta": ..., "threads": [...]}``:

- **raw Gecko** (what Firefox's profiler writes, also wrapped as
  ``{"profile": {...}, "duration": ...}`` by the old DevTools performance
  panel): tables of rows with a ``schema`` naming the columns
  (``samples``: stack, time; ``stackTable``: prefix, frame; ``frameTable``:
  location) and a ``stringTable``. Read as speedscope's ``firefox.ts`` reads
  them: a frame is its location string ``name (file:line:col)``, shown as
  ``name (file:line)``; Firefox's own
  JavaScript (``resource:``, ``self-hosted``) is left out; a location without
  a ``(file)`` is left out in DevTools recordings (speedscope's rule) and kept
  in raw profiles (native frames); each sample lasts until the next one.
- **processed** (what profiler.firefox.com saves, ``meta.preprocessedProfileVersion``):
  columns (``samples.stack``, ``samples.time`` or ``timeDeltas``,
  ``stackTable.prefix``/``frame``, ``frameTable.func``/``line``,
  ``funcTable.name``/``fileName``) and a ``stringArray`` (per thread or in
  ``shared``). Each sample lasts until the next; the last one ``meta.interval``.

The active profile is the thread ``GeckoMain`` (speedscope's choice), else the first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeGuard

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem, Where
from gpulens.analysis.flame.group import Part, ProfileGroup, group_of
from gpulens.analysis.flame.model import Profile, build_from_stacks
from gpulens.core.limits import too_many

_LOCATION = re.compile(r"(.*)\s+\((.*?)(?::(\d+))?(?::(\d+))?\)$", re.S)


def gecko_root(doc: object) -> tuple[dict[str, Any], bool] | None:
    """(the profile with ``meta`` and ``threads``, wrapped by DevTools?) or None when ``doc`` is not one."""
    if isinstance(doc, dict) and isinstance(doc.get("profile"), dict) and _is_gecko(doc["profile"]):
        return doc["profile"], True
    if _is_gecko(doc):
        return doc, False
    return None


def _is_gecko(doc: object) -> TypeGuard[dict[str, Any]]:
    return isinstance(doc, dict) and isinstance(doc.get("meta"), dict) and isinstance(doc.get("threads"), list)


def gecko_group(doc: object, source: str, max_events: int = 10_000_000) -> ProfileGroup:
    """Every thread with samples of a Gecko profile (raw or processed), one part each."""
    root = gecko_root(doc)
    if root is None:
        raise FlameFormatError(f"{source}: not a Gecko profile (expected 'meta' and 'threads')", problem=FlameProblem.UNSUPPORTED)
    prof, devtools = root
    processed = "preprocessedProfileVersion" in prof["meta"]
    interval = prof["meta"].get("interval")
    interval = float(interval) if isinstance(interval, (int, float)) and interval > 0 else 1.0
    shared: dict[str, Any] = prof["shared"] if isinstance(prof.get("shared"), dict) else {}
    threads = [t for t in _threads(prof) if isinstance(t, dict) and _has_samples(t)]
    if not threads:
        raise FlameFormatError(f"{source}: Gecko profile without sampled threads", problem=FlameProblem.NO_SAMPLES)
    parts = []
    active = 0
    for i, thread in enumerate(threads):
        name = str(thread.get("name") or f"thread {i}")
        label = f"{name} (pid {thread.get('pid')}, tid {thread.get('tid')})" if "tid" in thread else name
        if name == "GeckoMain" and active == 0 and i:
            active = i
        build = partial(_processed_profile, thread, shared, interval) if processed \
            else partial(_raw_profile, thread, devtools)
        parts.append(Part(label, "seconds", partial(build, Where(source, label), label, max_events)))
    what = "Firefox profile (processed)" if processed else "Firefox/Gecko profile"
    return group_of(f"{what}: time to the next sample", parts, active)


def _threads(prof: dict[str, Any]) -> list[Any]:
    """The profile's threads and those of its sub-processes (raw profiles nest them in ``processes``)."""
    out = list(prof["threads"])
    for sub in prof.get("processes") or []:
        if _is_gecko(sub):
            out.extend(_threads(sub))
    return out


def _has_samples(thread: dict[str, Any]) -> bool:
    samples = thread.get("samples")
    if not isinstance(samples, dict):
        return False
    return bool(samples.get("data") or samples.get("stack") or samples.get("length"))


def _column(table: object, name: str, where: Where) -> int:
    schema = table.get("schema") if isinstance(table, dict) else None
    col = schema.get(name) if isinstance(schema, dict) else None
    if not isinstance(col, int):
        raise where.error(f"expected a table with a schema naming column {name!r}")
    return col


def _raw_profile(thread: dict[str, Any], devtools: bool, where: Where, title: str, max_events: int) -> Profile:
    samples, stacks_t, frames_t = (thread.get(k) or {} for k in ("samples", "stackTable", "frameTable"))
    strings = thread.get("stringTable")
    if not isinstance(strings, list):
        raise where.error("expected a 'stringTable' list")
    s_stack, s_time = _column(samples, "stack", where.then(": samples")), _column(samples, "time", where.then(": samples"))
    prefix_c, frame_c = (_column(stacks_t, c, where.then(": stackTable")) for c in ("prefix", "frame"))
    loc_c = _column(frames_t, "location", where.then(": frameTable"))
    stack_rows, frame_rows = stacks_t.get("data") or [], frames_t.get("data") or []
    names: dict[object, str | None] = {}

    def frame_name(f: object) -> str | None:
        if f not in names:
            row = frame_rows[f] if isinstance(f, int) and 0 <= f < len(frame_rows) else None
            loc = row[loc_c] if isinstance(row, list) and len(row) > loc_c else None
            text = strings[loc] if isinstance(loc, int) and 0 <= loc < len(strings) else None
            names[f] = _kept(text, devtools)
        return names[f]

    rows = [(r[s_time], r[s_stack]) for r in samples.get("data") or [] if isinstance(r, list) and len(r) > max(s_time, s_stack)]
    return _weigh(rows, lambda s: _chain(s, stack_rows, prefix_c, frame_c, where), frame_name, title, max_events, 0.0)


def _kept(text: object, devtools: bool) -> str | None:
    if not isinstance(text, str):
        return None
    m = _LOCATION.match(text)
    if m is None:
        return None if devtools else text
    file = m.group(2)
    if file.startswith("resource:") or file == "self-hosted" or file.startswith("self-hosted:"):
        return None
    line = m.group(3)
    return f"{m.group(1)} ({file}:{line})" if line else f"{m.group(1)} ({file})"  # the column is left out


def _chain(stack: object, rows: list[Any], prefix_c: int, frame_c: int, where: Where) -> list[object]:
    """Frame indexes of ``stack``, root first."""
    out: list[object] = []
    while stack is not None:
        row = rows[stack] if isinstance(stack, int) and 0 <= stack < len(rows) else None
        if not isinstance(row, list) or len(row) <= max(prefix_c, frame_c) or len(out) > len(rows):
            raise where.then(": stackTable").error(f"no stack {stack!r} (or its prefixes loop)", FlameProblem.BAD_REFERENCE)
        out.append(row[frame_c])
        stack = row[prefix_c]
    out.reverse()
    return out


def _weigh(rows: Sequence[tuple[object, object]], chain: Callable[[object], list[object]],
           frame_name: Callable[[object], str | None], title: str, max_events: int, last_ms: float) -> Profile:
    """Stacks weighed by the time (ms) to the next sample; the last weighs ``last_ms``."""
    weights: dict[object, float] = {}
    for i, (t, stack) in enumerate(rows):
        if stack is None or not isinstance(t, (int, float)):
            continue
        nxt = rows[i + 1][0] if i + 1 < len(rows) else None
        ms = (nxt - t) if isinstance(nxt, (int, float)) else last_ms
        weights[stack] = weights.get(stack, 0.0) + ms
    out: list[tuple[list[str], float]] = []
    budget = max_events
    for stack, ms in weights.items():
        path = [n for n in (frame_name(f) for f in chain(stack)) if n is not None]
        budget -= len(path)
        if budget < 0:
            raise FlameFormatError(too_many(title, "frames in the distinct sampled stacks", max_events), problem=FlameProblem.TOO_LARGE)
        if path:
            out.append((path, ms * 1e-3))
    return build_from_stacks(out, "seconds", title)


def _processed_profile(thread: dict[str, Any], shared: dict[str, Any], interval: float, where: Where, title: str,
                       max_events: int) -> Profile:
    strings: Any = thread.get("stringArray", shared.get("stringArray", thread.get("stringTable")))
    samples, stacks_t = thread.get("samples") or {}, thread.get("stackTable") or {}
    frames_t, funcs = thread.get("frameTable") or {}, thread.get("funcTable") or {}
    cols = {"samples.stack": samples.get("stack"), "stackTable.prefix": stacks_t.get("prefix"),
            "stackTable.frame": stacks_t.get("frame"), "frameTable.func": frames_t.get("func"),
            "funcTable.name": funcs.get("name"), "stringArray": strings}
    bad = [k for k, v in cols.items() if not isinstance(v, list)]
    if bad:
        raise where.error(f"processed Firefox profile without {', '.join(bad)} columns")
    times = samples.get("time")
    if not isinstance(times, list):
        deltas = samples.get("timeDeltas")
        if not isinstance(deltas, list):
            raise where.then(": samples").error("expected a 'time' or 'timeDeltas' column")
        times, at = [], 0.0
        for d in deltas:
            at += d if isinstance(d, (int, float)) else 0.0
            times.append(at)
    prefix, frame = stacks_t["prefix"], stacks_t["frame"]
    func, names = frames_t["func"], funcs["name"]
    files, lines = funcs.get("fileName") or [], frames_t.get("line") or []
    texts: dict[object, str | None] = {}

    def frame_name(f: object) -> str | None:
        if f not in texts:
            texts[f] = (_func_text(func[f], f, names, files, lines, strings)
                        if isinstance(f, int) and 0 <= f < len(func) else None)
        return texts[f]

    stack_rows = [[p, fr] for p, fr in zip(prefix, frame, strict=False)]

    def chain(stack: object) -> list[object]:
        return _chain(stack, stack_rows, 0, 1, where)

    rows = list(zip(times, samples["stack"], strict=False))
    return _weigh(rows, chain, frame_name, title, max_events, interval)


def _func_text(fn: object, f: int, names: list[Any], files: list[Any], lines: list[Any], strings: list[Any]) -> str | None:
    def string(i: object) -> str | None:
        return strings[i] if isinstance(i, int) and 0 <= i < len(strings) and isinstance(strings[i], str) else None

    if not isinstance(fn, int) or not 0 <= fn < len(names):
        return None
    name = string(names[fn])
    if name is None:
        return None
    file = string(files[fn]) if fn < len(files) else None
    line = lines[f] if f < len(lines) and isinstance(lines[f], int) else None
    if file:
        return f"{name} ({file}:{line})" if line is not None else f"{name} ({file})"
    return name
