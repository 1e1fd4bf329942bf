"""A series fitted to a plot's width: values averaged into ``n`` screen columns, NaN ignored."""

from __future__ import annotations

import math
from collections.abc import Sequence


def resample(values: Sequence[float], n: int) -> list[float]:
    """Average ``values`` into ``n`` columns, ignoring NaN (NaN where a column is empty)."""
    size = len(values)
    if n <= 0:
        return []
    if size == n:
        return list(values)
    out: list[float] = []
    for c in range(n):
        a, b = c * size // n, max((c + 1) * size // n, c * size // n + 1)
        part = [v for v in values[a:b] if not math.isnan(v)]
        out.append(sum(part) / len(part) if part else math.nan)
    return out
