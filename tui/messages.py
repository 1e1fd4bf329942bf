"""Navigation messages: screens post them, the app routes them (screens never import the app)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from gpulens.analysis.flame.model import Profile


class OpenHost(Message):
    """Open the host screen of ``host``."""

    def __init__(self, host: str) -> None:
        super().__init__()
        self.host = host


class OpenJob(Message):
    """Open the job screen of the job with key ``key``."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key


class OpenFlame(Message):
    """Show ``profile`` as a full-screen flame graph."""

    def __init__(self, profile: Profile, title: str = "") -> None:
        super().__init__()
        self.profile = profile
        self.title = title


class OpenProfiler(Message):
    """Open the PyTorch profiler for ``pids`` on ``host``.

    ``through_agent``: the processes run on another host, whose agent takes the
    traces (through the source's requests); else the local trace service does.
    ``others``: a job's processes on further hosts, ``(host, pids)``, traced
    through their agents in the same screen (one trace per rank).
    """

    def __init__(self, host: str, pids: tuple[int, ...], *, through_agent: bool,
                 others: tuple[tuple[str, tuple[int, ...]], ...] = ()) -> None:
        super().__init__()
        self.host = host
        self.pids = pids
        self.through_agent = through_agent
        self.others = others
