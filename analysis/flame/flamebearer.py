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

from gpulens.analysis.flame.errors import FlameFormatError
from gpulens.analysis.flame.model import Profile, build_from_stacks

MAX_NODES = 5_000_000
UNITS = {"bytes": "bytes", "samples": "samples", "objects": "samples", "goroutines": "samples",
         "lock_samples": "samples", "lock_nanoseconds": "seconds", "nanoseconds": "seconds"}


def from_flamebearer(doc: Any, source: str = "pyroscope") -> Profile:
    """A profile from a render answer (``{"flamebearer": …, "metadata": …}``).

    Raises:
        FlameFormatError: not a single-format flamebearer, or malformed.
    """
    fb = doc.get("flamebearer") if isinstance(doc, dict) else None
    meta = doc.get("metadata", {}) if isinstance(doc, dict) else {}
    if not isinstance(fb, dict) or not isinstance(fb.get("names"), list) or not isinstance(fb.get("levels"), list):
        raise FlameFormatError(f"{source}: not a Pyroscope flamebearer (no flamebearer.names / levels)")
    if isinstance(meta, dict) and meta.get("format", "single") != "single":
        raise FlameFormatError(f"{source}: flamebearer format {meta.get('format')!r}: only 'single' is read")
    names: list[Any] = fb["names"]
    unit_name = str(meta.get("units", "samples")) if isinstance(meta, dict) else "samples"
    unit = UNITS.get(unit_name, "samples")
    scale = 1e-9 if unit_name.endswith("nanoseconds") else 1.0
    rate = meta.get("sampleRate") if isinstance(meta, dict) else None
    if unit_name == "samples" and isinstance(rate, (int, float)) and rate > 0:
        unit, scale = "seconds", 1.0 / rate  # CPU samples at a known rate are time
    prev: list[tuple[int, int, tuple[str, ...]]] = []  # (start, end, path) of the level above
    stacks: list[tuple[list[str], float]] = []
    count = 0
    for depth, level in enumerate(fb["levels"]):
        if not isinstance(level, list) or len(level) % 4:
            raise FlameFormatError(f"{source}: level {depth} is not a list of quadruples")
        here: list[tuple[int, int, tuple[str, ...]]] = []
        x = k = 0  # both levels run left to right: the parent pointer only moves right
        for j in range(0, len(level), 4):
            count += 1
            if count > MAX_NODES:
                raise FlameFormatError(f"{source}: over {MAX_NODES:,} nodes")
            offset, total, self_, name_i = level[j:j + 4]
            if not all(isinstance(v, int) and v >= 0 for v in (offset, total, self_, name_i)) or name_i >= len(names):
                raise FlameFormatError(f"{source}: level {depth} node {j // 4}: malformed quadruple")
            x += offset
            while k < len(prev) and prev[k][1] <= x and not prev[k][0] == x == prev[k][1]:
                k += 1
            parent = prev[k] if k < len(prev) and prev[k][0] <= x else None
            if depth and parent is None:
                raise FlameFormatError(f"{source}: level {depth} node {j // 4} has no parent above it")
            path = (*parent[2], str(names[name_i])) if parent is not None else ()  # level 0: Pyroscope's 'total'
            if self_ and path:
                stacks.append((list(path), self_ * scale))
            here.append((x, x + total, path))
            x += total
        prev = here
    title = str(meta.get("appName") or meta.get("name") or source) if isinstance(meta, dict) else source
    return build_from_stacks(stacks, unit, title)
