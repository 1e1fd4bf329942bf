"""A small PyTorch training loop for the Kineto end-to-end tests (run as a script).

Runs until killed (or --seconds elapse), printing READY once torch is
imported and the first step is done. ``--no-step`` never calls
``optimizer.step()`` (Kineto then cannot count iterations);
``--fork-worker`` forks a child after torch is initialised (like a
DataLoader worker under the fork start method) and prints ``WORKER <pid>``; ``--until FILE`` returns
from ``main`` (a normal end) as soon as FILE exists. Started by the tests with
KINETO_USE_DAEMON=1 so libkineto polls the gpulens endpoint.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--no-step", action="store_true")
    parser.add_argument("--fork-worker", action="store_true")
    parser.add_argument("--until", metavar="FILE", help="return as soon as FILE exists")
    args = parser.parse_args()
    until = Path(args.until) if args.until else None
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64)
    y = torch.randint(0, 10, (32,))
    deadline = time.monotonic() + args.seconds
    first = True
    while time.monotonic() < deadline:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if not args.no_step:
            opt.step()
        if first:
            if args.fork_worker:
                _fork_worker(args.seconds)
            print("READY", flush=True)
            first = False
        if until is not None and until.exists():
            break
        time.sleep(0.002)  # leave CPU for the other processes on a shared machine
    return 0


def _fork_worker(seconds: float) -> None:
    import os

    child = os.fork()
    if child == 0:  # a worker that computes on its own and never polls
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            torch.ones(8).sum()
            time.sleep(0.05)
        os._exit(0)
    print(f"WORKER {child}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
