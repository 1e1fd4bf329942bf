"""Write a :class:`~.model.Profile` (or one node's subtree) as folded stacks or speedscope JSON.

Folded counts are integers in the unit :data:`~.folded.FOLDED_UNITS` names
(samples, µs, bytes, events), so flamegraph.pl reads every line; the
:class:`Written` record says which (``events (cycles)``: the event is named), for the message the user reads.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from gpulens.analysis.flame.errors import FlameError
from gpulens.analysis.flame.folded import FOLDED_SUFFIX, FOLDED_UNITS, folded_lines
from gpulens.analysis.flame.model import Profile, subtree_stacks
from gpulens.analysis.flame.speedscope import to_speedscope
from gpulens.analysis.flame.units import unit_kind, unit_label
from gpulens.core.safefs import write_new_file


@dataclass(frozen=True, slots=True)
class Written:
    """What an export wrote: ``lines`` stacks (or samples) summing to ``total`` ``unit``."""

    path: str
    format: str
    lines: int
    total: float
    unit: str

    def message(self) -> str:
        """``wrote 47 stacks to out.us.folded (integer µs, total 8,123 µs)``."""
        shown = f"{self.total:,.0f}" if self.total == int(self.total) else f"{self.total:,.6g}"
        what = "integer " + self.unit if self.format == "folded" else self.unit
        return f"wrote {self.lines} stacks to {self.path} ({self.format}, weights in {what}; total {shown} {self.unit})"


def check_writable(path: str, what: str = "output") -> None:
    """Fail early (before minutes of sampling) when ``path`` cannot be written.

    Raises FlameError naming ``what`` (e.g. the flag) and the path.
    """
    if os.path.isdir(path):
        raise FlameError(f"{what} {path}: is a directory; expected a file name")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise FlameError(f"{what} {path}: directory {parent} does not exist")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise FlameError(f"{what} {path}: not writable")
    if not os.path.exists(path) and not os.access(parent, os.W_OK | os.X_OK):
        raise FlameError(f"{what} {path}: cannot create files in {parent}")


def _write(path: str, text: str | bytes) -> None:
    try:
        write_new_file(path, text.encode("utf-8") if isinstance(text, str) else text)
    except OSError as err:
        raise FlameError(f"{path}: cannot write: {err.strerror or err}") from None


def default_name(profile: Profile, fmt: str, stem: str = "flame") -> str:
    """A file name that states the unit: ``flame.us.folded``, ``flame.bytes.folded``, ``flame.speedscope.json``."""
    return stem + (FOLDED_SUFFIX[unit_kind(profile.unit)] if fmt == "folded" else ".speedscope.json")


def export_folded(profile: Profile, path: str, root: int = 0) -> Written:
    """Write ``frame;frame COUNT`` lines of ``root``'s subtree with integer counts. Raises FlameError."""
    if root:
        stacks = list(subtree_stacks(profile, root))
    else:
        stacks = ([([], profile.node_self[0])] if profile.node_self[0] else []) + list(profile.stacks())
    lines, total = folded_lines(stacks, profile.unit)
    _write(path, "\n".join(lines) + ("\n" if lines else ""))
    kind = unit_kind(profile.unit)
    return Written(path, "folded", len(lines), total, unit_label(profile.unit) if kind == "events" else FOLDED_UNITS[kind][0])


def export_speedscope(profile: Profile, path: str, root: int = 0) -> Written:
    """Write a speedscope document with one sampled profile of ``root``'s subtree. Raises FlameError."""
    doc = to_speedscope(profile, root)
    _write(path, json.dumps(doc, separators=(",", ":")))
    prof = doc["profiles"][0]
    unit = unit_label(profile.unit) if prof["unit"] == "none" else prof["unit"]
    return Written(path, "speedscope", len(prof["samples"]), prof["endValue"], unit)


def export_pprof(profile: Profile, path: str, root: int = 0, labels: dict[str, str] | None = None) -> Written:
    """Write ``root``'s subtree as gzipped pprof (``go tool pprof``, Pyroscope, Grafana). Raises FlameError."""
    from gpulens.analysis.flame.pprof import sample_type, to_pprof

    stacks = list(subtree_stacks(profile, root)) if root else list(profile.stacks())
    _write(path, to_pprof(stacks, profile.unit, labels=labels))
    unit = sample_type(profile.unit)[1]  # "nanoseconds": seconds are written as integer ns
    total = sum(round(v * 1e9) if unit == "nanoseconds" else v for _, v in stacks)
    return Written(path, "pprof", len(stacks), total, unit_label(profile.unit) if unit == "count" else unit)
