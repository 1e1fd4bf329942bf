r"""Folded (collapsed) stacks: ``frame;frame;frame COUNT`` per line.

The format of Brendan Gregg's stackcollapse scripts, py-spy's ``--format
raw`` and most profilers' "collapsed" export. Counts may be integers or
decimals; repeated stacks add up. A line with an empty stack (py-spy writes
`` 1`` for a sample with no Python frame) is a sample of the root alone, as
flamegraph.pl counts it.

Export writes integer counts, because flamegraph.pl drops lines whose count
is not ``\d+(\.\d*)?`` (``1.1e-05``). The unit is in the file name, with no
comment line that another tool would choke on:

=============  ==================  =====================================
profile unit   written as          default file name suffix
=============  ==================  =====================================
samples        samples             ``.folded``
seconds        integer µs          ``.us.folded``
bytes          integer bytes       ``.bytes.folded``
events:NAME    integer events      ``.folded`` (read back as samples)
=============  ==================  =====================================

Rounding is cumulative (each line gets the rounded running sum minus what
was written before), so the written total is the true total rounded once.
Reading a file named ``*.us.folded`` or ``*.bytes.folded`` gives the unit back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import repeat

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem, Where
from gpulens.analysis.flame.model import Profile, build_profile, subtree_stacks
from gpulens.analysis.flame.units import unit_kind

MAX_FOLDED_BYTES = 1 << 30  # 1 GiB of text
MAX_LINE_BYTES = 1 << 20
INF = float("inf")
FOLDED_UNITS = {"samples": ("samples", 1.0), "seconds": ("µs", 1e6), "bytes": ("bytes", 1.0), "events": ("events", 1.0)}
"""Profile unit's kind (:func:`~.units.unit_kind`) -> (unit written, scale from the profile's unit)."""
FOLDED_SUFFIX = {"samples": ".folded", "seconds": ".us.folded", "bytes": ".bytes.folded", "events": ".folded"}
_NAMED_UNIT = re.compile(r"[._-](us|µs|bytes|samples)\.(folded|collapsed|txt)$", re.IGNORECASE)


def parse_folded(
    data: bytes, unit: str = "samples", title: str = "", source: str = "input", scale: float = 1.0
) -> Profile:
    """Parse folded-stack text into a :class:`Profile`.

    Malformed lines (no count, a negative or non-numeric count, too long)
    are skipped as flamegraph.pl skips them, and the title says how many and
    names the first. Raises FlameFormatError naming ``source`` and the
    1-based line when no line is well-formed, or over twice as many lines are skipped as are
    well-formed (not a folded file), for a NUL byte, or over the size bounds. ``scale`` multiplies every count (into ``unit``).
    """
    if len(data) > MAX_FOLDED_BYTES:
        raise FlameFormatError(f"{source}: {len(data)} bytes is over the {MAX_FOLDED_BYTES}-byte limit", problem=FlameProblem.TOO_LARGE)
    if b"\x00" in data:
        raise FlameFormatError(f"{source}: contains NUL bytes; not a folded-stacks text file", problem=FlameProblem.UNSUPPORTED)
    stacks, bad = _parse_lines(data, source)
    if bad and (not stacks or bad.count > 2 * bad.good):  # mostly not folded: not a folded file
        raise FlameFormatError(bad.first_text, at=bad.first_at)
    if scale != 1.0:  # a *.us.folded file: counts are microseconds
        stacks = {k: v * scale for k, v in stacks.items()}
    if bad:
        note = f"{bad.count} malformed line(s) skipped, as flamegraph.pl does (first: {bad.first_text.split(': ', 1)[1]})"
        title = f"{title}: {note}" if title else note
    return build_profile(stacks, unit, title)


class _Skipped:
    """Malformed lines left out: how many, the first one's error (its sentence and place), and how many
    lines were read. The error itself is not kept: its traceback holds the parse's frame, and with it
    every line read, until the garbage collector breaks the cycle."""

    def __init__(self) -> None:
        self.count = 0
        self.good = 0
        self.first_text = ""
        self.first_at: str | None = None

    def __bool__(self) -> bool:
        return self.count > 0

    def add(self, err: FlameFormatError) -> None:
        self.count += 1
        if self.count == 1:
            self.first_text, self.first_at = str(err), err.at


def _parse_lines(data: bytes, source: str) -> tuple[dict[bytes, float], _Skipped]:
    """The stacks of the well-formed lines, and the malformed ones skipped (flamegraph.pl's leniency)."""
    stacks: dict[bytes, float] = {}
    bad = _Skipped()
    get = stacks.get
    # Frames are split on NUL inside the model: translate the whole text once.
    lines = data.replace(b";", b"\x00").split(b"\n")
    if b"\r" in data:
        lines = list(map(bytes.rstrip, lines, repeat(b"\r")))
    for lineno, line in enumerate(lines, 1):
        # The common line first ("STACK INT"); blank lines, decimals and errors in _odd_count.
        stack, _, count = line.rpartition(b" ")
        try:
            weight: float = int(count)
        except ValueError:
            try:
                odd = _odd_count(line, lineno, source)
            except FlameFormatError as err:
                bad.add(err)
                continue
            if odd is None:
                continue
            weight = odd
        if weight < 0 or not _ or len(line) > MAX_LINE_BYTES:
            try:
                _check_line(line, lineno, source)
                raise Where(source, f"line {lineno}").error(
                    f"expected 'frame;frame;... COUNT' with a count >= 0, got {_shown(line)}"
                )
            except FlameFormatError as err:
                bad.add(err)
                continue
        bad.good += 1
        key = stack.strip()
        stacks[key] = get(key, 0) + weight
    return stacks, bad


def _check_line(line: bytes, lineno: int, source: str) -> None:
    if len(line) > MAX_LINE_BYTES:
        raise Where(source, f"line {lineno}").error(f"longer than {MAX_LINE_BYTES} bytes")


def _odd_count(line: bytes, lineno: int, source: str) -> float | None:
    """The count of a line whose count is not an integer; None for a blank line."""
    if not line or line.isspace():
        return None
    _check_line(line, lineno, source)
    count = line.rpartition(b" ")[2]
    try:
        weight = float(count)
    except ValueError:
        raise Where(source, f"line {lineno}").error(f"expected 'frame;frame;... COUNT', got {_shown(line)}") from None
    if weight != weight or weight == INF:
        return -1.0  # reported as a count < 0 with the line
    return weight


def _shown(line: bytes) -> str:
    return repr(line[:80].replace(b"\x00", b";"))


def unit_from_name(path: str) -> tuple[str, float]:
    """(profile unit, scale to it) that a folded file's name states (see the module docstring)."""
    m = _NAMED_UNIT.search(path)
    word = m.group(1).lower() if m else "samples"
    if word in ("us", "µs"):
        return "seconds", 1e-6
    return ("bytes" if word == "bytes" else "samples"), 1.0


def folded_lines(stacks: Iterable[tuple[list[str], float]], unit: str) -> tuple[list[str], int]:
    """``frame;frame COUNT`` lines with integer counts in :data:`FOLDED_UNITS`, and their sum.

    ``;`` inside a frame becomes ``:`` and a newline a space (they would split
    the line); an empty stack is written as `` COUNT`` (py-spy's root-only sample).
    Lines that round to 0 are left out; the sum is the true total rounded once.
    """
    scale = FOLDED_UNITS[unit_kind(unit)][1]
    out: list[str] = []
    running, written = 0.0, 0
    for frames, value in stacks:
        running += value * scale
        count = round(running) - written
        if count <= 0:
            continue
        written += count
        out.append(";".join(f.replace(";", ":").replace("\n", " ") for f in frames) + f" {count}")
    return out, written


def to_folded(profile: Profile, root: int = 0) -> str:
    """Folded text of ``root``'s subtree (the whole profile by default), integer counts."""
    if root:
        stacks: Iterable[tuple[list[str], float]] = subtree_stacks(profile, root)
    else:
        root_only: list[tuple[list[str], float]] = [([], profile.node_self[0])] if profile.node_self[0] else []
        stacks = [*root_only, *profile.stacks()]
    lines, _total = folded_lines(stacks, profile.unit)
    return "\n".join(lines) + ("\n" if lines else "")
