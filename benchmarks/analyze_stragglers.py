"""Detection and false-positive rates of the straggler rule (issue #32 item 2), new against old.

Jobs: the simulated synchronous data-parallel jobs of
tests/fakes/straggler_jobs.py (every part of a step jitters, with preemption
spikes and a heavy-tailed delay after the collective), written as CPU-only
gloo-style Chrome traces (steps between ``Optimizer.step`` calls) and read
back by ``analyze_ranks``, so both rules judge exactly what the product reads
from the files. Per case ``--runs`` seeded jobs: identical ranks, or one rank
(rotating) with more compute, arriving late (idle before the forward pass) or
a slower DataLoader.

* new rule: ``gpulens.analysis.trace.stragglers.judge`` (what ``gpulens analyze`` runs now);
* old rule: the rule before issue #32, restated below from the code it
  replaced (``find_stragglers`` of ``analysis/trace/ranks.py``): a rank
  whose mean step time is more than 5 % over the median rank's is a
  straggler "by step time"; only when no rank is, a rank whose mean compute
  per step is more than 5 % over the median rank's while its exposed
  communication is under the median's is a straggler "by compute". It runs on
  the same ``RankReport`` objects (their ``mean_step_ms`` and ``per_step``
  split are unchanged by this issue).

Rates: "false positive" = a job of identical ranks in which anything is
named; "detected" = exactly the injected rank is named (new rule: and with the
injected kind); "wrong rank" = some other rank is named.

``--real N`` also runs tests/fakes/ddp_stragglers.py N times per mode (4
ranks, 7 steps, DDP over gloo under torchrun on this machine's CPUs; ~12 s a
run) and judges those traces with both rules.

Usage: .venv/bin/python benchmarks/analyze_stragglers.py [--runs 200] [--real 0]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.fakes

from gpulens.analysis.trace.rank_report import RankReport  # noqa: E402
from gpulens.analysis.trace.ranks import analyze_ranks  # noqa: E402
from gpulens.analysis.trace.stragglers import judge  # noqa: E402
from tests.fakes import straggler_jobs as sj  # noqa: E402

EXTRA_MS = {"compute": 10.0, "late": 4.0, "data": 4.0}
SWEEP_MS = (1.0, 2.0, 4.0, 8.0)


def old_rule(reports: Sequence[RankReport], threshold_pct: float = 5.0) -> list[tuple[int, str, str]]:
    """The rule before issue #32: ``(rank, by, cause)`` per straggler (restated from its code)."""
    stepped = [r for r in reports if r.mean_step_ms is not None and r.per_step is not None]
    if len(stepped) < 2:
        return []
    fields = ("compute_us", "exposed_comm_us", "idle_us", "other_us")
    med = {f: statistics.median(getattr(r.per_step, f) for r in stepped) for f in fields}
    median_step = statistics.median(r.mean_step_ms for r in stepped if r.mean_step_ms is not None)
    factor = 1.0 + threshold_pct / 100.0

    def cause(r: RankReport) -> str:
        deltas = [getattr(r.per_step, f) - med[f] for f in fields]
        return ("compute", "communication", "idle", "other")[deltas.index(max(deltas))] if max(deltas) > 0 else "none"

    out = [(r.rank, "step time", cause(r)) for r in stepped
           if r.mean_step_ms is not None and r.mean_step_ms > median_step * factor]
    if out:
        return out
    return [(r.rank, "compute", cause(r)) for r in stepped if r.per_step is not None
            and r.per_step.compute_us > med["compute_us"] * factor and r.per_step.exposed_comm_us < med["exposed_comm_us"]]


def _judge_dir(path: Path) -> tuple[list[tuple[int, str]], list[int]]:
    rep = analyze_ranks([str(path)], jobs=1)
    new = [(s.rank, s.kind) for s in judge(rep.ranks)[0]]
    old = sorted({rank for rank, _by, _cause in old_rule(rep.ranks)})
    return new, old


def _score(kind: str | None, who: int, new: list[tuple[int, str]], old: list[int], tally: dict[str, int]) -> None:
    if kind is None:
        tally["new_fp"] += bool(new)
        tally["old_fp"] += bool(old)
        return
    tally["new_hit"] += new == [(who, kind)]
    tally["new_rank"] += [r for r, _ in new] == [who]
    tally["new_wrong"] += any(r != who for r, _ in new)
    tally["old_hit"] += old == [who]
    tally["old_wrong"] += any(r != who for r in old)


def simulated(runs: int, ranks: int, steps: int, kind: str | None, extra: float, tmp: Path) -> dict[str, int]:
    tally = dict.fromkeys(("new_fp", "old_fp", "new_hit", "new_rank", "new_wrong", "old_hit", "old_wrong"), 0)
    for seed in range(runs):
        who = (seed * 7) % ranks
        job = sj.simulate(ranks, steps, (0 if kind is None else 10_000) + seed, kind, who, extra)
        dest = sj.write_job(job, tmp / f"{ranks}-{steps}-{kind}-{seed}")
        new, old = _judge_dir(dest)
        shutil.rmtree(dest)
        _score(kind, who, new, old, tally)
    return tally


def _pct(n: int, runs: int) -> str:
    return f"{100.0 * n / runs:.1f} % ({n}/{runs})"


def real(n: int, tmp: Path) -> None:
    torchrun = Path(sys.executable).with_name("torchrun")
    fake = ROOT / "tests" / "fakes" / "ddp_stragglers.py"
    print(f"\nreal DDP over gloo, 4 ranks, rank 2 the straggler, {n} runs per mode (torchrun, this machine's CPUs)")
    print(f"{'mode':>8}  {'new rule: named (rank, kind)':<40}  old rule: named ranks")
    for mode in ("none", "compute", "late", "data"):
        for i in range(n):
            dest = tmp / f"real-{mode}-{i}"
            t0 = time.monotonic()
            res = subprocess.run([str(torchrun), "--standalone", "--nproc-per-node=4", str(fake), str(dest), mode, "2"],
                                 capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
            if res.returncode != 0:
                print(f"{mode:>8}  run {i} failed: {res.stderr[-300:]}")
                continue
            new, old = _judge_dir(dest)
            print(f"{mode:>8}  {new!s:<40}  {old}  ({time.monotonic() - t0:.0f} s)")
            shutil.rmtree(dest, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="seeded jobs per case (default 200)")
    parser.add_argument("--real", type=int, default=0, metavar="N", help="real gloo runs per mode (default 0)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="stragglers-"))
    t0 = time.monotonic()
    try:
        print(f"simulated jobs, {args.runs} per case, read back from CPU (gloo-style) traces; "
              f"injected per step: compute +{EXTRA_MS['compute']:g} ms, late +{EXTRA_MS['late']:g} ms, "
              f"data +{EXTRA_MS['data']:g} ms (the step is ~26 ms)")
        print(f"{'ranks':>5} {'steps':>5}  {'case':<8}  {'new rule':<42}  old rule")
        for steps in (4, 6, 10):
            for ranks in (2, 4, 8):
                t = simulated(args.runs, ranks, steps, None, 0.0, tmp)
                print(f"{ranks:>5} {steps:>5}  {'identical':<8}  {'false positive ' + _pct(t['new_fp'], args.runs):<42}  "
                      f"false positive {_pct(t['old_fp'], args.runs)}")
                for kind, extra in EXTRA_MS.items():
                    t = simulated(args.runs, ranks, steps, kind, extra, tmp)
                    print(f"{ranks:>5} {steps:>5}  {kind:<8}  "
                          f"{'detected ' + _pct(t['new_hit'], args.runs) + ', wrong rank ' + str(t['new_wrong']):<42}  "
                          f"detected {_pct(t['old_hit'], args.runs)}, wrong rank {t['old_wrong']}")
        print("\nsize sweep: 4 ranks, 6 steps, detected (new / old)")
        for kind in EXTRA_MS:
            cells = []
            for extra in SWEEP_MS:
                t = simulated(args.runs, 4, 6, kind, extra, tmp)
                cells.append(f"+{extra:g} ms: {100.0 * t['new_hit'] / args.runs:.0f} / {100.0 * t['old_hit'] / args.runs:.0f} %")
            print(f"  {kind:<8} " + "; ".join(cells))
        if args.real:
            real(args.real, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
