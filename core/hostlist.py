"""Slurm hostlist expressions: ``node[01-16,20]``, ``r[1-2]n[1-4]``, ``a,b[1-3]``.

Rules (as ``scontrol show hostnames`` applies them): commas outside
brackets separate expressions; a bracket holds comma-separated numbers or
``lo-hi`` ranges; the width of ``lo`` sets zero padding (``01-16`` gives
``01``..``16``); several brackets in one name expand as a product, left to
right. Empty names between commas (``n1,,n2``) are skipped, as
python-hostlist skips them. The total is computed before expanding, so ``n[0-99999999]`` is
refused at once instead of filling memory.
"""

from __future__ import annotations

import re
from itertools import product

from gpulens.core.errors import ConfigError

MAX_HOSTS = 100_000
_NAME_PART = re.compile(r"[A-Za-z0-9._-]*")


def _parse_bracket(body: str, expr: str) -> list[str]:
    items: list[str] = []
    count = 0
    for part in body.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if m is None:
            raise ConfigError(f"hostlist {expr!r}: bad range {part!r} (expected N or LO-HI)")
        lo_s, hi_s = m.group(1), m.group(2)
        if hi_s is None:
            items.append(lo_s)
            count += 1
            continue
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise ConfigError(f"hostlist {expr!r}: range {part!r} runs backwards")
        count += hi - lo + 1
        if count > MAX_HOSTS:
            raise ConfigError(f"hostlist {expr!r}: more than {MAX_HOSTS} hosts")
        width = len(lo_s)
        items.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return items


def _split_top(text: str) -> list[str]:
    """Split on commas that are outside brackets."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ConfigError(f"hostlist {text!r}: nested '['")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ConfigError(f"hostlist {text!r}: ']' without '['")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ConfigError(f"hostlist {text!r}: '[' without ']'")
    parts.append("".join(cur))
    return parts


def _expand_one(expr: str, budget: int) -> list[str]:
    pieces: list[list[str]] = []
    pos = 0
    total = 1
    for m in re.finditer(r"\[([^\]]*)\]", expr):
        literal = expr[pos : m.start()]
        if not _NAME_PART.fullmatch(literal):
            raise ConfigError(f"hostlist {expr!r}: bad characters in {literal!r}")
        pieces.append([literal])
        choices = _parse_bracket(m.group(1), expr)
        total *= len(choices)
        if total > budget:
            raise ConfigError(f"hostlist {expr!r}: more than {MAX_HOSTS} hosts")
        pieces.append(choices)
        pos = m.end()
    tail = expr[pos:]
    if not _NAME_PART.fullmatch(tail):
        raise ConfigError(f"hostlist {expr!r}: bad characters in {tail!r}")
    pieces.append([tail])
    return ["".join(p) for p in product(*pieces)]


def expand(hostlist: str, max_hosts: int = MAX_HOSTS) -> list[str]:
    """Expand a Slurm hostlist into host names, in order, without duplicates.

    Raises:
        ConfigError: malformed expression, bad characters, or more than
            ``max_hosts`` hosts.
    """
    text = hostlist.strip()
    if not text:
        raise ConfigError("hostlist is empty")
    if len(text) > 100_000:
        raise ConfigError("hostlist longer than 100000 characters")
    seen: dict[str, None] = {}
    for expr in _split_top(text):
        expr = expr.strip()
        if not expr:
            continue
        for name in _expand_one(expr, max_hosts - len(seen)):
            seen[name] = None
        if len(seen) > max_hosts:
            raise ConfigError(f"hostlist {hostlist!r}: more than {max_hosts} hosts")
    names = list(seen)
    if not names:
        raise ConfigError(f"hostlist {hostlist!r}: no host names")
    for name in names:
        if not name or name.startswith("-"):
            raise ConfigError(f"hostlist {hostlist!r}: bad host name {name!r}")
    return names
