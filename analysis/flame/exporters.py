"""A :class:`~.model.Profile` (or one node's subtree) as folded stacks, speedscope JSON or pprof bytes.

Folded counts are integers in the unit :data:`~.folded.FOLDED_UNITS` names
(samples, µs, bytes, events), so flamegraph.pl reads every line; the
:class:`Exported` record says which (``events (cycles)``: the event is named), for the message the user reads.
Nothing here touches the file system: writing the bytes where the user asked, and checking that place
first, is :mod:`gpulens.sources.flame_export`'s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gpulens.analysis.flame.folded import FOLDED_SUFFIX, FOLDED_UNITS, folded_lines
from gpulens.analysis.flame.model import Profile, subtree_stacks
from gpulens.analysis.flame.speedscope import to_speedscope
from gpulens.analysis.flame.units import unit_kind, unit_label


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


@dataclass(frozen=True, slots=True)
class Exported:
    """An export's bytes and what they hold: ``lines`` stacks (or samples) summing to ``total`` ``unit``."""

    data: bytes
    format: str
    lines: int
    total: float
    unit: str

    def written(self, path: str) -> Written:
        """The record of these bytes written to ``path`` (its :meth:`Written.message` is the user's line)."""
        return Written(path, self.format, self.lines, self.total, self.unit)


def default_name(profile: Profile, fmt: str, stem: str = "flame") -> str:
    """A file name that states the unit: ``flame.us.folded``, ``flame.bytes.folded``, ``flame.speedscope.json``."""
    return stem + (FOLDED_SUFFIX[unit_kind(profile.unit)] if fmt == "folded" else ".speedscope.json")


def folded_export(profile: Profile, root: int = 0) -> Exported:
    """``frame;frame COUNT`` lines (UTF-8) of ``root``'s subtree with integer counts."""
    if root:
        stacks = list(subtree_stacks(profile, root))
    else:
        stacks = ([([], profile.node_self[0])] if profile.node_self[0] else []) + list(profile.stacks())
    lines, total = folded_lines(stacks, profile.unit)
    data = ("\n".join(lines) + ("\n" if lines else "")).encode("utf-8")
    kind = unit_kind(profile.unit)
    return Exported(data, "folded", len(lines), total,
                    unit_label(profile.unit) if kind == "events" else FOLDED_UNITS[kind][0])


def speedscope_export(profile: Profile, root: int = 0) -> Exported:
    """A speedscope document (compact UTF-8 JSON) with one sampled profile of ``root``'s subtree."""
    doc = to_speedscope(profile, root)
    prof = doc["profiles"][0]
    unit = unit_label(profile.unit) if prof["unit"] == "none" else prof["unit"]
    return Exported(json.dumps(doc, separators=(",", ":")).encode("utf-8"), "speedscope",
                    len(prof["samples"]), prof["endValue"], unit)


def pprof_export(profile: Profile, root: int = 0, labels: dict[str, str] | None = None) -> Exported:
    """``root``'s subtree as gzipped pprof (``go tool pprof``, Pyroscope, Grafana)."""
    from gpulens.analysis.flame.pprof import sample_type, to_pprof

    stacks = list(subtree_stacks(profile, root)) if root else list(profile.stacks())
    data = to_pprof(stacks, profile.unit, labels=labels)
    unit = sample_type(profile.unit)[1]  # "nanoseconds": seconds are written as integer ns
    total = sum(round(v * 1e9) if unit == "nanoseconds" else v for _, v in stacks)
    return Exported(data, "pprof", len(stacks), total, unit_label(profile.unit) if unit == "count" else unit)
