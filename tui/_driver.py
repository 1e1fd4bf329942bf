"""A terminal driver whose input thread sleeps until a key arrives (Textual's wakes 10 times a second).

Textual's :class:`LinuxDriver` waits for input with ``select(0.1)`` in a loop:
the timeout serves to end that loop once ``exit_event`` is set, and to let the
parser give up on a lone ``ESC`` (is it the Escape key or the start of a
sequence?). On an idle viewer that is ten wake-ups a second for nothing, about
0.2 % of a core with the GIL taken each time.

:class:`IdleInputDriver` runs the same loop, with two changes: the select waits
for the parser's own deadline when it has one and for ever when it has none,
and a pipe beside stdin wakes it when ``exit_event`` is set. Everything else
(the parser, the messages, the final read) is Textual's, unchanged.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
from codecs import getincrementaldecoder
from typing import Any

from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.app import App
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver

PARSER_TICK_S = 0.1
"""Textual's own timeout: used when the parser does not say when it next needs a tick."""


class _WakingEvent(threading.Event):
    """An event that, when set, also writes to a pipe (so a ``select`` on that pipe returns)."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self._wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        with contextlib.suppress(OSError):  # closed, or full: a wake-up is pending already
            os.write(self._wake_fd, b"x")


class IdleInputDriver(LinuxDriver):
    """:class:`LinuxDriver` whose input thread wakes only for input, the parser's deadline, or exit."""

    def __init__(self, app: App[Any], *, debug: bool = False, mouse: bool = True,
                 size: tuple[int, int] | None = None) -> None:
        super().__init__(app, debug=debug, mouse=mouse, size=size)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.exit_event = _WakingEvent(self._wake_w)
        self.wakeups = 0
        """How many times the input thread's select returned (for tests)."""

    def _timeout(self, parser: XTermParser) -> float | None:
        """Seconds until the parser's pending timeout (a lone ESC), or None: wait for input."""
        if not hasattr(parser, "_timeout_time"):  # a Textual without it: Textual's own behaviour
            return PARSER_TICK_S
        deadline = parser._timeout_time
        return None if deadline is None else max(0.0, deadline - get_time())

    def _drain_wake(self) -> None:
        with contextlib.suppress(OSError):  # empty (EAGAIN)
            while os.read(self._wake_r, 512):
                pass

    def run_input_thread(self) -> None:
        """Textual's input loop, sleeping until there is something to do."""
        selector = selectors.SelectSelector()
        fileno = self.fileno
        selector.register(fileno, selectors.EVENT_READ)
        selector.register(self._wake_r, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode

        def process(ready: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> None:
            self.wakeups += 1
            for key, mask in ready:
                if key.fd == self._wake_r:
                    self._drain_wake()
                elif mask & selectors.EVENT_READ:
                    data = decode(os.read(fileno, 1024 * 4), final=final)
                    if not data:  # stdin piped and at its end
                        break
                    for event in parser.feed(data):
                        self.process_message(event)
            for event in parser.tick():
                self.process_message(event)

        try:
            while not self.exit_event.is_set():
                process(selector.select(self._timeout(parser)))
            selector.unregister(fileno)
            process(selector.select(PARSER_TICK_S), final=True)
        finally:
            selector.close()

    def close(self) -> None:
        """Textual's cleanup, then the wake pipe."""
        super().close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


class IdleInput:
    """App mixin: :class:`IdleInputDriver` where Textual would pick its :class:`LinuxDriver`."""

    def get_driver_class(self) -> type[Driver]:
        """Textual's choice, with LinuxDriver swapped for :class:`IdleInputDriver`."""
        chosen: type[Driver] = super().get_driver_class()  # type: ignore[misc]
        return IdleInputDriver if chosen is LinuxDriver else chosen
