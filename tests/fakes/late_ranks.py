"""A 6-rank job derived from HTA's two sampled ranks, for the late-arrival comparison (stdlib only).

``write_job(src_dir, dest_dir)`` writes ``rank-0.json.gz`` .. ``rank-5.json.gz``:
rank r is a copy of ``sampled_rank-(r % 2).json.gz`` with ``distributedInfo.rank``
set to r, every timestamp moved by ``SHIFT_US[r]`` (the whole rank starts that
much later), and, on rank 4 only, the NCCL kernels on stream 84 that start
after its ``ProfilerStep#552`` began moved a further ``LATE_552_US`` (that
rank arrives late in one step only).

``write_nccl_job(src_dir, dest_dir)`` writes a 4-rank job from HTA's
``nccl_data.json.gz`` (rank 0 of a 2-rank all-reduce job, nanosecond
timestamps, 3 steps, two NCCL kernels): rank r moved by ``NCCL_SHIFT_US[r]``,
rank 1's all-reduce kernels lasting ``NCCL_STRETCH`` times longer (so the
all-reduce, not the broadcast, varies most across ranks), and rank 3's
all-reduce kernels that start after its ``ProfilerStep#5`` began moved a
further ``NCCL_LATE_US``.

Both tests/fakes/hta_stragglers.py (run with HTA's venv, to make the
reference) and the test use this, so they read the same bytes.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

RANKS = 6
SHIFT_US = (0, 0, 30_000, 5_000, 0, 12_000)
LATE_552_US = 80_000
SOURCES = ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz")
NCCL_SOURCE = "nccl_data.json.gz"
NCCL_SHIFT_US = (0, 2_000, 500, 0)
NCCL_STRETCH = 1.25
NCCL_LATE_US = 3_000


def derive(doc: dict[str, Any], rank: int) -> dict[str, Any]:
    """Rank ``rank`` of the job from the parsed document of its source rank."""
    events = doc["traceEvents"]
    shift = SHIFT_US[rank]
    step552 = next(e["ts"] for e in events if e.get("name") == "ProfilerStep#552")
    for e in events:
        if "ts" not in e:
            continue
        late = (
            rank == 4
            and e.get("cat") == "kernel"
            and str(e.get("name", "")).startswith("ncclKernel")
            and (e.get("args") or {}).get("stream") == 84
            and e["ts"] > step552
        )
        e["ts"] = e["ts"] + shift + (LATE_552_US if late else 0)
    doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": rank, "world_size": RANKS}
    return doc


def write_job(src_dir: Path, dest_dir: Path) -> list[Path]:
    """Write the 6 ranks into ``dest_dir``; their paths."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for r in range(RANKS):
        doc = json.loads(gzip.decompress((src_dir / SOURCES[r % 2]).read_bytes()))
        path = dest_dir / f"rank-{r}.json.gz"
        path.write_bytes(gzip.compress(json.dumps(derive(doc, r)).encode(), mtime=0))
        out.append(path)
    return out


def derive_nccl(doc: dict[str, Any], rank: int) -> dict[str, Any]:
    """Rank ``rank`` of the 4-rank job from nccl_data's parsed document."""
    events = doc["traceEvents"]
    step5 = next(e["ts"] for e in events if e.get("name") == "ProfilerStep#5")
    for e in events:
        if "ts" not in e:
            continue
        all_reduce = e.get("cat") == "kernel" and str(e.get("name", "")).startswith("ncclKernel_AllReduce")
        late = rank == 3 and all_reduce and e["ts"] > step5
        if rank == 1 and all_reduce:
            e["dur"] = e["dur"] * NCCL_STRETCH
        e["ts"] = e["ts"] + NCCL_SHIFT_US[rank] + (NCCL_LATE_US if late else 0)
    doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": rank, "world_size": len(NCCL_SHIFT_US)}
    return doc


def write_nccl_job(src_dir: Path, dest_dir: Path) -> list[Path]:
    """Write the 4 ranks into ``dest_dir``; their paths."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for r in range(len(NCCL_SHIFT_US)):
        doc = json.loads(gzip.decompress((src_dir / NCCL_SOURCE).read_bytes()))
        path = dest_dir / f"rank-{r}.json.gz"
        path.write_bytes(gzip.compress(json.dumps(derive_nccl(doc, r)).encode(), mtime=0))
        out.append(path)
    return out
