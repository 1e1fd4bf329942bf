"""What a profile's values count: its unit, and how people read it.

=================  =====================================================================
unit               values
=================  =====================================================================
``samples``        stack samples (py-spy, folded files, perf script without periods)
``seconds``        time (traces, pprof CPU, perf script's ``cpu-clock``/``task-clock``
                   periods, which are nanoseconds)
``bytes``          memory (torch memory snapshots, GPU memory flames)
``events:NAME``    counts of the perf event ``NAME`` (``events:cycles``,
                   ``events:cycles:u``): perf script weighs a sample by its period,
                   the events counted since the sample before
=================  =====================================================================

Graphs in different units (two event names included) never merge.
"""

from __future__ import annotations

from gpulens.analysis.flame.errors import FlameError

KINDS = ("samples", "seconds", "bytes", "events")
"""The kinds of unit; ``events`` carries the event's name (:func:`event_unit`)."""
_EVENTS = "events:"


def event_unit(event: str) -> str:
    """The unit of a profile weighted by counts of the event ``event``: ``events:cycles``."""
    if not event:
        raise FlameError("an event unit needs the event's name")
    return _EVENTS + event


TIME_EVENTS = ("cpu-clock", "task-clock")
"""perf's software clocks: their periods are nanoseconds, so their profiles read as time."""


def perf_event_unit(event: str) -> str:
    """The unit of periods of perf event ``event`` (modifiers such as ``:u`` aside): time for the clocks,
    else counts of that event."""
    return "seconds" if event.split(":", 1)[0] in TIME_EVENTS else event_unit(event)


def unit_kind(unit: str) -> str:
    """One of :data:`KINDS`: ``events`` for ``events:NAME``, else the unit itself."""
    return "events" if unit.startswith(_EVENTS) else unit


def unit_event(unit: str) -> str:
    """The event an ``events:NAME`` unit counts (``cycles``); ``""`` for the other units."""
    return unit[len(_EVENTS):] if unit.startswith(_EVENTS) else ""


def check_unit(unit: str) -> None:
    """Raise FlameError unless ``unit`` is ``samples``, ``seconds``, ``bytes`` or ``events:NAME``."""
    if unit not in KINDS[:3] and not (unit.startswith(_EVENTS) and len(unit) > len(_EVENTS)):
        raise FlameError(f"unknown profile unit {unit!r}; expected one of samples, seconds, bytes, events:NAME")


def unit_label(unit: str) -> str:
    """The unit in words: ``samples``, ``seconds``, ``bytes``, ``events (cycles)``."""
    event = unit_event(unit)
    return f"events ({event})" if event else unit


def count_suffix(value: float, unit: str) -> str:
    """What follows a formatted count (``1 sample``, ``3,400 events (cycles)``); ``""`` where the
    formatted value carries its unit (``1.2 ms``, ``3.0 MiB``)."""
    if unit == "samples":
        return " sample" if value == 1 else " samples"
    event = unit_event(unit)
    return (" event" if value == 1 else " events") + f" ({event})" if event else ""
