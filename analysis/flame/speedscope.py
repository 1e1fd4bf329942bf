"""Speedscope JSON (https://www.speedscope.app/file-format-schema.json).

Sampled profiles (py-spy's ``--format speedscope``) and evented ones
(``O``/``C`` open/close events) import; export writes one sampled profile.
"""

from __future__ import annotations

import json
import math
from typing import Any

from gpulens.analysis.flame.errors import FlameFormatError
from gpulens.analysis.flame.labels import parse_frame
from gpulens.analysis.flame.model import Profile, build_from_stacks

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
_TIME_UNITS = {"nanoseconds": 1e-9, "microseconds": 1e-6, "milliseconds": 1e-3, "seconds": 1.0}
MAX_SAMPLES = 50_000_000


def _frame_text(frame: Any, where: str) -> str:
    if not isinstance(frame, dict) or not isinstance(frame.get("name"), str):
        raise FlameFormatError(f"{where}: expected an object with a string 'name'")
    name: str = frame["name"]
    file = frame.get("file")
    if isinstance(file, str) and file:
        line = frame.get("line")
        return f"{name} ({file}:{line})" if isinstance(line, int) else f"{name} ({file})"
    return name


def _index(value: Any, n: int, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < n:
        raise FlameFormatError(f"{where}: frame index {value!r} out of range 0..{n - 1}")
    return value


def parse_speedscope(doc: Any, source: str = "input", profile_index: int | None = None) -> Profile:
    """Import one profile of a speedscope document (default: ``activeProfileIndex``).

    Unit ``none`` -> samples, time units -> seconds, ``bytes`` -> bytes.
    Raises FlameFormatError naming the JSON field that is wrong.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("profiles"), list):
        raise FlameFormatError(f"{source}: not a speedscope file (no 'profiles' list)")
    raw_frames = doc.get("shared", {}).get("frames") if isinstance(doc.get("shared"), dict) else None
    if not isinstance(raw_frames, list):
        raise FlameFormatError(f"{source}: shared.frames: expected a list")
    frames = [_frame_text(f, f"{source}: shared.frames[{i}]") for i, f in enumerate(raw_frames)]
    profiles = doc["profiles"]
    if not profiles:
        raise FlameFormatError(f"{source}: profiles: empty")
    idx = profile_index if profile_index is not None else doc.get("activeProfileIndex", 0)
    if not isinstance(idx, int) or not 0 <= idx < len(profiles):
        raise FlameFormatError(f"{source}: activeProfileIndex: {idx!r} out of range")
    prof = profiles[idx]
    where = f"{source}: profiles[{idx}]"
    if not isinstance(prof, dict):
        raise FlameFormatError(f"{where}: expected an object")
    unit_name = prof.get("unit", "none")
    scale = _TIME_UNITS.get(unit_name, 1.0)
    unit = "seconds" if unit_name in _TIME_UNITS else "bytes" if unit_name == "bytes" else "samples"
    title = str(prof.get("name", "")) or str(doc.get("name", ""))
    kind = prof.get("type")
    n = len(frames)
    if kind == "sampled":
        samples, weights = prof.get("samples"), prof.get("weights")
        if not isinstance(samples, list) or not isinstance(weights, list) or len(samples) != len(weights):
            raise FlameFormatError(f"{where}: 'samples' and 'weights' must be lists of equal length")
        if len(samples) > MAX_SAMPLES:
            raise FlameFormatError(f"{where}: more than {MAX_SAMPLES} samples")
        stacks = []
        for k, (stack, weight) in enumerate(zip(samples, weights, strict=False)):
            if not isinstance(stack, list) or not isinstance(weight, (int, float)) or not 0 <= weight < math.inf:
                raise FlameFormatError(f"{where}.samples[{k}]: expected a list of frame indices and a finite weight >= 0")
            stacks.append(([frames[_index(v, n, f"{where}.samples[{k}]")] for v in stack], weight * scale))
        return build_from_stacks(stacks, unit, title)
    if kind == "evented":
        events = prof.get("events")
        if not isinstance(events, list) or len(events) > MAX_SAMPLES:
            raise FlameFormatError(f"{where}.events: expected a list (at most {MAX_SAMPLES})")
        open_frames: list[int] = []
        stacks_ev: list[tuple[list[str], float]] = []
        last = prof.get("startValue", 0)
        for k, ev in enumerate(events):
            w = f"{where}.events[{k}]"
            if not isinstance(ev, dict) or ev.get("type") not in ("O", "C") or not isinstance(ev.get("at"), (int, float)) \
                    or not math.isfinite(ev["at"]):
                raise FlameFormatError(f"{w}: expected {{type: 'O'|'C', frame, at}}")
            at = ev["at"]
            if at < last:
                raise FlameFormatError(f"{w}: 'at' {at} goes back in time (previous {last})")
            if open_frames and at > last:
                stacks_ev.append(([frames[f] for f in open_frames], (at - last) * scale))
            last = at
            fi = _index(ev.get("frame"), n, w)
            if ev["type"] == "O":
                open_frames.append(fi)
            elif not open_frames or open_frames[-1] != fi:
                raise FlameFormatError(f"{w}: closes frame {fi} but the innermost open frame is "
                                       f"{open_frames[-1] if open_frames else 'none'}")
            else:
                open_frames.pop()
        return build_from_stacks(stacks_ev, unit, title)
    raise FlameFormatError(f"{where}.type: expected 'sampled' or 'evented', got {kind!r}")


def _frame_json(text: str) -> dict[str, Any]:
    info = parse_frame(text)
    # Split only what _frame_text rebuilds byte for byte, so a round trip keeps names.
    if info.file and info.line is not None and text == f"{info.name} ({info.file}:{info.line})":
        return {"name": info.name, "file": info.file, "line": info.line}
    return {"name": text}


def to_speedscope(profile: Profile) -> dict[str, Any]:
    """A speedscope document with one sampled profile (weights in the profile's unit)."""
    frame_index: dict[str, int] = {}
    shared: list[dict[str, Any]] = []
    samples: list[list[int]] = []
    weights: list[float] = []
    for frames, value in profile.stacks():
        row = []
        for text in frames:
            fi = frame_index.get(text)
            if fi is None:
                fi = frame_index[text] = len(shared)
                shared.append(_frame_json(text))
            row.append(fi)
        samples.append(row)
        weights.append(int(value) if profile.unit != "seconds" and value == int(value) else value)
    unit = {"samples": "none", "seconds": "seconds", "bytes": "bytes"}[profile.unit]
    total = sum(weights)
    return {
        "$schema": SCHEMA,
        "shared": {"frames": shared},
        "profiles": [
            {"type": "sampled", "name": profile.title or "gpulens", "unit": unit,
             "startValue": 0, "endValue": total, "samples": samples, "weights": weights}
        ],
        "activeProfileIndex": 0,
        "exporter": "gpulens",
        "name": profile.title or "gpulens",
    }


def load_speedscope_bytes(data: bytes, source: str = "input") -> Profile:
    """Decode JSON bytes and import them; bad JSON -> FlameFormatError with line and column."""
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise FlameFormatError(f"{source}: invalid JSON: {err}") from None
    return parse_speedscope(doc, source)
