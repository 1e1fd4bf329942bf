"""Speedscope JSON (https://www.speedscope.app/file-format-schema.json).

Every profile of a file imports: sampled ones (py-spy's ``--format
speedscope``, one per thread) and evented ones (``O``/``C`` open/close
events: what speedscope itself exports). Producers differ from the schema
in small ways that speedscope accepts, so gpulens does too: py-spy writes
``"activeProfileIndex": null`` and ``"col": null``. Export writes one sampled
profile that validates against the schema.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem, Where
from gpulens.analysis.flame.group import Part, ProfileGroup, group_of
from gpulens.analysis.flame.labels import parse_frame
from gpulens.analysis.flame.model import Profile, build_from_stacks, subtree_stacks
from gpulens.analysis.flame.units import unit_kind, unit_label

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
_TIME_UNITS = {"nanoseconds": 1e-9, "microseconds": 1e-6, "milliseconds": 1e-3, "seconds": 1.0}
VALUE_UNITS = ("none", "bytes", *_TIME_UNITS)
MAX_SAMPLES = 50_000_000


def _frame_text(frame: object, where: Where) -> str:
    if not isinstance(frame, dict) or not isinstance(frame.get("name"), str):
        raise where.error("expected an object with a string 'name'")
    name: str = frame["name"]
    file = frame.get("file")
    if isinstance(file, str) and file:
        line = frame.get("line")
        return f"{name} ({file}:{line})" if isinstance(line, int) else f"{name} ({file})"
    return name


def _index(value: object, n: int, where: Where, field: str = "", k: int = 0) -> int:
    """``value`` as a frame index below ``n``; else the error at ``where``, in item ``k`` of ``field`` if one is
    named (``".samples"``): a place made only for the error, not for every frame of a large file."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < n:
        if field:
            where = where.then(f"{field}[{k}]")
        raise where.error(f"frame index {value!r} out of range 0..{n - 1}", FlameProblem.BAD_REFERENCE)
    return value


def _unit_of(prof: dict[str, Any], where: Where) -> tuple[str, float]:
    name = prof.get("unit", "none")
    if name not in VALUE_UNITS:
        raise where.then(".unit").error(f"{name!r} is not a speedscope unit ({', '.join(VALUE_UNITS)})")
    if name in _TIME_UNITS:
        return "seconds", _TIME_UNITS[name]
    return ("bytes" if name == "bytes" else "samples"), 1.0


def speedscope_group(doc: object, source: str = "input") -> ProfileGroup:
    """Every profile of a speedscope document, built on demand; ``active`` from ``activeProfileIndex``.

    Raises FlameFormatError naming the JSON field that is wrong (profiles are
    checked when built, so a bad one fails when picked, naming its index).
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("profiles"), list):
        raise FlameFormatError(f"{source}: not a speedscope file (no 'profiles' list)", problem=FlameProblem.UNSUPPORTED)
    shared = doc.get("shared")
    raw_frames = shared.get("frames") if isinstance(shared, dict) else None
    if not isinstance(raw_frames, list):
        raise Where(source, "shared.frames").error("expected a list")
    frames = [_frame_text(f, Where(source, f"shared.frames[{i}]")) for i, f in enumerate(raw_frames)]
    profiles = doc["profiles"]
    if not profiles:
        raise Where(source, "profiles").error("empty", FlameProblem.NO_SAMPLES)
    idx = doc.get("activeProfileIndex")
    if idx is None:  # py-spy writes null: speedscope shows the first profile
        idx = 0
    if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < len(profiles):
        raise Where(source, "activeProfileIndex").error(f"{idx!r} out of range 0..{len(profiles) - 1}",
                                                        FlameProblem.BAD_REFERENCE)
    parts = []
    for k, prof in enumerate(profiles):
        where = Where(source, f"profiles[{k}]")
        if not isinstance(prof, dict):
            raise where.error("expected an object")
        unit, _ = _unit_of(prof, where)
        name = str(prof.get("name") or f"profile {k}")
        parts.append(Part(name, unit, partial(_build, prof, frames, where)))
    return group_of(str(doc.get("name") or ""), parts, idx)


def _build(prof: dict[str, Any], frames: list[str], where: Where) -> Profile:
    unit, scale = _unit_of(prof, where)
    title = str(prof.get("name", ""))
    kind = prof.get("type")
    if kind == "sampled":
        return build_from_stacks(_sampled(prof, frames, where, scale), unit, title)
    if kind == "evented":
        return build_from_stacks(_evented(prof, frames, where, scale), unit, title)
    raise where.then(".type").error(f"expected 'sampled' or 'evented', got {kind!r}")


def _sampled(prof: dict[str, Any], frames: list[str], where: Where, scale: float) -> list[tuple[list[str], float]]:
    samples, weights = prof.get("samples"), prof.get("weights")
    if weights is None and isinstance(samples, list):
        weights = [1] * len(samples)  # the schema requires weights; some producers leave them out
    if not isinstance(samples, list) or not isinstance(weights, list) or len(samples) != len(weights):
        raise where.error("'samples' and 'weights' must be lists of equal length")
    if len(samples) > MAX_SAMPLES:
        raise where.error(f"more than {MAX_SAMPLES} samples", FlameProblem.TOO_LARGE)
    n = len(frames)
    stacks = []
    for k, (stack, weight) in enumerate(zip(samples, weights, strict=False)):
        if not isinstance(stack, list) or isinstance(weight, bool) or not isinstance(weight, (int, float)) \
                or not 0 <= weight < math.inf:
            raise where.then(f".samples[{k}]").error("expected a list of frame indices and a finite weight >= 0")
        stacks.append(([frames[_index(v, n, where, ".samples", k)] for v in stack], weight * scale))
    return stacks


def _evented(prof: dict[str, Any], frames: list[str], where: Where, scale: float) -> list[tuple[list[str], float]]:
    events = prof.get("events")
    if not isinstance(events, list) or len(events) > MAX_SAMPLES:
        raise where.then(".events").error(f"expected a list (at most {MAX_SAMPLES})",
                                          FlameProblem.TOO_LARGE if isinstance(events, list) else FlameProblem.MALFORMED)
    n = len(frames)
    open_frames: list[int] = []
    stacks: list[tuple[list[str], float]] = []
    last = prof.get("startValue", 0)
    if not isinstance(last, (int, float)) or not math.isfinite(last):
        last = 0
    for k, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("type") not in ("O", "C") or not isinstance(ev.get("at"), (int, float)) \
                or not math.isfinite(ev["at"]):
            raise where.then(f".events[{k}]").error("expected {type: 'O'|'C', frame, at}")
        at = ev["at"]
        if at < last:
            raise where.then(f".events[{k}]").error(f"'at' {at} goes back in time (previous {last})")
        if open_frames and at > last:
            stacks.append(([frames[f] for f in open_frames], (at - last) * scale))
        last = at
        fi = _index(ev.get("frame"), n, where, ".events", k)
        if ev["type"] == "O":
            open_frames.append(fi)
        elif not open_frames or open_frames[-1] != fi:
            raise where.then(f".events[{k}]").error(f"closes frame {fi} but the innermost open frame is "
                          f"{open_frames[-1] if open_frames else 'none'}")
        else:
            open_frames.pop()
    return stacks


def _frame_json(text: str) -> dict[str, Any]:
    info = parse_frame(text)
    # Split only what _frame_text rebuilds byte for byte, so a round trip keeps names.
    if info.file and info.line is not None and text == f"{info.name} ({info.file}:{info.line})":
        return {"name": info.name, "file": info.file, "line": info.line}
    return {"name": text}


def to_speedscope(profile: Profile, root: int = 0) -> dict[str, Any]:
    """A speedscope document with one sampled profile of ``root``'s subtree (weights in the profile's unit;
    event counts, which speedscope has no unit for, as ``none`` with the event in the name).

    A non-root ``root`` keeps its ancestors out: the subtree's stacks start at its frame.
    """
    frame_index: dict[str, int] = {}
    shared: list[dict[str, Any]] = []
    samples: list[list[int]] = []
    weights: list[float] = []
    stacks = profile.stacks() if root == 0 else subtree_stacks(profile, root)
    if root == 0 and profile.node_self[0]:
        samples.append([])
        weights.append(profile.node_self[0])
    for frames, value in stacks:
        row = []
        for text in frames:
            fi = frame_index.get(text)
            if fi is None:
                fi = frame_index[text] = len(shared)
                shared.append(_frame_json(text))
            row.append(fi)
        samples.append(row)
        weights.append(value)
    weights = [int(v) if profile.unit != "seconds" and v == int(v) else v for v in weights]
    kind = unit_kind(profile.unit)
    unit = {"samples": "none", "seconds": "seconds", "bytes": "bytes", "events": "none"}[kind]
    name = profile.title or "gpulens"
    if root:
        name = f"{name} (focus: {profile.label(root)})"
    if kind == "events":  # speedscope has no unit for event counts: the name says it
        name = f"{name} · weights: {unit_label(profile.unit)}"
    return {
        "$schema": SCHEMA,
        "shared": {"frames": shared},
        "profiles": [
            {"type": "sampled", "name": name, "unit": unit,
             "startValue": 0, "endValue": sum(weights), "samples": samples, "weights": weights}
        ],
        "activeProfileIndex": 0,
        "exporter": "gpulens",
        "name": name,
    }


