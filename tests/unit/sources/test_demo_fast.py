"""The demo's arithmetic fast path: ``round(x, 1)`` without decimals (its objects: tests/unit/core/test_makers.py)."""

from __future__ import annotations

import math
import random

from gpulens.sources._demo_fast import round1


def test_round1_is_round_to_one_decimal() -> None:
    rng = random.Random(5)
    specials = [0.0, -0.0, 0.05, 0.15, 0.25, 0.35, 2.675, 0.45, 1e-300, 99999.95, 99999.99,
                1e5, 1e6, 1e7, 123456789.25, -1.25, -0.04, math.inf, -math.inf, 5e-324,
                0.04999999999999999, 0.05000000000000001, 72.0]
    xs = specials + [rng.random() * 10 ** rng.randrange(-3, 8) for _ in range(200_000)]
    # values one ulp either side of every tie below 1000, and ties themselves
    for k in range(0, 10_000):
        tie = (k + 0.5) / 10
        xs += [tie, math.nextafter(tie, 0.0), math.nextafter(tie, math.inf), k / 10]
    for x in xs:
        got, want = round1(x), round(x, 1)
        assert repr(got) == repr(want), x
    assert math.isnan(round1(math.nan))
