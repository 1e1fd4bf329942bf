"""Number formats shown on every screen."""

from __future__ import annotations

import math

from gpulens.core.units import rate


def test_rate_keeps_three_significant_digits_at_most() -> None:
    assert rate(503.94e6) == "504MB/s"  # a fourth digit flickers every second on an idle host's 5 min mean
    assert rate(13.94e9) == "13.9GB/s"
    assert rate(1.06e9) == "1.1GB/s"
    assert rate(99.94e6) == "99.9MB/s"
    assert rate(99.96e6) == "100MB/s"  # rounds up into three digits, never "100.0MB/s"
    assert rate(950.0) == "950B/s"
    assert rate(1.5e15) == "1500TB/s"
    assert rate(-120e3) == "-120kB/s"
    assert rate(None) == "n/a" and rate(math.nan) == "n/a"
