"""Pyroscope's flamebearer JSON (what ``/pyroscope/render?format=json`` answers) as a profile (issue 32 item 14).

``flamebearer.names`` is the string table; ``flamebearer.levels`` holds one
list per depth of quadruples ``[x offset, total, self, name index]``, the
offset counted from where the previous node of that level ended (the
"single" format). Level 0 is Pyroscope's ``total`` root, left out here. A
node's parent is the node one level up whose span holds its start. Bounded:
at most :data:`MAX_NODES` nodes; anything malformed is a FlameFormatError.
"""

from __future__ import annotations

from typing import Any

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem, Where
from gpulens.analysis.flame.model import Profile, build_from_stacks

MAX_NODES = 5_000_000
UNITS = {"bytes": "bytes", "samples": "samples", "objects": "samples", "goroutines": "samples",
         "lock_samples": "samples", "lock_nanoseconds": "seconds", "nanoseconds": "seconds"}


def from_flamebearer(doc: object, source: str = "pyroscope") -> Profile:
    """A profile from a render answer (``{"flamebearer": …, "metadata": …}``).

    Raises:
        FlameFormatError: not a single-format flamebearer, or malformed.
    """
    fb, meta = _flamebearer_and_metadata(doc, source)
    unit, scale = _unit_and_scale(meta)
    levels = _Levels(fb["names"], scale, source)
    for depth, level in enumerate(fb["levels"]):
        levels.add(depth, level)
    title = str(meta.get("appName") or meta.get("name") or source)
    return build_from_stacks(levels.stacks, unit, title)


def _flamebearer_and_metadata(doc: object, source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The checked ``flamebearer`` and the ``metadata`` (empty when it is not an object)."""
    fb = doc.get("flamebearer") if isinstance(doc, dict) else None
    meta = doc.get("metadata", {}) if isinstance(doc, dict) else {}
    if not isinstance(fb, dict) or not isinstance(fb.get("names"), list) or not isinstance(fb.get("levels"), list):
        raise FlameFormatError(f"{source}: not a Pyroscope flamebearer (no flamebearer.names / levels)", problem=FlameProblem.UNSUPPORTED)
    if not isinstance(meta, dict):
        return fb, {}
    if meta.get("format", "single") != "single":
        raise FlameFormatError(f"{source}: flamebearer format {meta.get('format')!r}: only 'single' is read", problem=FlameProblem.UNSUPPORTED)
    return fb, meta


def _unit_and_scale(meta: dict[str, Any]) -> tuple[str, float]:
    """Our unit for the metadata's ``units``, and the factor a node's value is multiplied by."""
    unit_name = str(meta.get("units", "samples"))
    rate = meta.get("sampleRate")
    if unit_name == "samples" and isinstance(rate, (int, float)) and rate > 0:
        return "seconds", 1.0 / rate  # CPU samples at a known rate are time
    return UNITS.get(unit_name, "samples"), 1e-9 if unit_name.endswith("nanoseconds") else 1.0


class _Levels:
    """Stacks (root first) with self values, read one level of quadruples at a time."""

    def __init__(self, names: list[Any], scale: float, source: str) -> None:
        self.names = names
        self.scale = scale
        self.source = source
        self.prev: list[tuple[int, int, tuple[str, ...]]] = []  # (start, end, path) of the level above
        self.stacks: list[tuple[list[str], float]] = []
        self.count = 0

    def add(self, depth: int, level: object) -> None:
        """Read level ``depth``; its nodes' parents are in the level read before it."""
        if not isinstance(level, list) or len(level) % 4:
            raise FlameFormatError(f"{self.source}: level {depth} is not a list of quadruples", at=f"level {depth}")
        prev = self.prev
        here: list[tuple[int, int, tuple[str, ...]]] = []
        x = k = 0  # both levels run left to right: the parent pointer only moves right
        for j in range(0, len(level), 4):
            offset, total, self_, name_i = self._quadruple(level, depth, j)
            x += offset
            while k < len(prev) and prev[k][1] <= x and not prev[k][0] == x == prev[k][1]:
                k += 1
            parent = prev[k] if k < len(prev) and prev[k][0] <= x else None
            if depth and parent is None:
                raise FlameFormatError(f"{self.source}: level {depth} node {j // 4} has no parent above it",
                                       problem=FlameProblem.BAD_REFERENCE, at=f"level {depth} node {j // 4}")
            path = (*parent[2], str(self.names[name_i])) if parent is not None else ()  # level 0: Pyroscope's 'total'
            if self_ and path:
                self.stacks.append((list(path), self_ * self.scale))
            here.append((x, x + total, path))
            x += total
        self.prev = here

    def _quadruple(self, level: list[Any], depth: int, j: int) -> tuple[int, int, int, int]:
        """The checked ``[x offset, total, self, name index]`` at ``level[j]``, counted against the bound."""
        self.count += 1
        if self.count > MAX_NODES:
            raise FlameFormatError(f"{self.source}: over {MAX_NODES:,} nodes", problem=FlameProblem.TOO_LARGE)
        offset, total, self_, name_i = level[j:j + 4]
        if not all(isinstance(v, int) and v >= 0 for v in (offset, total, self_, name_i)):
            raise Where(self.source, f"level {depth} node {j // 4}").error("malformed quadruple")
        if name_i >= len(self.names):
            raise Where(self.source, f"level {depth} node {j // 4}").error("malformed quadruple", FlameProblem.BAD_REFERENCE)
        return offset, total, self_, name_i
