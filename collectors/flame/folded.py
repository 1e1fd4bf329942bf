"""Folded (collapsed) stacks: ``frame;frame;frame COUNT`` per line.

The format of Brendan Gregg's stackcollapse scripts, py-spy's ``--format
raw`` and most profilers' "collapsed" export. Counts may be integers or
decimals; repeated stacks add up.
"""

from __future__ import annotations

from .errors import FlameFormatError
from .model import Profile, build_profile

MAX_FOLDED_BYTES = 1 << 30  # 1 GiB of text
MAX_LINE_BYTES = 1 << 20


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
    has_cr = b"\r" in data
    # Frames are split on NUL inside the model: translate the whole text once.
    for lineno, line in enumerate(data.replace(b";", b"\x00").split(b"\n"), 1):
        if has_cr:
            line = line.rstrip(b"\r")
        if not line or line.isspace():
            continue
        if len(line) > MAX_LINE_BYTES:
            raise FlameFormatError(f"{source}: line {lineno}: longer than {MAX_LINE_BYTES} bytes")
        stack, _, count = line.rpartition(b" ")
        try:
            weight: float = int(count)
        except ValueError:
            try:
                weight = float(count)
            except ValueError:
                raise FlameFormatError(
                    f"{source}: line {lineno}: expected 'frame;frame;... COUNT', got {_shown(line)}"
                ) from None
        if not stack or weight < 0 or weight != weight or weight == float("inf"):
            raise FlameFormatError(
                f"{source}: line {lineno}: expected 'frame;frame;... COUNT' with a count >= 0, got {_shown(line)}"
            )
        key = stack.strip()
        stacks[key] = get(key, 0) + weight
    return stacks


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
