"""Two-rank DDP over gloo under torchrun, each rank profiled; makes tests/data/traces/ddp_gloo/.

Run: ``.venv/bin/torchrun --nproc-per-node 2 tests/fakes/ddp_gloo_profile.py OUTDIR``.
Each rank trains a small MLP for ``STEPS`` iterations under
``torch.profiler.profile`` without a schedule (so, like an on-demand trace,
no ProfilerStep: steps come from ``Optimizer.step``) and exports
``OUTDIR/rank-<rank>.json``. Rank 1 does extra matrix products before each
backward pass, so it is the straggler the others wait for in all-reduce.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile

STEPS = 6


def main() -> int:
    out = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    extra = torch.randn(384, 384)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(STEPS):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            if rank == 1:
                for _ in range(30):
                    extra = torch.tanh(extra @ extra)  # the straggler's extra compute
            loss.backward()
            opt.step()
    os.makedirs(out, exist_ok=True)
    prof.export_chrome_trace(os.path.join(out, f"rank-{rank}.json"))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
