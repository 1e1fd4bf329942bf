"""A small PyTorch training loop for the Kineto end-to-end tests (run as a script).

Runs until killed (or --seconds elapse), printing READY once torch is
imported and the first step is done. Started by the tests with
KINETO_USE_DAEMON=1 so libkineto polls the gpulens endpoint.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
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
        opt.step()
        if first:
            print("READY", flush=True)
            first = False
        time.sleep(0.002)  # leave CPU for the other processes on a shared machine
    return 0


if __name__ == "__main__":
    sys.exit(main())
