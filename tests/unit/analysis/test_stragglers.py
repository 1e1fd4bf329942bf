"""The straggler rule with a noise model (issue #32 item 2) on simulated and real jobs.

Simulated (tests/fakes/straggler_jobs.py): synchronous data-parallel jobs of 2,
4 and 8 ranks, 6 steps, every part of a step jittering (5 %, preemption spikes,
a heavy-tailed delay after the collective), identical or with one injected
straggler (more compute, arriving late, a slow DataLoader). Over 200 seeded
jobs per case the rule names no one on identical ranks in at least 99 % of
them, and names exactly the injected rank with the right kind in at least 99 %.
The seeds are fixed: every count is deterministic.

Real (tests/fakes/ddp_stragglers.py, slow): 4-rank DDP over gloo under
torchrun on this machine's CPUs, one rank doing 40 extra matrix products per
step, sleeping 15 ms before each forward pass, or loading each batch 15 ms
slower; and identical ranks.
"""

from __future__ import annotations

import math
import random
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from gpulens.analysis.trace.json_out import ranks_json, straggler_json
from gpulens.analysis.trace.rank_text import ranks_text
from gpulens.analysis.trace.ranks import RanksReport, analyze_ranks
from gpulens.analysis.trace.step_profile import StepProfile
from gpulens.analysis.trace.stragglers import Straggler, judge
from tests.fakes import straggler_jobs as sj

RUNS = 200
STEPS = 6
RANKS = (2, 4, 8)
EXTRA_MS = {"compute": 10.0, "late": 4.0, "data": 4.0}
"""Injected per step, against a ~26 ms step whose compute jitters by ~1 ms (plus spikes)."""


def _profiles(ranks: int, seed: int, kind: str | None = None, straggler: int = 0, extra: float = 0.0,
              steps: int = STEPS) -> list[tuple[int, StepProfile]]:
    job = sj.simulate(ranks, steps, seed, kind, straggler, extra)
    return [(r, sj.profile(s)) for r, s in enumerate(job)]


@pytest.mark.parametrize("ranks", RANKS)
def test_identical_ranks_are_not_named(ranks: int) -> None:
    named = [seed for seed in range(RUNS) if judge(sj.reports(_profiles(ranks, seed)))[0]]
    assert len(named) <= RUNS // 100, f"false positives in {len(named)} of {RUNS} jobs: seeds {named}"


def test_a_small_real_difference_is_not_named() -> None:
    """+0.5 ms of compute per step (2 % of the step, under the 5 % floor) on one rank of 4."""
    named = [seed for seed in range(RUNS)
             if judge(sj.reports(_profiles(4, 20_000 + seed, "compute", seed % 4, 0.5)))[0]]
    assert len(named) <= RUNS // 100


@pytest.mark.parametrize("kind", sorted(EXTRA_MS))
@pytest.mark.parametrize("ranks", RANKS)
def test_an_injected_straggler_is_named_by_its_kind(ranks: int, kind: str) -> None:
    wrong, excess, waited, held = [], [], [], 0
    for seed in range(RUNS):
        who = (seed * 7) % ranks
        got, rule = judge(sj.reports(_profiles(ranks, 10_000 + seed, kind, who, EXTRA_MS[kind])))
        if [(s.rank, s.kind) for s in got] != [(who, kind)]:
            wrong.append(seed)
            continue
        s = got[0]
        assert rule.noise_measured and s.excess_ms > s.threshold_ms >= rule.floor_ms
        assert s.comm_delta_ms == -s.others_wait_ms < 0  # it waits least
        excess.append(s.excess_ms / EXTRA_MS[kind])
        waited.append(s.others_wait_ms / s.excess_ms)
        held += s.held_back
    assert len(wrong) <= RUNS // 100, f"missed or misnamed in {len(wrong)} of {RUNS} jobs: seeds {wrong}"
    # the figure named is the injected one, and the others wait about that much longer at the all-reduce
    assert statistics.median(excess) == pytest.approx(1.0, abs=0.05) and 0.5 < min(excess) <= max(excess) < 2.0
    assert statistics.median(waited) == pytest.approx(1.0, abs=0.2)  # plus waiting for the slowest of the rest
    assert held >= 0.95 * len(excess)  # the others' jitter makes them the last to arrive in some steps


def test_noise_and_thresholds_follow_the_jitter() -> None:
    """The measured compute noise is about the simulated jitter (5 % of 20 ms, a little more with the
    spikes); the thresholds are never under the 5 % floor."""
    _, rule = judge(sj.reports(_profiles(8, 3, steps=10)))
    compute = rule.metric("compute")
    assert compute is not None and compute.noise_ms is not None
    assert 0.7 < compute.noise_ms < 2.0
    assert rule.floor_ms == pytest.approx(0.05 * rule.median_step_ms)
    assert all(m.threshold_ms >= rule.floor_ms for m in rule.metrics)
    _, quiet = judge(sj.reports(_profiles(8, 3, steps=10)), threshold_pct=0.0)
    assert quiet.floor_ms == pytest.approx(0.02)  # the absolute floor


def _flat(step: float, compute: float, wait: float, idle: float, n: int = 6, data: float = 0.0) -> StepProfile:
    wobble = [1.0 + 0.01 * ((i % 3) - 1) for i in range(n)]
    return StepProfile("CPU", "optimizer step", tuple(step * w for w in wobble), tuple(compute * w for w in wobble),
                       tuple(wait * w for w in wobble), tuple(data for _ in wobble), tuple(0.0 for _ in wobble),
                       tuple(idle * w for w in wobble), True)


def test_a_rank_that_waits_longer_is_not_named() -> None:
    """More idle time but also more collective wait: it is waiting for someone, not holding them back."""
    ranks = [(0, _flat(30.0, 20.0, 9.0, 1.0)), (1, _flat(30.0, 20.0, 9.0, 1.0)), (2, _flat(30.0, 20.0, 9.0, 1.0)),
             (3, _flat(40.0, 20.0, 19.0, 11.0))]
    got, rule = judge(sj.reports(ranks))
    assert got == [] and rule.noise_measured
    ranks[3] = (3, _flat(30.0, 20.0, 1.0, 9.0))  # the same idle, waiting least: it is the late one
    assert [(s.rank, s.kind) for s in judge(sj.reports(ranks))[0]] == [(3, "late")]


def test_a_few_bad_steps_do_not_name_a_rank() -> None:
    """Half its steps 6 ms slower (preempted twice in six steps and once more): its median moves, but the
    excess does not hold in more than two thirds of its steps."""
    base = _flat(30.0, 20.0, 9.0, 1.0)
    bumped = [c + (6.0 if i in (1, 3, 4) else 0.0) for i, c in enumerate(base.compute_ms)]
    odd = StepProfile("CPU", base.source, base.step_ms, tuple(bumped), base.wait_ms, base.data_ms, base.other_ms,
                      base.idle_ms, True)
    assert judge(sj.reports([(0, base), (1, base), (2, base), (3, odd)]))[0] == []
    bumped[0] += 6.0  # four of six: still not more than two thirds
    odd = StepProfile("CPU", base.source, base.step_ms, tuple(bumped), base.wait_ms, base.data_ms, base.other_ms,
                      base.idle_ms, True)
    assert judge(sj.reports([(0, base), (1, base), (2, base), (3, odd)]))[0] == []
    bumped[2] += 6.0  # five of six
    odd = StepProfile("CPU", base.source, base.step_ms, tuple(bumped), base.wait_ms, base.data_ms, base.other_ms,
                      base.idle_ms, True)
    assert [s.rank for s in judge(sj.reports([(0, base), (1, base), (2, base), (3, odd)]))[0]] == [3]


def test_few_steps_name_only_a_large_difference() -> None:
    even = [(r, _flat(30.0, 20.0, 9.0, 1.0, n=2)) for r in range(3)]
    got, rule = judge(sj.reports([*even, (3, _flat(30.0, 28.0, 1.0, 1.0, n=2))]))  # +8 ms: 27 % of a step
    assert got == [] and not rule.noise_measured and rule.steps == 2
    assert "noise not measured" in rule.note and rule.floor_ms == pytest.approx(15.0, rel=0.02)
    assert all(m.noise_ms is None for m in rule.metrics)
    got, _ = judge(sj.reports([*even, (3, _flat(30.0, 40.0, 1.0, 1.0, n=2))]))  # +20 ms: 67 %
    assert [(s.rank, s.kind) for s in got] == [(3, "compute")] and got[0].noise_ms is None


def test_one_rank_is_not_compared() -> None:
    got, rule = judge(sj.reports([(0, _flat(30.0, 20.0, 9.0, 1.0))]))
    assert got == [] and rule.note == "needs two or more ranks with steps" and rule.metrics == ()
    assert judge(sj.reports([]))[1].ranks == 0


def test_median_of_the_others_equals_the_plain_median() -> None:
    """The O(log n) median of the other ranks' medians equals statistics.median of the list without the rank
    (ties included)."""
    from gpulens.analysis.trace.stragglers import _median_without

    rng = random.Random(5)
    for _ in range(2000):
        values = sorted(rng.choice([1.0, 2.0, 3.0, rng.random()]) for _ in range(rng.randint(2, 9)))
        me = rng.choice(values)
        rest = list(values)
        rest.remove(me)
        assert _median_without(values, me) == statistics.median(rest)


def test_noise_of_a_long_job_is_bounded_and_right() -> None:
    """2,000 steps on 8 ranks: the noise is taken on 64 evenly spaced steps a rank, pairs up to 16 apart, and
    still reads the simulated jitter (1 ms of compute; a slow drift over the run is not step-to-step noise)."""
    rng = random.Random(9)

    def prof() -> StepProfile:
        compute = tuple(20.0 + 3.0 * i / 2000 + rng.gauss(0.0, 1.0) for i in range(2000))
        flat = tuple(1.0 for _ in compute)
        return StepProfile("CPU", "x", tuple(c + 6.0 for c in compute), compute, flat, flat, flat, flat, True)

    got, rule = judge(sj.reports([(r, prof()) for r in range(8)]))
    compute = rule.metric("compute")
    assert got == [] and compute is not None and compute.noise_ms == pytest.approx(1.0, abs=0.1)


def test_json_never_writes_infinity() -> None:
    s = Straggler(1, "data loading", 5.0, 0.0, 5.0, math.inf, 0.0, -5.0, 0.0, 0.0, "data", kind="data",
                  data_delta_ms=5.0, others_wait_ms=5.0, threshold_ms=1.0, noise_ms=0.2, step_pct=math.inf, steps=6,
                  held_back=True)
    d = straggler_json(s)
    assert d["excess_pct"] is None and d["ratio"] is None and d["step_pct"] is None
    assert d["kind"] == "data" and d["held_back"] is True and d["excess_ms"] == 5.0


# --- the same jobs written as traces and read back -----------------------------------------------------------


@pytest.mark.parametrize("basis", ["CPU", "GPU"])
@pytest.mark.parametrize("kind", [None, "compute", "late", "data"])
def test_trace_parts_equal_the_simulation(tmp_path: Path, basis: str, kind: str | None) -> None:
    """A CPU-only gloo-style trace (steps between Optimizer.step calls, gloo:all_reduce on its own thread, the
    DataLoader annotation) and a GPU one (ProfilerStep spans, compute and NCCL kernels): the parts of every step
    read back from the files equal the simulation's (timestamps are whole microseconds), and the rule names
    the injected rank."""
    job = sj.simulate(4, STEPS, 7, kind, 2, EXTRA_MS.get(kind or "", 0.0))
    rep = analyze_ranks([str(sj.write_job(job, tmp_path / "job", basis))])
    for r, steps in zip(rep.ranks, job, strict=True):
        assert r.arrival is not None and r.arrival.profile is not None
        got, want = r.arrival.profile, sj.profile(steps, basis)
        assert (got.basis, got.source, got.steps, got.data_marked) == (basis, want.source, STEPS, True)
        for part in ("step", "compute", "wait", "data", "other", "idle"):
            assert got.part(part) == pytest.approx(want.part(part), abs=0.005), part
    assert [(s.rank, s.kind) for s in rep.stragglers] == ([] if kind is None else [(2, kind)])
    text = ranks_text(rep)
    if kind is None:
        assert "stragglers: none (ranks within noise: per-step spread ±" in text
    else:
        by = {"compute": "compute", "late": "late arrival", "data": "data loading"}[kind]
        assert f"rank 2 by {by}: " in text and "the others wait for it at the collective" in text
    d = ranks_json(rep)
    assert d["straggler_rule"]["noise_measured"] is True and d["straggler_rule"]["steps"] == STEPS
    assert [s["kind"] for s in d["stragglers"]] == ([] if kind is None else [kind])


# --- real jobs: DDP over gloo under torchrun ---------------------------------------------------------------------

FAKE = Path(__file__).resolve().parents[2] / "fakes" / "ddp_stragglers.py"


@pytest.fixture(scope="module")
def real_jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RanksReport]:
    pytest.importorskip("torch", reason="needs the PyTorch CPU build")
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip(f"needs torchrun next to {sys.executable} (it comes with torch)")
    out: dict[str, RanksReport] = {}
    for mode in ("compute", "late", "data", "none"):
        dest = tmp_path_factory.mktemp(mode)
        res = subprocess.run([str(torchrun), "--standalone", "--nproc-per-node=4", str(FAKE), str(dest), mode, "2"],
                             capture_output=True, text=True, timeout=240, env=_env())
        assert res.returncode == 0, res.stderr[-2000:]
        out[mode] = analyze_ranks([str(dest)], jobs=1)
        shutil.rmtree(dest, ignore_errors=True)
    return out


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("mode", ["compute", "late", "data"])
def test_real_gloo_straggler_is_named(real_jobs: dict[str, RanksReport], mode: str) -> None:
    """Rank 2 of 4 is the straggler: named first, by its kind, and the others wait for it at the all-reduce.
    (Four ranks share this machine's two cores: a rank the scheduler keeps off the CPU can be named late too,
    after it, as it does hold the others back.)"""
    rep = real_jobs[mode]
    assert [r.rank for r in rep.ranks] == [0, 1, 2, 3]
    assert rep.rule is not None and rep.rule.noise_measured and rep.rule.steps == 7
    s = rep.stragglers[0]
    assert (s.rank, s.kind) == (2, mode)
    assert s.held_back and s.comm_delta_ms < 0 < s.excess_ms - s.threshold_ms
    assert all(o.kind == "late" and o.excess_ms < s.excess_ms for o in rep.stragglers[1:])


@pytest.mark.slow
@pytest.mark.torch
def test_real_gloo_identical_ranks_have_no_compute_or_data_straggler(real_jobs: dict[str, RanksReport]) -> None:
    """Identical ranks: none is named by compute or by its data loading (the old rule named one by step time in
    5 of 5 such runs here). Only a rank the scheduler kept off the shared cores in most steps can be named,
    as late: it did hold the others back."""
    rep = real_jobs["none"]
    assert rep.rule is not None and rep.rule.noise_measured
    assert all(s.kind == "late" for s in rep.stragglers)
    if not rep.stragglers:
        assert "stragglers: none (ranks within noise" in ranks_text(rep)
