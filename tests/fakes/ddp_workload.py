"""A two-rank DDP training loop over gloo, run by torchrun for the job-trace tests (CPU build).

Each rank prints ``READY <rank> <pid>`` after its first step and trains
until ``--seconds`` pass (or it is killed). Started with KINETO_USE_DAEMON=1
so libkineto polls the gpulens endpoint of the rank's "host" (its
KINETO_IPC_SOCKET_DIR).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 64), torch.randint(0, 8, (16,))
    deadline = time.monotonic() + args.seconds
    first = True
    while time.monotonic() < deadline:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if first:
            print(f"READY {rank} {os.getpid()}", flush=True)
            first = False
        time.sleep(0.005)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
