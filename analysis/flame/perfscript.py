"""``perf script`` output (the input of FlameGraph's stackcollapse-perf.pl) -> a profile.

A sample is a header line (``comm [pid/]tid [cpu] time: [period] event:``)
then its frames, innermost first, one per line (``addr sym+off (dso)``),
and a blank line. Folding follows stackcollapse-perf.pl's defaults, so a
``perf script | stackcollapse-perf.pl`` file and this importer agree stack
for stack:

- the process name (spaces as ``_``) is the root frame;
- ``+0x...`` offsets are stripped; an ``[unknown]`` symbol becomes the
  dso's base name in brackets (``[libc.so.6]``), or ``[unknown]``;
- names are tidied: ``;`` -> ``:``, text from the first ``(`` dropped (but
  Go's ``pkg.(*T).M`` and ``(anonymous namespace)`` kept), quotes removed,
  a Java class's leading ``L`` dropped; ``a->b`` inline chains are split
  and every frame after the first marked ``_[i]``;
- each sample weighs its period when the header has one, else 1; only
  samples of the first event type are kept (mixing cycles and
  instructions misleads), and the title says how many others were skipped.

The unit follows the event (see :mod:`.units`): a period of ``cpu-clock`` or
``task-clock`` is nanoseconds, so the profile is in seconds; a period of any
other event is a count of that event (``events:cycles``); without periods
(``perf script -F`` leaving ``period`` out, old perf) each sample counts 1
(``samples``), and so does every sample of a file where only some headers
have a period.
"""

from __future__ import annotations

import re

from gpulens.analysis.flame.errors import FlameFormatError
from gpulens.analysis.flame.model import Profile, build_profile, stack_key
from gpulens.analysis.flame.units import event_unit

_HEADER = re.compile(r"^(\S.+?)\s+(\d+)/*(\d+)*\s+")
_EVENT = re.compile(r":\s*(\d+)*\s+(\S+):\s*$")
_ADDR = re.compile(r"\s*(\w+)\s*")
MAX_LINE_CHARS = 16384
"""Longer lines are not perf script (its longest are C++ symbols): counted as not recognised."""
_OFFSET = re.compile(r"\+0x[\da-f]+$")
_GO_METHOD = re.compile(r"\.\(.*\)\.")
_AFTER_PAREN = re.compile(r"\((?!anonymous namespace\)).*")
_HEX = re.compile(r"[0-9a-fA-F]+")
TIME_EVENTS = ("cpu-clock", "task-clock")
"""Software events whose period is nanoseconds (``cpu-clock:u`` and other modifiers too)."""


def looks_like_perf_script(data: bytes) -> bool:
    """True when the first sample reads as a ``perf script`` header followed by a frame line."""
    lines = [ln for ln in data[:65536].split(b"\n")[:400] if ln.strip() and not ln.startswith(b"#")]
    # Frame lines are indented, except in old perf versions (FlameGraph's perf-java-stacks-02.txt).
    if len(lines) < 2 or max(len(lines[0]), len(lines[1])) > MAX_LINE_CHARS:
        return False
    second = lines[1].decode("utf-8", "replace").rstrip()
    addr = second.split(None, 1)[0] if second.strip() else ""
    return bool(_HEADER.match(lines[0].decode("utf-8", "replace"))) and bool(_HEX.fullmatch(addr)) \
        and second.endswith(")") and _frame_line(second) is not None


def _frame_line(line: str) -> tuple[str, str] | None:
    """(symbol, dso) of ``addr symbol (dso)``, as stackcollapse-perf's ``^\\s*(\\w+)\\s*(.+) \\((.*)\\)``.

    Found from the right (the last ``)`` and the last `` (`` before it) in linear time: the
    regex backtracks for seconds on a long hostile line.
    """
    m = _ADDR.match(line)
    if m is None:
        return None
    rest = line[m.end():]
    close = rest.rfind(")")
    open_ = rest.rfind(" (", 0, close)
    if close < 0 or open_ < 1:
        return None
    return rest[:open_], rest[open_ + 2:close]


def _tidy(func: str, pname: str) -> str:
    func = func.replace(";", ":")
    if not _GO_METHOD.search(func):
        func = _AFTER_PAREN.sub("", func)
    func = func.replace('"', "").replace("'", "")
    if pname.startswith("java") and "/" in func:
        func = func.removeprefix("L")
    return func


def _frames_of(rawfunc: str, mod: str, pname: str) -> list[str]:
    rawfunc = _OFFSET.sub("", rawfunc)
    if rawfunc.startswith("("):
        return []
    out: list[str] = []
    for func in rawfunc.split("->"):
        if func == "[unknown]":
            func = f"[{mod.rsplit('/', 1)[-1]}]" if mod != "[unknown]" else "[unknown]"
        func = _tidy(func, pname)
        if out and not func.endswith("_[i]"):
            func += "_[i]"
        out.append(func)
    return out


def _unit(event: str, periods: int, samples: int) -> str:
    """The profile unit of ``samples`` of ``event``, ``periods`` of them with a period."""
    if not event or periods < samples:
        return "samples"
    return "seconds" if event.split(":", 1)[0] in TIME_EVENTS else event_unit(event)


def parse_perf_script(data: bytes, source: str = "input", title: str = "") -> Profile:
    """Fold ``perf script`` text as stackcollapse-perf.pl does (see the module docstring).

    Raises FlameFormatError when no sample could be read.
    """
    stacks: dict[bytes, int] = {}
    counts: dict[bytes, int] = {}
    stack: list[str] = []
    pname: str | None = None
    period: int | None = None
    event_filter = ""
    skipped = unrecognized = samples = periods = 0
    text = data.decode("utf-8", "replace")
    for line in [*text.split("\n"), ""]:
        line = line.rstrip("\r")
        if line.startswith("#"):
            continue
        if len(line) > MAX_LINE_CHARS:
            unrecognized += 1
            continue
        if not line:
            if pname is not None and stack:
                key = stack_key([pname, *stack])
                stacks[key] = stacks.get(key, 0) + (1 if period is None else period)
                counts[key] = counts.get(key, 0) + 1
                samples += 1
                periods += period is not None
            stack, pname = [], None
            continue
        head = _HEADER.match(line)
        if head is not None:
            pname, period = None, None
            event = _EVENT.search(line)
            if event is not None:
                if not event_filter:
                    event_filter = event.group(2)
                elif event.group(2) != event_filter:
                    skipped += 1
                    continue
                period = int(event.group(1)) if event.group(1) else None
            pname = head.group(1).replace(" ", "_")
            continue
        frame = _frame_line(line)
        if frame is not None:
            if pname is not None:
                stack[:0] = _frames_of(frame[0], frame[1], pname)
            continue
        unrecognized += 1
    if not stacks:
        raise FlameFormatError(f"{source}: no perf script samples (a header line, then 'addr symbol (dso)' "
                               f"frame lines); {unrecognized} line(s) not recognised")
    unit = _unit(event_filter, periods, samples)
    notes = [f"perf script, {event_filter or 'samples'}"]
    if unit == "samples" and periods:
        notes.append(f"{samples - periods} of {samples} samples without a period: counting samples")
    if skipped:
        notes.append(f"{skipped} sample(s) of other events skipped")
    if unrecognized:
        notes.append(f"{unrecognized} line(s) not recognised")
    if unit == "seconds":  # summed as integer ns, divided once
        return build_profile({k: v / 1e9 for k, v in stacks.items()}, unit, title or "; ".join(notes))
    return build_profile(counts if unit == "samples" else stacks, unit, title or "; ".join(notes))
