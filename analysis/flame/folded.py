"""Folded (collapsed) stacks: ``frame;frame;frame COUNT`` per line.

The format of Brendan Gregg's stackcollapse scripts, py-spy's ``--format
raw`` and most profilers' "collapsed" export. Counts may be integers or
decimals; repeated stacks add up.
"""

from __future__ import annotations

from itertools import repeat

from gpulens.analysis.flame.errors import FlameFormatError
from gpulens.analysis.flame.model import Profile, build_profile

MAX_FOLDED_BYTES = 1 << 30  # 1 GiB of text
MAX_LINE_BYTES = 1 << 20
INF = float("inf")


def parse_folded(data: bytes, unit: str = "samples", title: str = "", source: str = "input") -> Profile:
    """Parse folded-stack text into a :class:`Profile`.

    Raises FlameFormatError naming ``source`` and the 1-based line for a
    line without a count, a negative or non-numeric count, a NUL byte, or
    input over the size bounds.
    """
    if len(data) > MAX_FOLDED_BYTES:
        raise FlameFormatError(f"{source}: {len(data)} bytes is over the {MAX_FOLDED_BYTES}-byte limit")
    if b"\x00" in data:
        raise FlameFormatError(f"{source}: contains NUL bytes; not a folded-stacks text file")
    return build_profile(_parse_lines(data, source), unit, title)


def _parse_lines(data: bytes, source: str) -> dict[bytes, float]:
    stacks: dict[bytes, float] = {}
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
            odd = _odd_count(line, lineno, source)
            if odd is None:
                continue
            weight = odd
        if weight < 0 or not stack or len(line) > MAX_LINE_BYTES:
            _check_line(line, lineno, source)
            raise FlameFormatError(
                f"{source}: line {lineno}: expected 'frame;frame;... COUNT' with a count >= 0, got {_shown(line)}"
            )
        key = stack.strip()
        stacks[key] = get(key, 0) + weight
    return stacks


def _check_line(line: bytes, lineno: int, source: str) -> None:
    if len(line) > MAX_LINE_BYTES:
        raise FlameFormatError(f"{source}: line {lineno}: longer than {MAX_LINE_BYTES} bytes")


def _odd_count(line: bytes, lineno: int, source: str) -> float | None:
    """The count of a line whose count is not an integer; None for a blank line."""
    if not line or line.isspace():
        return None
    _check_line(line, lineno, source)
    count = line.rpartition(b" ")[2]
    try:
        weight = float(count)
    except ValueError:
        raise FlameFormatError(
            f"{source}: line {lineno}: expected 'frame;frame;... COUNT', got {_shown(line)}"
        ) from None
    if weight != weight or weight == INF:
        return -1.0  # reported as a count < 0 with the line
    return weight


def _shown(line: bytes) -> str:
    return repr(line[:80].replace(b"\x00", b";"))


def to_folded(profile: Profile) -> str:
    """Folded text of a profile (``;`` inside a frame becomes ``:``); values as written."""
    out = []
    integral = profile.unit in ("samples", "bytes")
    for frames, value in profile.stacks():
        shown = str(int(value)) if integral and value == int(value) else repr(value)
        out.append(";".join(f.replace(";", ":").replace("\n", " ") for f in frames) + " " + shown)
    return "\n".join(out) + ("\n" if out else "")
