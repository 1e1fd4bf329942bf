"""The demo's arithmetic fast path: ``round(x, 1)`` without decimals (:func:`round1`).

Its objects are built by :func:`gpulens.core.makers.fast_builder` (frozen samples without
their ``__init__``), shared with the collectors' steady tick.
"""

from __future__ import annotations


def round1(x: float) -> float:
    """``round(x, 1)``: the same float, for less (round's decimal conversion costs ~0.3 us).

    ``round`` rounds the exact value of ``x * 10`` to an integer ``n`` and returns the
    float nearest ``n / 10``, which is what ``n / 10`` is (IEEE division rounds
    correctly). ``x * 10.0`` is off the exact product by at most half an ulp (< 1e-10
    below 1e6), so where it lies more than 1e-9 from a half-integer, its nearest
    integer is ``n``; near a tie, for 0, negatives and large values, ``round`` decides.
    """
    y = x * 10.0
    if 0.0 < y < 1e6:
        n = round(y)
        if -0.499999999 < y - n < 0.499999999:
            return n / 10
    return round(x, 1)
