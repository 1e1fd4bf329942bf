"""JSON profiles of other tools: read Chrome/V8 and Firefox ones, name the rest when refusing them.

:func:`foreign_group` reads a parsed JSON document that is a Chrome
``.cpuprofile`` / ``.heapprofile`` (:mod:`.v8profile`) or a Firefox/Gecko
profile (:mod:`.gecko`). :func:`unsupported_json` names the JSON formats
gpulens knows but does not read (sniffed as speedscope's ``import/index.ts``
sniffs them), so the refusal says what the file is and how to convert it.
"""

from __future__ import annotations

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


def unsupported_json(doc: object) -> str | None:
    """``<format>: not supported (hint)`` for a JSON profile format gpulens knows but does not read."""
    if not isinstance(doc, dict):
        return None
    rec = doc.get("recording")
    if isinstance(rec, dict) and "sampleStackTraces" in rec:
        return f"Safari timeline recording: not supported ({_SPEEDSCOPE_HINT})"
    if "mode" in doc and "frames" in doc and ("raw_timestamp_deltas" in doc or "raw" in doc):
        return ("stackprof (Ruby) profile: not supported (fold it with `stackprof --stackcollapse FILE > out.folded`, "
                f"or {_SPEEDSCOPE_HINT})")
    if "rts_arguments" in doc and "initial_capabilities" in doc:
        return f"GHC JSON profile (`+RTS -pj`): not supported ({_SPEEDSCOPE_HINT})"
    if "code" in doc and "functions" in doc and "ticks" in doc:
        return f"V8 log (`node --prof-process --preprocess`): not supported ({_SPEEDSCOPE_HINT})"
    if isinstance(doc.get("head"), dict):
        return f"V8 profile tree of an unknown kind (a 'head' without samples or sizes): not supported ({_SPEEDSCOPE_HINT})"
    return None
