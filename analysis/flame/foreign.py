"""JSON profiles of other tools: read Chrome/V8 and Firefox ones, name the rest when refusing them.

:func:`foreign_group` reads a parsed JSON document that is a Chrome
``.cpuprofile`` / ``.heapprofile`` (:mod:`.v8profile`) or a Firefox/Gecko
profile (:mod:`.gecko`). :func:`unsupported_json` names the JSON formats
gpulens knows but does not read (sniffed as speedscope's ``import/index.ts``
sniffs them): an :class:`UnsupportedJson` whose kind is the format and whose
``str()`` says what the file is and how to convert it (the refusal's words).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem
from gpulens.analysis.flame.gecko import gecko_group, gecko_root
from gpulens.analysis.flame.group import ProfileGroup, single
from gpulens.analysis.flame.v8profile import (
    cpuprofile_profile,
    heapprofile_profile,
    is_cpuprofile,
    is_heapprofile,
    is_old_cpuprofile,
)
from gpulens.core.reasons import Reason, ReasonText

_SPEEDSCOPE_HINT = "open it in speedscope (https://www.speedscope.app) and export speedscope JSON, which gpulens reads"


def foreign_kind(doc: object) -> str | None:
    """``cpuprofile``, ``heapprofile`` or ``gecko`` for a document :func:`foreign_group` reads, else None."""
    if is_cpuprofile(doc) or is_old_cpuprofile(doc):
        return "cpuprofile"
    if is_heapprofile(doc):
        return "heapprofile"
    if gecko_root(doc) is not None:
        return "gecko"
    return None


def foreign_group(doc: object, kind: str, source: str, title: str, max_events: int) -> ProfileGroup:
    """The profiles of a document of ``kind`` (see :func:`foreign_kind`)."""
    if kind == "gecko":
        return gecko_group(doc, source, max_events)
    if kind not in ("cpuprofile", "heapprofile"):
        raise FlameFormatError(f"{source}: unknown format {kind!r}", problem=FlameProblem.UNSUPPORTED)
    if not isinstance(doc, dict):
        raise FlameFormatError(f"{source}: not a {kind} (expected a JSON object)", problem=FlameProblem.UNSUPPORTED)
    if kind == "cpuprofile":
        return single(cpuprofile_profile(doc, source, "Chrome CPU profile: time", max_events))
    return single(heapprofile_profile(doc, source, "Chrome heap profile: allocated bytes", max_events))


class UnsupportedJsonKind(enum.Enum):
    """The JSON profile formats gpulens names but does not read (none fills a field of :class:`UnsupportedJson`)."""

    SAFARI = "safari"  # a Safari timeline recording
    STACKPROF = "stackprof"  # a stackprof (Ruby) profile
    GHC = "ghc"  # a GHC JSON profile (+RTS -pj)
    V8_LOG = "v8-log"  # a preprocessed V8 log (node --prof-process --preprocess)
    V8_TREE = "v8-tree"  # a V8 profile tree of an unknown kind ('head' without samples or sizes)


@dataclass(frozen=True, slots=True)
class UnsupportedJson(Reason):
    """A JSON profile of a format gpulens knows but does not read: ``kind`` names it; ``str()`` is
    ``<format>: not supported (how to convert it)``, the refusal's words."""

    kind: UnsupportedJsonKind

    TEXT: ClassVar[ReasonText] = {
        UnsupportedJsonKind.SAFARI: "Safari timeline recording: not supported (" + _SPEEDSCOPE_HINT + ")",
        UnsupportedJsonKind.STACKPROF: ("stackprof (Ruby) profile: not supported (fold it with "
                                        "`stackprof --stackcollapse FILE > out.folded`, or " + _SPEEDSCOPE_HINT + ")"),
        UnsupportedJsonKind.GHC: "GHC JSON profile (`+RTS -pj`): not supported (" + _SPEEDSCOPE_HINT + ")",
        UnsupportedJsonKind.V8_LOG: ("V8 log (`node --prof-process --preprocess`): not supported ("
                                     + _SPEEDSCOPE_HINT + ")"),
        UnsupportedJsonKind.V8_TREE: ("V8 profile tree of an unknown kind (a 'head' without samples or sizes): "
                                      "not supported (" + _SPEEDSCOPE_HINT + ")"),
    }


def unsupported_json(doc: object) -> UnsupportedJson | None:
    """The JSON profile format gpulens knows but does not read that ``doc`` is, or None."""
    if not isinstance(doc, dict):
        return None
    rec = doc.get("recording")
    if isinstance(rec, dict) and "sampleStackTraces" in rec:
        return UnsupportedJson(UnsupportedJsonKind.SAFARI)
    if "mode" in doc and "frames" in doc and ("raw_timestamp_deltas" in doc or "raw" in doc):
        return UnsupportedJson(UnsupportedJsonKind.STACKPROF)
    if "rts_arguments" in doc and "initial_capabilities" in doc:
        return UnsupportedJson(UnsupportedJsonKind.GHC)
    if "code" in doc and "functions" in doc and "ticks" in doc:
        return UnsupportedJson(UnsupportedJsonKind.V8_LOG)
    if isinstance(doc.get("head"), dict):
        return UnsupportedJson(UnsupportedJsonKind.V8_TREE)
    return None
