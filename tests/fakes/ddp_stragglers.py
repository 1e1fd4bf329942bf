"""A DDP-over-gloo job (CPU) with one injected straggler, every rank profiled (run by torchrun).

Run: ``.venv/bin/torchrun --standalone --nproc-per-node 4 tests/fakes/ddp_stragglers.py OUTDIR MODE RANK``.
Each rank trains a small MLP for ``ITERATIONS`` iterations on batches from a
single-process ``DataLoader`` under ``torch.profiler.profile`` without a
schedule (steps come from ``Optimizer.step``, as in an on-demand trace) and
writes ``OUTDIR/rank-<rank>.json``. Rank ``RANK`` is the straggler, by ``MODE``:

* ``compute``: ``EXTRA_MATMULS`` extra matrix products before each backward pass;
* ``late``: it sleeps ``SLEEP_S`` before each forward pass (it arrives late at the all-reduce);
* ``data``: its dataset sleeps ``SLEEP_S`` per batch in ``__getitem__`` (a slow data loader);
* ``none``: no straggler (identical ranks).

Torch threads are pinned to one per rank so that four ranks share two cores evenly.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import DataLoader, Dataset

ITERATIONS = 8
BATCH = 32
EXTRA_MATMULS = 40
SLEEP_S = 0.015
MODES = ("compute", "late", "data", "none")


class Batches(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Fixed random samples; ``slow`` seconds of sleep per batch (spread over its samples)."""

    def __init__(self, n: int, slow: float) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 256, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.slow = slow

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.slow and i % BATCH == 0:
            time.sleep(self.slow)
        return self.x[i], self.y[i]


def main() -> int:
    out, mode, straggler = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode not in MODES:
        raise SystemExit(f"mode: one of {MODES}")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    me = rank == straggler
    data = DataLoader(Batches(BATCH * ITERATIONS, SLEEP_S if me and mode == "data" else 0.0), batch_size=BATCH)
    extra = torch.randn(256, 256)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for x, y in data:
            if me and mode == "late":
                time.sleep(SLEEP_S)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            if me and mode == "compute":
                for _ in range(EXTRA_MATMULS):
                    extra = torch.tanh(extra @ extra)
            loss.backward()
            opt.step()
    os.makedirs(out, exist_ok=True)
    prof.export_chrome_trace(os.path.join(out, f"rank-{rank}.json"))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
