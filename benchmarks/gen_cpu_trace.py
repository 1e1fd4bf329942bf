"""Write a synthetic Kineto-style CPU trace of a given size (default 200 MB) for benchmarks.

Events look like PyTorch 2.x CPU traces: ProfilerStep# spans (user_annotation)
holding nested aten ops (cpu_op) on 4 threads, with the usual args.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

OPS = [
    ("aten::linear", [("aten::t", [("aten::transpose", [("aten::as_strided", [])])]), ("aten::addmm", [("aten::expand", []), ("aten::copy_", [])])]),
    ("aten::relu", [("aten::clamp_min", [])]),
    ("aten::cross_entropy_loss", [("aten::log_softmax", [("aten::_log_softmax", [])]), ("aten::nll_loss_nd", [("aten::nll_loss", [("aten::nll_loss_forward", [])])])]),
    ("autograd::engine::evaluate_function: AddmmBackward0", [("AddmmBackward0", [("aten::mm", []), ("aten::t", []), ("aten::sum", [("aten::view", [])])])]),
    ("Optimizer.step#SGD.step", [("aten::add_", []), ("aten::add_", []), ("aten::add_", [])]),
]


def _emit(out: list[str], name: str, kids: list[tuple[str, list]], pid: int, tid: int, ts: float, dur: float, ext: list[int]) -> None:  # type: ignore[type-arg]
    ext[0] += 1
    cat = "user_annotation" if name.startswith(("ProfilerStep#", "Optimizer.")) else "cpu_op"
    out.append(
        f'{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid}, '
        f'"ts": {ts:.3f}, "dur": {dur:.3f}, "args": {{"External id": {ext[0]}, '
        f'"Record function id": {ext[0]}, "Sequence number": {ext[0] // 3}, "Fwd thread id": 0, "Ev Idx": {ext[0] % 997}}}}}'
    )
    if kids:
        slot = dur / (len(kids) + 1)
        for i, (kname, kkids) in enumerate(kids):
            _emit(out, kname, kkids, pid, tid, ts + slot * (i + 0.5), slot * 0.9, ext)


def generate(path: Path, size_bytes: int, seed: int = 0) -> int:
    """Write the trace; returns the number of events."""
    rng = random.Random(seed)
    pid, written, events, step = 4242, 0, 0, 0
    ext = [0]
    ts = {t: 1.7e12 for t in range(4)}
    with path.open("w") as fh:
        head = '{\n  "schemaVersion": 1,\n  "deviceProperties": [],\n  "traceEvents": [\n'
        fh.write(head)
        written += len(head)
        first = True
        while written < size_bytes:
            step += 1
            for tid in range(4):
                out: list[str] = []
                start = ts[tid]
                _emit(out, f"ProfilerStep#{step}", OPS, pid, tid + 1, start, 900.0 + rng.random() * 200, ext)
                ts[tid] = start + 1200.0
                chunk = ("" if first else ",\n") + ",\n".join(out)
                first = False
                fh.write(chunk)
                written += len(chunk)
                events += len(out)
        tail = '\n  ],\n  "traceName": "synthetic"\n}\n'
        fh.write(tail)
    return events


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--mb", type=int, default=200)
    args = parser.parse_args()
    n = generate(Path(args.path), args.mb * 1_000_000)
    print(f"{args.path}: {n} events")


if __name__ == "__main__":
    main()
