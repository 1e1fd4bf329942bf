"""Simulated synchronous data-parallel jobs with jittery steps and an optional injected straggler.

``simulate(ranks, steps, seed, kind, straggler, extra_ms)`` plays a job in
absolute time: each step, every rank loads a batch (``DATA_MS``), sits idle a
little (``IDLE_MS``), computes (``COMPUTE_MS``), then enters an all-reduce
that ends ``COMM_MS`` after the last rank arrived; after it each rank is
scheduled back after a short random delay and runs its optimizer step
(``OPT_MS``), which ends its step. Every part jitters step to step (``JITTER``
of its size), compute has occasional preemption spikes and the delay after
the collective a heavy tail, as on a shared machine. ``kind`` injects
``extra_ms`` per step on rank ``straggler``: "compute" (more compute),
"late" (more idle time before the forward pass) or "data" (a slower
DataLoader); None: identical ranks.

It returns each rank's :class:`Step` records: the ground truth the straggler
rule's input (:class:`StepProfile`, :func:`profile`; :func:`reports` hands those to the rule) should
equal, and what
``write_trace`` turns into a Chrome trace: CPU-only gloo style (steps between
``Optimizer.step`` calls, ``gloo:all_reduce`` on its own thread) or GPU
style (``ProfilerStep#N`` spans, compute and NCCL kernels).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulens.analysis.trace.arrival import RankArrival
from gpulens.analysis.trace.rank_report import RankReport, TimeSplit
from gpulens.analysis.trace.step_profile import StepProfile
from gpulens.analysis.trace.steps import StepTimes

DATA_MS = 1.0
IDLE_MS = 0.5
COMPUTE_MS = 20.0
COMM_MS = 3.0
OPT_MS = 1.0
JITTER = 0.05
SPIKE_P = 0.05
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


@dataclass(frozen=True)
class Step:
    """One rank's step, in absolute ms: its start, the parts, the collective's span, its end."""

    start: float
    data: float
    idle_pre: float
    compute: float
    arrive: float
    done: float
    delay: float
    opt: float
    end: float


def _j(rng: random.Random, base: float) -> float:
    return max(base * (1.0 + rng.gauss(0.0, JITTER)), 0.0)


def simulate(ranks: int, steps: int, seed: int, kind: str | None = None, straggler: int = 0,
             extra_ms: float = 6.0) -> list[list[Step]]:
    """Each rank's steps (see the module docstring)."""
    rng = random.Random(seed)
    start = [rng.uniform(0.0, 0.5) for _ in range(ranks)]
    out: list[list[Step]] = [[] for _ in range(ranks)]
    for _ in range(steps):
        parts = []
        for r in range(ranks):
            data, idle, compute = _j(rng, DATA_MS), _j(rng, IDLE_MS), _j(rng, COMPUTE_MS)
            if rng.random() < SPIKE_P:
                compute += rng.uniform(0.1, 0.5) * COMPUTE_MS  # preempted inside an op
            if r == straggler and kind is not None:
                if kind == "compute":
                    compute += _j(rng, extra_ms)
                elif kind == "late":
                    idle += _j(rng, extra_ms)
                elif kind == "data":
                    data += _j(rng, extra_ms)
                else:
                    raise ValueError(kind)
            parts.append((data, idle, compute))
        arrive = [start[r] + sum(parts[r]) for r in range(ranks)]
        done = max(arrive) + _j(rng, COMM_MS)
        for r in range(ranks):
            delay = rng.expovariate(1 / 0.2) + (rng.uniform(1.0, 5.0) if rng.random() < SPIKE_P else 0.0)
            opt = _j(rng, OPT_MS)
            end = done + delay + opt
            out[r].append(Step(start[r], *parts[r], arrive[r], done, delay, opt, end))
            start[r] = end
    return out


def profile(steps: list[Step], basis: str = "CPU") -> StepProfile:
    """The step profile a trace of these steps should give."""
    return StepProfile(
        basis, "optimizer step" if basis == "CPU" else "ProfilerStep",
        tuple(s.end - s.start for s in steps),
        tuple(s.compute + s.opt for s in steps),
        tuple(s.done - s.arrive for s in steps),
        tuple(s.data for s in steps),
        tuple(0.0 for _ in steps),
        tuple(s.idle_pre + s.delay for s in steps),
        True,
    )


def reports(profiles: Iterable[tuple[int, StepProfile]]) -> list[RankReport]:
    """Each ``(rank, profile)`` as ``analyze_ranks`` reports it, to the straggler rule
    (``analysis.trace.stragglers.judge``): only the profile of its late-arrival input (``arrival``)
    is filled in; the rule reads nothing else of a report that has one."""
    nothing = TimeSplit(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    return [
        RankReport(rank, "order", f"rank{rank}", 0, 0, prof.basis, StepTimes(prof.source, "", ()),
                   prof.part("step"), nothing, None, None, "", 0.0, 0, 0, None, (), (),
                   RankArrival((), (), (), profile=prof))
        for rank, prof in profiles
    ]


def _x(name: str, cat: str, start_ms: float, end_ms: float, tid: int, **args: Any) -> dict[str, Any]:
    ts, end = round(start_ms * 1000.0), round(end_ms * 1000.0)  # whole us: spans back to back stay so
    e: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": end - ts}
    if args:
        e["args"] = args
    return e


def trace(rank: int, world: int, steps: list[Step], basis: str = "CPU") -> dict[str, Any]:
    """A Chrome trace of one rank's steps."""
    ev: list[dict[str, Any]] = []
    gpu = basis == "GPU"
    if not gpu:  # the optimizer call that ends the step before the first one
        first = steps[0].start
        ev.append(_x("Optimizer.step#SGD.step", "user_annotation", first - OPT_MS, first, 1))
        ev.append(_x("aten::add_", "cpu_op", first - OPT_MS, first, 1))
    for i, s in enumerate(steps):
        if gpu:
            ev.append(_x(f"ProfilerStep#{i + 1}", "cpu_op", s.start, s.end, 1))
        ev.append(_x(DATALOADER, "user_annotation", s.start, s.start + s.data, 1))
        ev.append(_x("aten::stack", "cpu_op", s.start + 0.1 * s.data, s.start + 0.6 * s.data, 1))
        at = s.start + s.data + s.idle_pre
        opt_at = s.end - s.opt
        if gpu:
            ev.append(_x("ampere_sgemm_128x64_nn", "kernel", at, at + s.compute, 7, stream=7))
            ev.append(_x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", s.arrive, s.done, 20, stream=20))
            ev.append(_x("multi_tensor_apply_kernel", "kernel", opt_at, s.end, 7, stream=7))
            ev.append(_x("aten::addmm", "cpu_op", at, at + 0.05, 1))
        else:
            ev.append(_x("aten::addmm", "cpu_op", at, at + s.compute, 1))
            ev.append(_x("c10d::allreduce_", "cpu_op", s.arrive, s.arrive + 0.005, 1))
            ev.append(_x("gloo:all_reduce", "user_annotation", s.arrive, s.done, 2))
            ev.append(_x("Optimizer.step#SGD.step", "user_annotation", opt_at, s.end, 1))
            ev.append(_x("aten::add_", "cpu_op", opt_at, s.end, 1))
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl" if gpu else "gloo", "rank": rank,
                                                    "world_size": world},
            "traceEvents": ev}


def write_job(job: list[list[Step]], dest: Path, basis: str = "CPU") -> Path:
    """One ``rank-N.json`` per rank in ``dest``; returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for r, steps in enumerate(job):
        (dest / f"rank-{r}.json").write_text(json.dumps(trace(r, len(job), steps, basis)))
    return dest
