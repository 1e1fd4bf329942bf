"""A replay seek rebuilds the whole history window: the 15m and 1h figures equal a store fed up to there.

The recording is 70 minutes of 2 hosts (one with a GPU and job 4711) whose
values change every second, so any missing, doubled or newer sample shows in
a window's now / mean / min / max / sample count. The reference is computed
independently: the whole file read with ``read_recording`` and every event up
to the target fed, in order, to a fresh :class:`Store`.
"""

from __future__ import annotations

import asyncio
import math
import threading
from pathlib import Path
from typing import Any

from gpulens.core.events import SampleEvent, SourceEvent
from gpulens.core.model import (
    CpuSample,
    GpuSample,
    HostSample,
    JobInfo,
    MemorySample,
    NetworkSample,
    StorageSample,
)
from gpulens.ipc.recording import read_recording
from gpulens.sources.local import Recorder
from gpulens.sources.replay import ReplaySource
from gpulens.store.store import Store
from gpulens.tui.app import GpulensApp
from gpulens.tui.replay import SEEK_HISTORY_S, ReplayControl
from tests.fakes.tui_fakes import FROZEN, settle, sync

T0 = FROZEN - 20_000
SECONDS = 4200
WINDOWS = (900.0, 3600.0)
HOST_METRICS = ("cpu.total_percent", "memory.used_percent", "network.rx_bytes_per_s")


def _sample(host: str, k: int) -> SampleEvent:
    t = T0 + k
    wave = (k * 37 + (500 if k % 997 == 0 else 0)) % 101  # a spike now and then: max must catch it
    gpus = (GpuSample(index=0, name="H100", uuid="GPU-0", utilization_percent=float((k * 13) % 97),
                      power_w=100.0 + k % 50),) if host == "node-a" else ()
    jobs = (JobInfo(pid=4711, tree_id="systemd/sh/python3", cmdline="python train.py", user="alice",
                    start_time=T0, job_key="4711", cpu_percent=float(k % 70)),) if host == "node-a" else ()
    return SampleEvent(HostSample(host=host, time=t, cpu=CpuSample(total_percent=float(wave)),
                                  memory=MemorySample(total_bytes=1000, used_bytes=(k * 7) % 1000),
                                  network=NetworkSample(float(k % 11), None), storage=StorageSample(None, None),
                                  gpus=gpus, jobs=jobs))


def record(path: Path) -> Path:
    rec = Recorder(str(path), "test")
    for k in range(SECONDS + 1):
        rec.write(_sample("node-a", k))
        if k % 3:  # node-b misses every third second: gaps must stay gaps
            rec.write(_sample("node-b", k))
    rec.close()
    return path


def direct_store(events: list[SourceEvent], upto: float, like: Store) -> Store:
    """The reference: a fresh store fed the recording, in file order, up to ``upto``."""
    store = Store(resolution_s=like.resolution_s, history_s=like.history_s)
    store.apply_many([e for e in events if isinstance(e, SampleEvent) and e.sample.time <= upto])
    return store


def _plain(v: float) -> float | None:
    return None if math.isnan(v) else round(v, 9)


def figures(store: Store) -> dict[str, object]:
    """Every window figure the screens show for the 15m and 1h windows (NaN as None)."""
    out: dict[str, object] = {"now": store.now}
    for w in WINDOWS:
        stats: list[tuple[str, str, int | None]] = [("node-a", m, None) for m in HOST_METRICS]
        stats += [("node-b", m, None) for m in HOST_METRICS]
        stats += [("node-a", "gpu.utilization_percent", 0), ("node-a", "gpu.power_w", 0)]
        for host, metric, gpu in stats:
            s = store.window_stats(host, metric, w, gpu=gpu)
            out[f"{host} {metric} {w}"] = (_plain(s.now), _plain(s.mean), _plain(s.min), _plain(s.max),
                                           s.samples, s.covered_s)
            out[f"{host} {metric} {w} series"] = [_plain(v) for v in store.series(host, metric, w, 60, gpu=gpu)]
        j = store.job_stats("4711", "job.cpu_percent", w)
        out[f"job {w}"] = (_plain(j.mean), _plain(j.min), _plain(j.max), j.samples)
    return out


async def until(pilot: Any, cond: Any, what: str = "condition") -> None:
    for _ in range(1500):
        await pilot.pause()
        if cond():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{what} not reached")


async def paused_and_ready(app: GpulensApp, pilot: Any) -> ReplayControl:
    await until(pilot, lambda: app.replay is not None and app.replay.ready, "index")
    await settle(app, pilot)
    control = app.replay
    assert control is not None
    await pilot.press("space")
    assert not control.playing
    return control


def settled(app: GpulensApp, control: ReplayControl) -> bool:
    busy = [w for w in app.workers if w.group == "replay-seek" and w.is_running]
    return not control.seeking and control.filling is None and not busy


@sync
async def test_a_seek_back_and_ahead_loads_the_whole_hour_before_the_target(tmp_path: Path) -> None:
    path = record(tmp_path / "r.gpulens")
    _, events = read_recording(str(path))
    app = GpulensApp(source=ReplaySource(str(path)))
    async with app.run_test(size=(120, 40)) as pilot:
        control = await paused_and_ready(app, pilot)
        for target in (T0 + 4000, T0 + 3700):  # ahead (far), then back
            control.seek_to(target)
            await until(pilot, lambda: settled(app, control), f"seek to T0+{target - T0:.0f}")
            gen = control.generation
            assert [k for g, k, _ in control.installs if g == gen] == ["first", "full"]  # the last 5 min first
            assert control.position == target and control.loaded_from == target - app.store.history_s
            want = figures(direct_store(events, target, app.store))
            assert figures(app.store) == want
            quick = direct_store([e for e in events if isinstance(e, SampleEvent)
                                  and e.sample.time > target - SEEK_HISTORY_S], target, app.store)
            assert figures(quick) != want  # what the first pass alone (the old behaviour) shows differs

        control.seek_to(T0 + 3650)  # playing fast meanwhile: the full store catches up with the position
        control.speed = 32.0
        control.toggle()
        await until(pilot, lambda: settled(app, control) and control.position > T0 + 3700, "playback")
        control.toggle()
        assert not control.playing
        assert figures(app.store) == figures(direct_store(events, control.position, app.store))


@sync
async def test_a_seek_during_the_history_load_cancels_it_and_stores_never_mix(tmp_path: Path) -> None:
    path = record(tmp_path / "r.gpulens")
    _, events = read_recording(str(path))
    app = GpulensApp(source=ReplaySource(str(path)))
    async with app.run_test(size=(120, 40)) as pilot:
        control = await paused_and_ready(app, pilot)
        t1, t2 = T0 + 2000, T0 + 4100
        gate, held = threading.Event(), threading.Event()
        read = control.index.events_between

        def gated(after: float, upto: float) -> list[SourceEvent]:
            # Hold the second pass of the seek to t1 (records older than its first pass) until released.
            if threading.current_thread() is not threading.main_thread() and upto <= t1 - SEEK_HISTORY_S \
                    and not gate.is_set():
                held.set()
                gate.wait(30)
            return read(after, upto)

        control.index.events_between = gated  # type: ignore[method-assign]
        try:
            control.seek_to(t1)
            await until(pilot, lambda: held.is_set() and control.position == t1, "first pass of t1")
            first = control.generation
            assert control.filling is not None and "history" in control.bar_text(120).plain
            control.seek_to(t2)
            await until(pilot, lambda: control.position == t2 and not control.seeking, "first pass of t2")
        finally:
            gate.set()
        await until(pilot, lambda: settled(app, control), "both rebuilds ended")
        await asyncio.sleep(0.2)
        await pilot.pause()
        assert (first, "full", t1) not in control.installs  # the superseded rebuild never swapped its store in
        assert control.installs[-1] == (control.generation, "full", t2)
        assert app.store.now == t2
        assert figures(app.store) == figures(direct_store(events, t2, app.store))
