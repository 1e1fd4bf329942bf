"""Issue 27 item 10: indexing a recording whose samples carry a large unknown field stays in bounded memory.

A newer gpulens may add fields; a hostile file may add huge ones. The index
frames records without building them and decodes only the fields a record
has, so a 4 MiB field of empty maps per sample (about 540 MiB of Python
objects when built) costs nothing. Measured as the peak RSS of a fresh
child process that opens the replay and indexes it: a bound on memory, not time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

from gpulens.core.errors import RecordingError, RecordingProblem
from gpulens.core.events import SourceStatusEvent
from gpulens.ipc.recording import compact, encode_event, header, read_recording
from gpulens.sources.demo import DemoSource
from gpulens.sources.replay import read_header

T0 = 1_700_000_000.0
FILE_BYTES = 40 << 20
PEAK_RSS_LIMIT = 200 << 20
"""Bytes: a fresh interpreter with gpulens imported is about 35 MiB; this file indexes in about 40 MiB
(decoding records whole peaked at 579 MiB)."""

_CHILD = """
import json, sys
def peak_rss_bytes():
    # VmHWM: this program's own peak. ru_maxrss survives execve, so it would carry the peak of
    # the pytest process that forked us (919 MiB in a full CI run, with torch loaded).
    with open("/proc/self/status") as fh:
        line = next(line for line in fh if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024
from gpulens.core.events import SampleEvent
from gpulens.sources.replay import ReplaySource
src = ReplaySource(sys.argv[1])
index = src.index
index.build()
window = index.events_between(index.start - 1, index.start + 2)
print(json.dumps({
    "records": len(index), "error": index.error, "hosts": sorted(index.hosts),
    "window": sum(isinstance(e, SampleEvent) for e in window),
    "peak_rss_bytes": peak_rss_bytes(),
}))
"""


def write_recording(path: Path, size_bytes: int) -> int:
    """Demo samples, each with a 4 MiB unknown field of empty maps, until ``size_bytes``; returns the records."""
    demo = DemoSource(hosts=2, seed=3, clock=lambda: T0)
    blob: list[list[dict[str, object]]] = [[{}] * 100_000 for _ in range(40)]  # one byte each packed, a dict each when built
    records = 0
    with path.open("wb") as fh:
        fh.write(header("demo", True, T0, version=1))  # records as plain maps
        while fh.tell() < size_bytes:
            d = compact(demo.sample(records % 2, T0 + records))
            d["added_by_a_newer_gpulens"] = blob
            fh.write(msgpack.packb({"k": "s", "b": True, "d": d, "also_unknown": blob[:4]}))
            records += 1
        fh.write(encode_event(SourceStatusEvent(message="replayed", ok=True, time=T0 + records)))
    return records + 1


def test_indexing_skips_large_unknown_fields_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "big.gpulens"
    records = write_recording(path, FILE_BYTES)
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["error"] is None and got["records"] == records
    assert got["hosts"] == ["gpu-node01", "gpu-node02"] and got["window"] == 3
    assert got["peak_rss_bytes"] < PEAK_RSS_LIMIT, f"peak RSS {got['peak_rss_bytes'] >> 20} MiB"


def test_a_known_field_holding_a_large_value_is_refused_unbuilt(tmp_path: Path) -> None:
    path = tmp_path / "bad.gpulens"
    big: list[dict[str, object]] = [{}] * 100_000
    path.write_bytes(msgpack.packb({"format": "gpulens-recording", "version": 1, "future": big})
                     + msgpack.packb({"k": "h", "host": big, "up": True, "reason": "", "time": T0}))
    assert read_header(str(path))["version"] == 1  # the header's unknown field: skipped
    with pytest.raises(RecordingError) as err:
        read_recording(str(path))
    assert err.value.problem is RecordingProblem.TOO_LARGE  # record 1's host: over 64 KiB, never built
