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

from gpulens.core.errors import UNSET, ConfigError, ConfigProblem

MAX_HOSTS = 100_000
_NAME_PART = re.compile(r"[A-Za-z0-9._-]*")
_NAME_CHARS = "letters, digits, '.', '_' and '-'"
_BALANCED = "balanced, unnested brackets"


def _refused(expr: str, detail: str, problem: ConfigProblem, expected: str, got: object = UNSET) -> ConfigError:
    """``hostlist 'EXPR': DETAIL``, with the reason and the part at fault as fields."""
    return ConfigError(where=f"hostlist {expr!r}", expected=expected, got=got, problem=problem, detail=detail)


def _parse_bracket(body: str, expr: str) -> list[str]:
    items: list[str] = []
    count = 0
    for part in body.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if m is None:
            raise _refused(expr, f"bad range {part!r} (expected N or LO-HI)", ConfigProblem.BAD_FORMAT, "N or LO-HI", part)
        lo_s, hi_s = m.group(1), m.group(2)
        if hi_s is None:
            items.append(lo_s)
            count += 1
            continue
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise _refused(expr, f"range {part!r} runs backwards", ConfigProblem.BAD_FORMAT, "LO-HI with LO <= HI", part)
        count += hi - lo + 1
        if count > MAX_HOSTS:
            raise _refused(expr, f"more than {MAX_HOSTS} hosts", ConfigProblem.TOO_LARGE, f"at most {MAX_HOSTS} hosts")
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
                raise _refused(text, "nested '['", ConfigProblem.BAD_FORMAT, _BALANCED, "[")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise _refused(text, "']' without '['", ConfigProblem.BAD_FORMAT, _BALANCED, "]")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise _refused(text, "'[' without ']'", ConfigProblem.BAD_FORMAT, _BALANCED, "[")
    parts.append("".join(cur))
    return parts


def _expand_one(expr: str, budget: int) -> list[str]:
    pieces: list[list[str]] = []
    pos = 0
    total = 1
    for m in re.finditer(r"\[([^\]]*)\]", expr):
        literal = expr[pos : m.start()]
        if not _NAME_PART.fullmatch(literal):
            raise _refused(expr, f"bad characters in {literal!r}", ConfigProblem.BAD_FORMAT, _NAME_CHARS, literal)
        pieces.append([literal])
        choices = _parse_bracket(m.group(1), expr)
        total *= len(choices)
        if total > budget:
            raise _refused(expr, f"more than {MAX_HOSTS} hosts", ConfigProblem.TOO_LARGE, f"at most {MAX_HOSTS} hosts")
        pieces.append(choices)
        pos = m.end()
    tail = expr[pos:]
    if not _NAME_PART.fullmatch(tail):
        raise _refused(expr, f"bad characters in {tail!r}", ConfigProblem.BAD_FORMAT, _NAME_CHARS, tail)
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
        raise ConfigError("hostlist is empty", where="hostlist", expected="a hostlist", got=hostlist,
                          problem=ConfigProblem.MISSING)
    if len(text) > 100_000:
        raise ConfigError("hostlist longer than 100000 characters", where="hostlist",
                          expected="at most 100000 characters", problem=ConfigProblem.TOO_LARGE)
    seen: dict[str, None] = {}
    for expr in _split_top(text):
        expr = expr.strip()
        if not expr:
            continue
        for name in _expand_one(expr, max_hosts - len(seen)):
            seen[name] = None
        if len(seen) > max_hosts:
            raise _refused(hostlist, f"more than {max_hosts} hosts", ConfigProblem.TOO_LARGE, f"at most {max_hosts} hosts")
    names = list(seen)
    if not names:
        raise _refused(hostlist, "no host names", ConfigProblem.MISSING, "a host name")
    for name in names:
        if not name or name.startswith("-"):
            raise _refused(hostlist, f"bad host name {name!r}", ConfigProblem.BAD_FORMAT, "a host name not starting with '-'",
                           name)
    return names
