"""The base of every reason value: why something was refused, could not be read or did not happen.

A reason is a frozen dataclass with a ``kind`` (an enum member) and the facts
its sentence names. Code and tests compare ``kind`` and the facts; people,
logs and the wire get ``str(reason)``. The sentences live in one table per
class, ``TEXT``: kind -> a template formatted with the value itself
(``"{0.count} trace(s) accepted here still wait"``), or a function of the
value where a fact must be worked out first (``os.strerror(code)``).

Usage::

    @dataclass(frozen=True, slots=True)
    class NoSlot(Reason):
        kind: NoSlotKind
        limit: int = 0

        TEXT: ClassVar[ReasonText] = {
            NoSlotKind.STOPPING: "agent is stopping",
            NoSlotKind.AGENT_FULL: "agent is running {0.limit} trace/profile requests (its limit)",
        }

    str(NoSlot(NoSlotKind.AGENT_FULL, 8))  # 'agent is running 8 trace/profile requests (its limit)'
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

ReasonText = Mapping[Any, "str | Callable[[Any], str]"]
"""A reason class's sentences: its kind -> a ``str.format`` template of the value (``{0.field}``), or a
function of the value."""


class Reason:
    """Mixin of the reason values: ``str()`` renders the kind's sentence from ``TEXT``."""

    __slots__ = ()
    kind: enum.Enum
    TEXT: ClassVar[ReasonText]

    def __str__(self) -> str:
        return self.render()

    def render(self) -> str:
        """The one line a person, a log or the wire reads."""
        text = self.TEXT[self.kind]
        return text.format(self) if isinstance(text, str) else text(self)


def rendered(reason: Reason | None) -> str | None:
    """The reason's sentence, None staying None: what a reply, a log line or the screen carries."""
    return None if reason is None else reason.render()
