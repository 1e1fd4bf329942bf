"""Number formatting shared by the widgets: one place decides how n/a looks.

NaN and infinities are n/a here too (defence in depth: decoding already
turns them into None), and nothing raises on a huge value.
"""

from __future__ import annotations

import math

NA = "n/a"


def known(v: float | None) -> bool:
    """True for a real, finite number (not None, NaN or an infinity)."""
    return v is not None and math.isfinite(v)


def pct(v: float | None, digits: int = 0) -> str:
    """``95%``, or n/a."""
    return f"{v:.{digits}f}%" if known(v) else NA


def num(v: float | None, unit: str = "", digits: int = 0) -> str:
    """``312 W``, or n/a."""
    return f"{v:.{digits}f}{unit}" if known(v) else NA


def size(v: float | None, suffix: str = "B") -> str:
    """Binary size with IEC units: ``71.5GiB`` (as nvidia-smi, nvitop and btop count), or n/a."""
    if not known(v):
        return NA
    assert v is not None
    for unit in ("", "Ki", "Mi", "Gi", "Ti", "Pi"):
        if abs(v) < 1024 or unit == "Pi":
            return f"{v:.0f}{suffix}" if unit == "" else f"{v:.1f}{unit}{suffix}"
        v /= 1024
    return NA  # pragma: no cover


def rate(v: float | None) -> str:
    """Decimal throughput: ``1.2GB/s``, ``13.9GB/s``, ``504MB/s``, or n/a.

    At most three significant digits, as btop shows rates: a fourth
    (``503.9MB/s``) changes with every sample and says nothing a reader uses.
    """
    if not known(v):
        return NA
    assert v is not None
    for unit in ("", "k", "M", "G", "T"):
        if abs(v) < 1000 or unit == "T":
            return f"{v:.0f}{unit}B/s" if unit == "" or abs(v) >= 99.95 else f"{v:.1f}{unit}B/s"
        v /= 1000
    return NA  # pragma: no cover


def duration(seconds: float) -> str:
    """``3h12m``, ``4m05s``, ``12s``; n/a when not finite or beyond any real uptime (1e11 s)."""
    if not math.isfinite(seconds) or seconds > 1e11:
        return NA
    s = int(max(0, seconds))
    if s >= 86400:
        return f"{s // 86400}d{s % 86400 // 3600:02d}h"
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def window_name(window_s: float) -> str:
    """``5m`` for 300."""
    if not math.isfinite(window_s):
        return NA
    return f"{int(window_s // 3600)}h" if window_s >= 3600 else f"{int(window_s // 60)}m"


def coverage(seconds: float) -> str:
    """How much data a plot's figures cover: ``4m50s``; from 10 minutes on, whole minutes (``14m``): the
    seconds of a quarter-hour are noise, and a label as long at [15m] as at [1h] keeps the same figures
    (PCIe lost its mean at [15m] and had it at [1h], issue 31 item 9)."""
    return duration(seconds) if seconds < 600 else f"{int(seconds // 60)}m"
