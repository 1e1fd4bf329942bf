"""A SIMULATED fleet (``gpulens --demo``): try the UI without GPUs.

Default 16 hosts x 8 H100s. Every figure is a pure function of (seed, host,
time bucket), so a fixed seed and a frozen clock give the same screens
every run. The fleet shows what the UI is for:

- ``4711`` alice, LLM pre-training on nodes 01-04: ~96 % with a dip every
  60 s (evaluation / checkpoint);
- ``4712`` bob, fine-tuning on nodes 05-06; node05 GPU 2 throttles (thermal);
- ``4720`` carol, a notebook on node07 holding 4 GPUs at 0 % (idle-held);
- ``4731`` dave, vision training on nodes 08-10, a saw-tooth load;
- node11 GPU 3 reports XID 79 (fallen off the bus) and its figures are n/a;
- node09 has no hardware cache counters (n/a with the reason);
- node12-13 serve inference from one process (no job key); node14-16 idle.

Samples are marked ``simulated=True``; the UI says SIMULATED.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import Future
from typing import Any

from gpulens.core import model as m
from gpulens.core.events import Emit, SampleEvent
from gpulens.core.processes import order
from gpulens.ipc.serialize import to_dict
from gpulens.sources._demo_sim import HostPlan, host_plan, host_sample

_SYSTEM = ((1, "systemd", "/sbin/init", "root", 0.1, 12 << 20),
           (812, "systemd/sshd", "sshd: /usr/sbin/sshd -D", "root", 0.0, 9 << 20),
           (1204, "systemd/nvidia-persistenced", "/usr/bin/nvidia-persistenced --user nvidia-persistenced",
            "nvidia-persistenced", 0.0, 3 << 20),
           (2210, "systemd/dcgm-exporter", "/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv",
            "root", 1.5, 80 << 20))
"""A demo host's processes outside any job (pid, tree ID, command line, user, CPU %, RSS)."""


class DemoSource:
    """Simulated fleet; ``simulated`` is True so the UI says SIMULATED.

    ``live=False`` emits the backfilled history synchronously inside
    :meth:`start` and then nothing: with a fixed ``seed`` and ``clock`` the
    screens are the same every run (tests and screenshots use this).
    """

    def __init__(self, interval_s: float = 1.0, *, hosts: int = 16, gpus_per_host: int = 8,
                 seed: int = 42, clock: Callable[[], float] = time.time,
                 backfill_s: float = 300.0, live: bool = True) -> None:
        self.interval_s = max(0.05, float(interval_s))
        self.hosts = hosts
        self.gpus_per_host = gpus_per_host
        self.seed = seed
        self.clock = clock
        self.backfill_s = backfill_s
        self.live = live
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._epoch = math.floor(clock() / 3600) * 3600 - 3 * 3600  # jobs began ~3 h ago
        self._plans: dict[int, HostPlan] = {}

    @property
    def name(self) -> str:
        """``demo``."""
        return "demo"

    @property
    def simulated(self) -> bool:
        """Always: this is made-up data."""
        return True

    def host_name(self, h: int) -> str:
        """The name of host ``h`` (0-based): ``gpu-node01``..."""
        return f"gpu-node{h + 1:02d}"

    def _tick(self, t: float) -> int:
        return math.floor(t / self.interval_s)

    def history(self, until: float | None = None) -> list[SampleEvent]:
        """Backfill: every host's samples over ``backfill_s`` up to ``until``, oldest first."""
        end = self._tick(self.clock() if until is None else until)
        first = end - max(0, math.ceil(self.backfill_s / self.interval_s))
        return [e for k in range(first, end) for e in self._events(k * self.interval_s, True)]

    def _events(self, t: float, backfill: bool = False) -> list[SampleEvent]:
        """Every host's sample at ``t``, in host order."""
        return [SampleEvent(self.sample(h, t), backfill) for h in range(self.hosts)]

    def start(self, emit: Emit) -> None:
        """Emit history, then a sample per host per interval (in a thread when live)."""
        if not self.live:
            for e in self.history():
                emit(e)
            for e in self._events(self._tick(self.clock()) * self.interval_s):
                emit(e)
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(emit,), name="gpulens-demo",
                                        daemon=True)
        self._thread.start()

    def _run(self, emit: Emit) -> None:
        for e in self.history():
            if self._stop.is_set():
                return
            emit(e)
        last = -1
        while not self._stop.is_set():
            k = self._tick(self.clock())
            if k > last:
                # Every host first, then the emits in a tight loop: the app takes the tick as
                # one burst (it waits BURST_S for the rest of one before redrawing).
                batch = self._events(k * self.interval_s)
                for e in batch:
                    emit(e)
                last = k
            wait = (k + 1) * self.interval_s - self.clock()
            self._stop.wait(min(self.interval_s, max(0.01, wait)))

    def stop(self) -> None:
        """Stop the thread; idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None

    def process_table(self, host: str, limit: int, pids: Collection[int] | None) -> Future[dict[str, Any]] | None:
        """A demo host's process table (SIMULATED): its job processes and a few system ones (None: not ours)."""
        names = {self.host_name(h): h for h in range(self.hosts)}
        if host not in names:
            return None
        t = self._tick(self.clock()) * self.interval_s
        s = self.sample(names[host], t)
        rows = [*s.jobs, *(m.JobInfo(pid=pid, tree_id=tree, cmdline=cmd, user=user, start_time=self._epoch - 86400,
                                     cpu_percent=cpu, rss_bytes=rss)
                           for pid, tree, cmd, user, cpu, rss in _SYSTEM)]
        chosen = order(r for r in rows if pids is None or r.pid in pids)[:limit]
        fut: Future[dict[str, Any]] = Future()
        fut.set_result({"processes": [to_dict(r) for r in chosen], "total": len(rows), "hidden": 0})
        return fut

    def sample(self, h: int, t: float) -> m.HostSample:
        """The sample of host ``h`` at time ``t`` (a pure function of seed, h, t)."""
        plan = self._plans.get(h)
        if plan is None:
            plan = self._plans[h] = host_plan(h, self.gpus_per_host, self._epoch, self.host_name(h))
        return host_sample(plan, f"{self.seed}:{h}:{self._tick(t)}", t, self._epoch)
