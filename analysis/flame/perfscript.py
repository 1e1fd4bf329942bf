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

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem
from gpulens.analysis.flame.model import Profile, build_profile, stack_key
from gpulens.analysis.flame.units import perf_event_unit

_HEADER = re.compile(r"^(\S.+?)\s+(\d+)/*(\d+)*\s+")
_EVENT = re.compile(r":\s*(\d+)*\s+(\S+):\s*$")
_ADDR = re.compile(r"\s*(\w+)\s*")
MAX_LINE_CHARS = 16384
"""Longer lines are not perf script (its longest are C++ symbols): counted as not recognised."""
_OFFSET = re.compile(r"\+0x[\da-f]+$")
_GO_METHOD = re.compile(r"\.\(.*\)\.")
_AFTER_PAREN = re.compile(r"\((?!anonymous namespace\)).*")
_HEX = re.compile(r"[0-9a-fA-F]+")


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
    return perf_event_unit(event)


class _Folding:
    """The fold of ``perf script`` text so far, fed one line at a time."""

    def __init__(self) -> None:
        self.stacks: dict[bytes, int] = {}  # summed periods (or 1 per sample without one)
        self.counts: dict[bytes, int] = {}  # samples
        self.stack: list[str] = []
        self.pname: str | None = None
        self.period: int | None = None
        self.event_filter = ""
        self.skipped = self.unrecognized = self.samples = self.periods = 0

    def line(self, line: str) -> None:
        line = line.rstrip("\r")
        if line.startswith("#"):
            return
        if len(line) > MAX_LINE_CHARS:
            self.unrecognized += 1
        elif not line:
            self._end_sample()
        elif (head := _HEADER.match(line)) is not None:
            self._header(head, line)
        elif (frame := _frame_line(line)) is None:
            self.unrecognized += 1
        elif self.pname is not None:
            self.stack[:0] = _frames_of(frame[0], frame[1], self.pname)

    def _end_sample(self) -> None:
        """A blank line: count the sample read so far, if any."""
        if self.pname is not None and self.stack:
            key = stack_key([self.pname, *self.stack])
            self.stacks[key] = self.stacks.get(key, 0) + (1 if self.period is None else self.period)
            self.counts[key] = self.counts.get(key, 0) + 1
            self.samples += 1
            self.periods += self.period is not None
        self.stack, self.pname = [], None

    def _header(self, head: re.Match[str], line: str) -> None:
        """A sample's header: its process name and period, unless its event is not the first one seen."""
        self.pname, self.period = None, None
        event = _EVENT.search(line)
        if event is not None:
            if not self.event_filter:
                self.event_filter = event.group(2)
            elif event.group(2) != self.event_filter:
                self.skipped += 1
                return
            self.period = int(event.group(1)) if event.group(1) else None
        self.pname = head.group(1).replace(" ", "_")

    def notes(self, unit: str) -> str:
        """The default title: the event, and what was counted differently or left out."""
        notes = [f"perf script, {self.event_filter or 'samples'}"]
        if unit == "samples" and self.periods:
            notes.append(f"{self.samples - self.periods} of {self.samples} samples without a period: counting samples")
        if self.skipped:
            notes.append(f"{self.skipped} sample(s) of other events skipped")
        if self.unrecognized:
            notes.append(f"{self.unrecognized} line(s) not recognised")
        return "; ".join(notes)


def parse_perf_script(data: bytes, source: str = "input", title: str = "") -> Profile:
    """Fold ``perf script`` text as stackcollapse-perf.pl does (see the module docstring).

    Raises FlameFormatError when no sample could be read.
    """
    fold = _Folding()
    text = data.decode("utf-8", "replace")
    for line in [*text.split("\n"), ""]:
        fold.line(line)
    stacks = fold.stacks
    if not stacks:
        raise FlameFormatError(f"{source}: no perf script samples (a header line, then 'addr symbol (dso)' "
                               f"frame lines); {fold.unrecognized} line(s) not recognised", problem=FlameProblem.NO_SAMPLES)
    unit = _unit(fold.event_filter, fold.periods, fold.samples)
    if unit == "seconds":  # summed as integer ns, divided once
        return build_profile({k: v / 1e9 for k, v in stacks.items()}, unit, title or fold.notes(unit))
    return build_profile(fold.counts if unit == "samples" else stacks, unit, title or fold.notes(unit))
