"""The input thread of :class:`IdleInputDriver`: keys, a lone ESC, exit, and no idle wake-ups."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from textual import events
from textual.drivers.linux_driver import LinuxDriver
from textual.message import Message

from gpulens.tui._driver import IdleInput, IdleInputDriver
from gpulens.tui.app import GpulensApp


class _Recording(IdleInputDriver):
    """The driver with its messages kept instead of posted to an app."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.messages: list[Message] = []

    def process_message(self, message: Message) -> None:
        self.messages.append(message)


def _until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def _keys(driver: _Recording) -> list[str]:
    return [m.key for m in driver.messages if isinstance(m, events.Key)]


def test_keys_arrive_a_lone_escape_is_delivered_idle_costs_no_wakeups_and_exit_ends_the_thread() -> None:
    async def scenario() -> None:
        driver = _Recording(object(), debug=False, mouse=False, size=(80, 24))
        read_fd, write_fd = os.pipe()
        driver.fileno = read_fd
        thread = threading.Thread(target=driver.run_input_thread, daemon=True)
        thread.start()
        try:
            os.write(write_fd, b"a")
            assert _until(lambda: "a" in _keys(driver)), driver.messages
            time.sleep(0.3)  # let any pending tick run
            before = driver.wakeups
            time.sleep(1.0)
            # Textual's own loop wakes 10 times in this second; this one waits for input.
            assert driver.wakeups - before == 0
            os.write(write_fd, b"\x1b")  # a lone ESC: only the parser's timeout can make it the Escape key
            assert _until(lambda: "escape" in _keys(driver)), driver.messages
            driver.exit_event.set()
            thread.join(timeout=5)
            assert not thread.is_alive()
        finally:
            thread.join(timeout=5)
            driver.close()
            os.close(read_fd)
            os.close(write_fd)

    asyncio.run(scenario())


def test_the_app_gets_the_idle_driver_where_textual_would_pick_its_linux_driver() -> None:
    class Other:
        def get_driver_class(self) -> type:
            return LinuxDriver

    class Mixed(IdleInput, Other):
        pass

    assert Mixed().get_driver_class() is IdleInputDriver
    assert issubclass(IdleInputDriver, LinuxDriver)
    assert IdleInput in GpulensApp.__mro__
