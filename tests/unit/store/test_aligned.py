"""Aligned columns: fixed in absolute time, only the newest changes between column boundaries."""

from __future__ import annotations

import dataclasses
import math
import random

from gpulens.core.events import SampleEvent
from gpulens.core.model import JobInfo
from gpulens.store.store import Store
from tests.unit.store.test_store import T0, sample
from tests.unit.store.test_window_stats import f32


def _expected(raw: dict[int, float], now_b: int, width: int, points: int, unit: int = 1) -> list[float]:
    """Column means computed from the raw samples by absolute bucket: column of bucket u = u * n // W."""
    cur = now_b * points // width
    out = []
    for c in range(cur - points + 1, cur + 1):
        if width >= points:
            vals = [v for t, v in raw.items() if (t // unit) * points // width == c and t // unit <= now_b]
        else:
            start = c * width // points
            vals = [v for t, v in raw.items() if t // unit == start]
        out.append(sum(vals) / len(vals) if vals else math.nan)
    return out


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all((x != x and y != y) or math.isclose(x, y, rel_tol=1e-5) for x, y in zip(a, b, strict=True))


def test_aligned_columns_equal_the_raw_samples_grouped_by_absolute_time() -> None:
    store = Store()
    rng = random.Random(3)
    raw: dict[int, float] = {}
    for i in range(400):
        if i % 13 == 7:
            continue  # a gap: NaN where a column holds none
        cpu = round(rng.uniform(0, 100), 2)
        raw[int(T0) + i] = f32(cpu)
        store.apply(SampleEvent(sample(T0 + i, cpu=cpu)))
        if i > 320:
            now_b = int(T0) + i
            for points in (69, 300, 26):
                got = store.series("h1", "cpu.total_percent", 300, points, aligned=True)
                assert _same(got, _expected(raw, now_b, 300, points)), (i, points)
            # A 1 m window over more cells than buckets: each cell shows the bucket it starts in.
            got = store.series("h1", "cpu.total_percent", 60, 69, aligned=True)
            assert _same(got, _expected(raw, now_b, 60, 69)), i


def test_aligned_equals_the_plain_series_when_a_column_is_one_bucket() -> None:
    store = Store()
    for i in range(200):
        store.apply(SampleEvent(sample(T0 + i, cpu=float(i % 17))))
    assert store.series("h1", "cpu.total_percent", 120, 120, aligned=True) == \
        store.series("h1", "cpu.total_percent", 120, 120)


def test_between_boundaries_only_the_newest_column_changes_and_the_stamp_says_when() -> None:
    store = Store()
    rng = random.Random(5)
    prev = prev_stamp = None
    changes = 0
    for i in range(600):
        store.apply(SampleEvent(sample(T0 + i, cpu=rng.uniform(0, 100))))
        cols = store.series("h1", "cpu.total_percent", 300, 69, aligned=True)
        stamp = store.series_stamp("h1", 300, 69)
        assert store.series("h1", "cpu.total_percent", 300, 69, tail=1) == cols[-1:]
        assert _same(store.series("h1", "cpu.total_percent", 300, 69, aligned=True, tail=3), cols[-3:])
        if prev is not None and stamp == prev_stamp:
            assert cols[:-1] == prev[:-1], i  # closed columns untouched
        elif prev is not None:
            changes += 1
        prev, prev_stamp = cols, stamp
    # 600 s at 300/69 = 4.35 s per column: the stamp changes about once per column, not per second.
    assert 130 <= changes <= 140


def test_a_late_sample_in_a_closed_column_changes_the_stamp() -> None:
    store = Store()
    for i in range(100):
        if i != 50:
            store.apply(SampleEvent(sample(T0 + i, cpu=10.0)))
    before = store.series_stamp("h1", 300, 69)
    old = store.series("h1", "cpu.total_percent", 300, 69, aligned=True)
    store.apply(SampleEvent(sample(T0 + 50, cpu=90.0)))  # out of order: 50 s late
    assert store.series_stamp("h1", 300, 69) != before
    assert store.series("h1", "cpu.total_percent", 300, 69, aligned=True) != old


def test_a_host_lagging_behind_the_newest_column_changes_its_stamp_with_each_sample() -> None:
    store = Store()
    for i in range(100):
        store.apply(SampleEvent(sample(T0 + i, host="fast", cpu=1.0)))
        store.apply(SampleEvent(sample(T0 + i - 30, host="slow", cpu=1.0)))
    a = store.series_stamp("slow", 300, 69)
    store.apply(SampleEvent(sample(T0 + 70, host="slow", cpu=99.0)))  # in order, but in a closed column
    assert store.series_stamp("slow", 300, 69) != a


def test_coarse_windows_align_on_ten_second_buckets() -> None:
    store = Store()
    raw: dict[int, list[float]] = {}
    for i in range(2000):
        cpu = float((i * 7) % 100)
        raw.setdefault((int(T0) + i) // 10, []).append(f32(cpu))
        store.apply(SampleEvent(sample(T0 + i, cpu=cpu)))
    now_cb = (int(T0) + 1999) // 10
    means = {cb: sum(v) / len(v) for cb, v in raw.items()}
    got = store.series("h1", "cpu.total_percent", 3600, 100, aligned=True)
    cur = now_cb * 100 // 360
    want = []
    for c in range(cur - 99, cur + 1):
        # Bucket means averaged per column, as the store does (each coarse bucket counts once).
        vals = [m for cb, m in means.items() if cb * 100 // 360 == c]
        want.append(sum(vals) / len(vals) if vals else math.nan)
    assert _same(got, want)


def test_job_series_aligned_and_its_stamp() -> None:
    store = Store()
    for i in range(120):
        for host, cpu in (("a", float(i)), ("b", 1.0)):
            j = JobInfo(pid=7, tree_id="t", cmdline="python x", user="u", start_time=T0, cpu_percent=cpu,
                        job_key="J1")
            store.apply(SampleEvent(sample(T0 + i, host=host, jobs=(j,))))
    key = store.jobs(300)[0].key
    cols = store.job_series(key, "job.cpu_percent", 300, 69, aligned=True)
    a = store.series("a", "job.cpu_percent", 300, 69, job=key, aligned=True)
    b = store.series("b", "job.cpu_percent", 300, 69, job=key, aligned=True)
    assert _same(cols, [x + y if x == x else math.nan for x, y in zip(a, b, strict=True)])  # CPU is summed over hosts
    assert store.job_series(key, "job.cpu_percent", 300, 69, tail=1) == cols[-1:]
    stamp = store.job_series_stamp(key, 300, 69)
    assert stamp[0] == ("a", "b")


def test_stale_columns_reading_only_those_keeps_the_series_equal_to_a_full_read() -> None:
    """Keep the old columns shifted, re-read the stale newest ones: equal to a full read at every tick."""
    store = Store()
    rng = random.Random(9)
    for window, points in ((300, 69), (300, 132), (60, 69), (3600, 100)):
        kept: list[float] | None = None
        stamp: tuple[int, ...] | None = None
        lag_kept: list[float] | None = None
        lag_stamp: tuple[int, ...] | None = None
        partial_reads = 0
        for i in range(700):
            t = T0 + 10_000 * points + i
            store.apply(SampleEvent(sample(t, cpu=rng.uniform(0, 100))))
            store.apply(SampleEvent(sample(t - 12 if i % 3 else t - 11, host="lag", cpu=float(i % 50))))
            if i % 97 == 50:
                store.apply(SampleEvent(sample(t - 40 - i % 7, host="h1", cpu=1.0)))  # late, out of order
            new = store.series_stamp("h1", window, points)
            n = store.stale_columns(window, points, stamp, new)
            if kept is None or n >= points:
                kept = store.series("h1", "cpu.total_percent", window, points, aligned=True)
            else:
                assert stamp is not None  # set with kept
                shift = int(new[0]) - int(stamp[0])  # columns started since
                head = kept[shift : points - n + shift]
                kept = head + store.series("h1", "cpu.total_percent", window, points, tail=n)
                partial_reads += 1
            stamp = new
            assert _same(kept, store.series("h1", "cpu.total_percent", window, points, aligned=True)), \
                (window, points, i)
            lag_new = store.series_stamp("lag", window, points)
            m = store.stale_columns(window, points, lag_stamp, lag_new)
            if lag_kept is None or m >= points:
                lag_kept = store.series("lag", "cpu.total_percent", window, points, aligned=True)
            else:
                assert lag_stamp is not None  # set with lag_kept
                d = int(lag_new[0]) - int(lag_stamp[0])
                lag_kept = lag_kept[d : points - m + d] + store.series("lag", "cpu.total_percent", window, points,
                                                                        tail=m)
            lag_stamp = lag_new
            assert _same(lag_kept, store.series("lag", "cpu.total_percent", window, points, aligned=True)), \
                ("lag", window, points, i)
        assert partial_reads > 600, (window, points)


def test_newest_equals_the_tail_of_a_full_aligned_read() -> None:
    """``Store.newest`` (every row's per-tick read) is the newest column of ``series(aligned=True)``."""
    store = Store(resolution_s=1.0, history_s=3600.0)
    rng = random.Random(11)
    checked = 0
    for i in range(700):
        if i % 17 == 5:
            continue  # gaps
        s = sample(T0 + i, cpu=round(rng.uniform(0, 100), 2), util=round(rng.uniform(0, 100), 1))
        g1 = dataclasses.replace(s.gpus[0], index=1, utilization_percent=round(rng.uniform(0, 100), 1),
                                 power_w=None if i % 5 == 0 else 200.0 + i % 7)
        store.apply(SampleEvent(dataclasses.replace(s, gpus=(s.gpus[0], g1))))
        if i % 37:
            continue
        for window in (60.0, 300.0, 900.0, 3600.0):
            for points in (7, 26, 60, 69, 301):  # fewer and more columns than buckets
                for metric, gpu in (("cpu.total_percent", None), ("gpu.utilization_percent", None),
                                    ("gpu.utilization_percent", 0), ("gpu.utilization_percent", 1),
                                    ("gpu.power_w", 1), ("gpu.utilization_percent", 7)):
                    want = store.series("h1", metric, window, points, gpu=gpu, aligned=True)[-1]
                    got = store.newest("h1", metric, window, points, gpu)
                    assert (want != want and got != got) or want == got, (i, window, points, metric, gpu)
                    checked += 1
    assert store.newest("nope", "cpu.total_percent", 300.0, 60) != store.newest("nope", "cpu.total_percent", 300.0, 60)
    assert checked > 1000
