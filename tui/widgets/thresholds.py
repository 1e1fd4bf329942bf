"""Colour with meaning: threshold levels, alert codes, their styles, markers and explanations (pure).

Every level has a marker as well as a colour, so ``NO_COLOR`` (or a
monochrome terminal) keeps the meaning: ``!`` critical, ``▲`` warning,
``▽`` underused. The host table, GPU table, plots and heatmap call these
functions; the help screen lists :data:`ALERT_HELP` as the legend.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from rich.style import Style

from gpulens.core.config import Thresholds
from gpulens.core.model import GpuSample
from gpulens.core.units import NA
from gpulens.store.gpu_events import slowdown

OK, LOW, WARN, CRIT = 0, 1, 2, 3
"""Levels: fine, underused (idle while held), warning, critical."""

MARKS = {OK: "", LOW: "▽", WARN: "▲", CRIT: "!"}
"""The symbol after a value at each level: the meaning without colour."""

STYLES = {
    OK: Style(),
    LOW: Style(color="#7aa2f7", italic=True),
    WARN: Style(color="#ffa62b", bold=True),
    CRIT: Style(color="#ffffff", bgcolor="#ba3c5b", bold=True),
}
"""Rich styles per level (Textual's default theme: warning amber, error red)."""

DEFAULT = Thresholds()


@dataclass(frozen=True, slots=True)
class AlertInfo:
    """What an alert code means and how loudly to show it."""

    level: int
    meaning: str


ALERT_HELP: dict[str, AlertInfo] = {
    "DOWN": AlertInfo(CRIT, "no data from the host (agent stopped, network or ssh down); figures are the last received"),
    "XID n": AlertInfo(CRIT, "a GPU reported NVIDIA XID error n in the window (79: fell off the bus, 48/63/64: "
                             "ECC/row remap, 13/31/43: application fault); see the GPU screen's history"),
    "THROTTLE": AlertInfo(WARN, "a GPU's clocks are slowed now (power cap, sync boost); the GPU "
                                "table's Throttle column names the reason"),
    "THROTTLE HW": AlertInfo(CRIT, "a GPU's clocks are cut now by heat or a hardware brake (thermal, HW "
                                   "slowdown, power brake): check its cooling and power; the GPU table names it"),
    "IDLE-HELD n": AlertInfo(LOW, "n GPUs hold a process's memory but averaged under 1 % utilization over "
                                  "the window: allocated and paid for, doing nothing"),
}
"""The legend: every alert code of the host table, its level and meaning."""


XID_MEANING: dict[int, str] = {
    13: "graphics engine exception (usually the application's fault)",
    31: "GPU memory page fault (usually the application's fault)",
    43: "GPU stopped processing (usually the application's fault)",
    45: "preemptive cleanup after an earlier error",
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "the GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}
"""What the common NVIDIA XID codes mean (NVIDIA's XID catalogue); others: see the kernel log."""


def xid_meaning(code: int | str) -> str:
    """``the GPU has fallen off the bus`` for 79; a pointer to the kernel log for a code not listed."""
    try:
        return XID_MEANING[int(code)]
    except (KeyError, ValueError):
        return "an NVIDIA driver error (see the kernel log, `nvidia-smi -q`)"


def threshold_rows(t: Thresholds = DEFAULT) -> list[tuple[str, str]]:
    """The legend of the coloured values, with the thresholds in force: (markers, where they start)."""
    return [
        (f"{MARKS[WARN]} / {MARKS[CRIT]}", f"temperature from {t.temp_warn_c:g} / {t.temp_crit_c:g} °C"),
        (f"{MARKS[WARN]} / {MARKS[CRIT]}", f"GPU memory used from {t.mem_warn_percent:g} / {t.mem_crit_percent:g} %"),
        (f"{MARKS[WARN]} / {MARKS[CRIT]}",
         f"power from {t.power_warn_percent:g} / {t.power_crit_percent:g} % of the GPU's limit"),
        (f"{MARKS[WARN]} / {MARKS[CRIT]}", "throttle: power cap or sync boost / thermal or hardware slowdown"),
        (MARKS[LOW], f"utilization under {t.util_low_percent:g} % on a GPU a process holds memory on"),
    ]


def alert_level(code: str) -> int:
    """The level of one alert code (``XID 79`` -> CRIT, ``IDLE-HELD 4`` -> LOW, unknown -> WARN)."""
    info = _alert_info(code)
    return WARN if info is None else info[1].level


def alert_text(code: str) -> str:
    """The code with its marker: ``! XID 79``, ``▲ THROTTLE``, ``▽ IDLE-HELD 4``."""
    mark = MARKS[alert_level(code)]
    return f"{mark} {code}" if mark else code


_N = re.compile(r"\bn\b")


def explain(code: str) -> str:
    """``IDLE-HELD 4: 4 GPUs hold a process's memory but ...``: one alert, in words."""
    found = _alert_info(code)
    if found is None:
        return f"{code}: unknown alert"
    key, info = found
    arg = code.partition(" ")[2]
    return f"{code}: {_N.sub(arg, info.meaning) if arg and key.endswith(' n') else info.meaning}"


def _alert_info(code: str) -> tuple[str, AlertInfo] | None:
    """The legend entry of ``code``: its own (``THROTTLE HW``), else the one its first word names (``XID n``)."""
    if code in ALERT_HELP:
        return code, ALERT_HELP[code]
    head = code.split(" ", 1)[0]
    return next(((k, i) for k, i in ALERT_HELP.items() if k.split(" ", 1)[0] == head), None)


def level(kind: str, value: float | None, t: Thresholds = DEFAULT, *, limit: float | None = None,
          held: bool = False) -> int:
    """The level of a value: ``kind`` is ``temp`` (°C), ``mem`` (%), ``power`` (W, of ``limit``) or ``util`` (%).

    Utilization is never "too high"; it is LOW when the GPU is ``held`` (a
    process has memory on it) and under ``util_low_percent``.
    Unknown values (None, NaN) are OK: n/a is shown as n/a, not as an alarm.
    Degrees and percentages are judged as the cells print them (whole numbers):
    9.6 % reads ``10%``, and a ``10%▽`` beside "under 10 %" would contradict itself.
    """
    if value is None or value != value:
        return OK
    if kind != "power" and math.isfinite(value):
        value = float(round(value))
    if kind == "temp":
        return CRIT if value >= t.temp_crit_c else WARN if value >= t.temp_warn_c else OK
    if kind == "mem":
        return CRIT if value >= t.mem_crit_percent else WARN if value >= t.mem_warn_percent else OK
    if kind == "power":
        if not limit:
            return OK
        share = 100.0 * value / limit
        return CRIT if share >= t.power_crit_percent else WARN if share >= t.power_warn_percent else OK
    if kind == "util":
        return LOW if held and value < t.util_low_percent else OK
    return OK


def gpu_levels(g: GpuSample, t: Thresholds = DEFAULT) -> dict[str, int]:
    """Levels of one GPU's cells: ``util``, ``temp``, ``mem`` (used %), ``power``, ``throttle``."""
    mem = (100.0 * g.mem_used_bytes / g.mem_total_bytes
           if g.mem_used_bytes is not None and g.mem_total_bytes else None)
    return {
        "util": level("util", g.utilization_percent, t, held=bool(g.processes)),
        "temp": level("temp", g.temperature_c, t),
        "mem": level("mem", mem, t),
        "power": level("power", g.power_w, t, limit=g.power_limit_w),
        "throttle": throttle_level(g.throttle_reasons),
        "xid": CRIT if g.xid_events else OK,
    }


def throttle_level(reasons: tuple[str, ...] | list[str]) -> int:
    """CRIT for thermal or hardware slowdowns, WARN for a power cap or sync boost, OK when idle."""
    return {"hw": CRIT, "soft": WARN, "": OK}[slowdown(reasons)]


def throttle_text(g: GpuSample, names: Callable[[str], str]) -> str:
    """The throttle cell: the reasons (``names`` shortens each), ``-`` for none, n/a when the GPU
    (a lost one) or its throttle reasons could not be read."""
    if g.throttle_reasons:
        return ",".join(map(names, g.throttle_reasons))
    return NA if "gpu" in g.unavailable or "throttle_reasons" in g.unavailable else "-"


def marked(text: str, lvl: int) -> str:
    """``89C!``: the value with its level's marker."""
    return text + MARKS[lvl]


def level_of_text(text: str) -> int:
    """The level a cell's trailing marker names (OK without one)."""
    for lvl in (CRIT, WARN, LOW):
        if text.endswith(MARKS[lvl]):
            return lvl
    return OK


def value_style(kind: str, t: Thresholds = DEFAULT, *,
                limit: float | None = None) -> Callable[[float], tuple[Style, str] | None]:
    """A ``style_of(value)`` for a plot: the level's (style, marker), None when OK."""

    def style_of(v: float) -> tuple[Style, str] | None:
        lvl = level(kind, v, t, limit=limit)
        return (STYLES[lvl], MARKS[lvl]) if lvl else None

    return style_of
