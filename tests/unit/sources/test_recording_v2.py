"""Recording format version 2 (issue 31 item 20): records compressed in blocks, each against its host's last.

The demo at 1 Hz fits in 40 MB/h (version 1: 431 MB/h); every record reads
back exactly, sequentially and through the replay index in any order; version
1 still replays and ``--append`` continues each version in its own; a crash
cut is kept or cut away; hostile blocks (refs outside the block, corrupt or
incomplete compressed data, decompression bombs, oversized blocks) are
refused with a clear RecordingError that keeps the records read before.
"""

from __future__ import annotations

import itertools
import random
import threading
import tracemalloc
import zlib
from pathlib import Path

import msgpack
import pytest

from gpulens.core.errors import RecordingError, RecordingProblem
from gpulens.core.events import HostStatusEvent, SampleEvent, SourceEvent, SourceStatusEvent
from gpulens.ipc.recording import EventEncoder, encode_event, header, read_recording
from gpulens.ipc.recording_blocks import (
    MAX_BLOCK_BYTES,
    MAX_BLOCK_RECORDS,
    MAX_RECORD_BYTES,
    BlockWriter,
    block_start,
    frame,
)
from gpulens.sources.demo import DemoSource
from gpulens.sources.local import Recorder
from gpulens.sources.replay import RecordingIndex, ReplaySource

T0 = 1_700_000_000.0
HEAD = header("x", False, T0)


def demo_events(seconds: int, hosts: int = 16) -> list[SourceEvent]:
    """``seconds`` of the demo at 1 Hz, with a host going down and a source status now and then."""
    demo = DemoSource(hosts=hosts, seed=7, clock=lambda: T0)
    out: list[SourceEvent] = []
    for k in range(seconds):
        out += [SampleEvent(demo.sample(h, T0 + k), backfill=k < 3) for h in range(hosts)]
        if k % 7 == 3:
            out.append(HostStatusEvent(host="gpu-node02", up=k % 2 == 0, reason="ssh: timed out", time=T0 + k))
        if k % 11 == 5:
            out.append(SourceStatusEvent(message=f"tick {k}", ok=True, time=T0 + k))
    return out


def write(path: Path, events: list[SourceEvent], version: int = 2, **blocks: int) -> Path:
    """A recording of ``events`` in ``version``; ``blocks``: the block writer's limits."""
    encoder = EventEncoder(version)
    if blocks:
        encoder.blocks = BlockWriter(**blocks)
    path.write_bytes(header("demo", True, T0, version) + b"".join(encoder.encode(e) for e in events))
    return path


def objects(path: Path) -> list[object]:
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=MAX_RECORD_BYTES * 2)
    unpacker.feed(path.read_bytes())
    return list(unpacker)


def built(path: Path) -> RecordingIndex:
    index = RecordingIndex(str(path))
    index.build()
    return index


def time_of(e: SourceEvent) -> float:
    if isinstance(e, SampleEvent):
        return e.sample.time
    assert isinstance(e, (HostStatusEvent, SourceStatusEvent))
    return e.time


def test_a_minute_of_the_demo_takes_at_most_40_mb_an_hour(tmp_path: Path) -> None:
    """16 hosts x 8 GPUs at 1 Hz, through the recorder --record uses: 10x smaller than version 1."""
    events = demo_events(60)
    rec = Recorder(str(tmp_path / "r.gpulens"), "demo", simulated=True)
    for e in events:
        rec.write(e)
    rec.close()
    size = (tmp_path / "r.gpulens").stat().st_size
    v1 = write(tmp_path / "v1.gpulens", events, version=1).stat().st_size
    assert rec.version == 2 and rec.bytes == size
    assert size / 60 * 3600 <= 40e6, f"{size / 60 * 3600 / 1e6:.1f} MB/h"
    assert v1 / size > 10
    head, back = read_recording(str(tmp_path / "r.gpulens"))
    assert head["version"] == 2 and back == events


def test_blocks_read_back_exactly_in_any_order(tmp_path: Path) -> None:
    """Many small blocks: the index reads any range back as the sequential reader and version 1 do."""
    events = demo_events(40, hosts=4)
    v2 = write(tmp_path / "v2.gpulens", events, block_bytes=20_000)
    v1 = write(tmp_path / "v1.gpulens", events, version=1)
    starts = [o for o in objects(v2)[1:] if isinstance(o, dict)]
    assert len(starts) > 10 and [s["block"] for s in starts] == list(range(len(starts)))
    assert read_recording(str(v2))[1] == read_recording(str(v1))[1] == events
    i1, i2 = built(v1), built(v2)
    assert (i1.version, i2.version, i1.error, i2.error) == (1, 2, None, None)
    assert len(i2) == len(events)
    rng = random.Random(3)
    for k in range(40):
        a = rng.uniform(T0 - 1, T0 + 40)
        b = a + rng.choice([0.5, 1, 3, 30, 60])
        want = sorted((e for e in events if a < time_of(e) <= b), key=time_of)  # stable: file order at a tie
        assert i2.events_between(a, b) == i1.events_between(a, b) == want
        if k % 5 == 0:
            i2.close()  # nothing kept: the next read starts its blocks afresh
    i1.close()
    i2.close()


def test_a_version_1_recording_still_replays(tmp_path: Path) -> None:
    events = demo_events(5, hosts=2)
    path = write(tmp_path / "v1.gpulens", events, version=1)
    src = ReplaySource(str(path))
    assert src.simulated and src.load() == (events, None)
    index = src.build_index()
    assert index.done.wait(20) and index.version == 1
    assert index.events_between(T0 - 1, T0 + 1) == [e for e in events if time_of(e) <= T0 + 1]
    src.stop()


def test_append_continues_a_version_2_recording_in_a_new_block(tmp_path: Path) -> None:
    path = tmp_path / "r.gpulens"
    first, second = demo_events(4, hosts=3), demo_events(4, hosts=3)[1:]
    for mode, events in (("new", first), ("append", second)):
        rec = Recorder(str(path), "demo", simulated=True, mode=mode)  # type: ignore[arg-type]
        for e in events:
            rec.write(e)
        rec.close()
        assert rec.version == 2
    assert read_recording(str(path))[1] == first + second
    assert sum(isinstance(o, dict) for o in objects(path)[1:]) == 2  # a block start each
    index = built(path)
    assert index.error is None and len(index.events_between(T0 - 1, T0 + 10)) == len(first + second)
    index.close()


def test_append_continues_a_version_1_recording_as_version_1(tmp_path: Path) -> None:
    path = write(tmp_path / "v1.gpulens", first := demo_events(3, hosts=2), version=1)
    rec = Recorder(str(path), "demo", simulated=True, mode="append")
    second = demo_events(2, hosts=2)
    for e in second:
        rec.write(e)
    rec.close()
    assert rec.version == 1
    head, back = read_recording(str(path))
    assert head["version"] == 1 and back == first + second
    assert all(isinstance(o, dict) and "k" in o for o in objects(path)[1:])  # plain records, no frames


def test_append_cuts_a_frame_cut_off_by_a_crash(tmp_path: Path) -> None:
    path = write(tmp_path / "r.gpulens", first := demo_events(3, hosts=2))
    whole = path.stat().st_size
    cut = frame(encode_event(first[0]))[:-7]
    with path.open("ab") as fh:
        fh.write(cut)
    rec = Recorder(str(path), "demo", simulated=True, mode="append")
    assert rec.cut == len(cut) and rec.bytes == whole
    rec.write(last := SourceStatusEvent(message="after the crash", ok=True, time=T0 + 9))
    rec.close()
    assert read_recording(str(path))[1] == [*first, last]


@pytest.mark.parametrize("version", [1, 2])
def test_a_truncated_file_keeps_every_whole_record(tmp_path: Path, version: int) -> None:
    events = demo_events(6, hosts=3)
    path = write(tmp_path / "r.gpulens", events, version)
    path.write_bytes(path.read_bytes()[: path.stat().st_size * 3 // 5])
    with pytest.raises(RecordingError) as err:
        read_recording(str(path))
    kept = err.value.events
    assert err.value.problem is RecordingProblem.TRUNCATED
    assert 0 < len(kept) < len(events) and kept == events[: len(kept)]
    index = built(path)
    assert index.error is not None and index.problem is RecordingProblem.TRUNCATED and len(index) == len(kept)
    assert index.events_between(T0 - 1, T0 + 10) == sorted(kept, key=time_of)
    index.close()


def _rec(i: int = 0, **extra: object) -> bytes:
    data: bytes = msgpack.packb({"k": "m", "message": f"m{i}", "ok": True, "time": T0 + i, **extra})
    return data


def _z(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)  # a raw deflate stream, as frames hold
    return c.compress(data) + c.flush()


def _frame(z: bytes, *refs: object) -> bytes:
    data: bytes = msgpack.packb([z, list(refs)])
    return data


START = block_start(0)
GOOD = START + frame(_rec(0)) + frame(_rec(1), _rec(0), [1])


BAD_BLOCK, CORRUPT, TOO_LARGE = RecordingProblem.BAD_BLOCK, RecordingProblem.CORRUPT, RecordingProblem.TOO_LARGE


@pytest.mark.parametrize(
    ("payload", "problem", "kept"),
    [
        (frame(_rec()), BAD_BLOCK, 0),
        (START + frame(_rec(), _rec(), [1]), BAD_BLOCK, 0),
        (GOOD + frame(_rec(2), _rec(0), [3]), BAD_BLOCK, 2),
        (GOOD + _frame(_z(_rec(2)), 0), BAD_BLOCK, 2),
        (GOOD + _frame(_z(_rec(2)), 1, 1, 1, 1, 1), BAD_BLOCK, 2),  # more refs than MAX_REFS
        (GOOD + msgpack.packb("hello"), BAD_BLOCK, 2),
        (GOOD + msgpack.packb({"k": "m", "message": "x", "ok": True, "time": T0}), BAD_BLOCK, 2),  # no `block`
        (GOOD + _frame(b"\xff" + b"not deflate at all"), CORRUPT, 2),
        (GOOD + _frame(zlib.compress(_rec(2))), CORRUPT, 2),  # zlib's header: not raw deflate
        # the dictionary a frame was made with is not the one its refs name: other bytes, which the record
        # decoder refuses (no checksum, as version 1: the decoders check a record); record 4 reads
        (GOOD + frame(_rec(2), _rec(0), [2]) + frame(_rec(3), b"\x81\xa1k\xa1m" * 9, [3]),
         RecordingProblem.WRONG_TYPE, 3),
        (GOOD + _frame(_z(_rec(2))[:-6]), CORRUPT, 2),  # the compressed record is incomplete
        (GOOD + _frame(_z(_rec(2)) + b"xyz"), CORRUPT, 2),  # bytes after the compressed record
        (GOOD + frame(msgpack.packb({"k": "s", "d": {"host": 5}})), RecordingProblem.BAD_SAMPLE, 2),
        (GOOD + frame(b"\x93\x01\x02\x03"), RecordingProblem.WRONG_TYPE, 2),  # not a map
        (GOOD + _frame(_z(b" " * (MAX_RECORD_BYTES + 1))), TOO_LARGE, 2),
        # the second half-block record takes the block over MAX_BLOCK_BYTES: refused, the first one reads
        (GOOD + frame(_rec(2, pad=b" " * (MAX_BLOCK_BYTES // 2))) + frame(_rec(3, pad=b" " * (MAX_BLOCK_BYTES // 2))),
         TOO_LARGE, 3),
    ],
    ids=["no-block-start", "ref-before-block", "ref-past-start", "ref-0", "five-refs", "a-string", "a-map",
         "corrupt-deflate", "zlib-format", "wrong-zdict", "incomplete", "trailing-bytes", "hostile-sample", "not-a-map",
         "record-bomb", "block-over-limit"],
)
def test_hostile_blocks_give_clear_errors_and_keep_what_was_read(tmp_path: Path, payload: bytes,
                                                                 problem: RecordingProblem, kept: int) -> None:
    path = tmp_path / "bad.gpulens"
    path.write_bytes(HEAD + payload)
    with pytest.raises(RecordingError) as err:
        read_recording(str(path))
    assert err.value.problem is problem and "\n" not in str(err.value)
    assert [e.message for e in err.value.events] == ["m0", "m1", "m2"][:kept]
    index = built(path)
    assert index.error is not None and index.problem is problem and len(index) == kept


def test_a_block_of_too_many_records_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.gpulens"
    path.write_bytes(HEAD + START + b"".join(frame(_rec(i)) for i in range(MAX_BLOCK_RECORDS + 1)))
    with pytest.raises(RecordingError) as err:
        read_recording(str(path))
    assert err.value.problem is TOO_LARGE and len(err.value.events) == MAX_BLOCK_RECORDS


def test_a_decompression_bomb_is_refused_without_being_inflated(tmp_path: Path) -> None:
    """256 MiB of zeros in a 256 KiB frame: refused after at most one record's worth is made."""
    bomb = zlib.compressobj(1, zlib.DEFLATED, -15)
    z = b"".join(bomb.compress(bytes(1 << 20)) for _ in range(256)) + bomb.flush()
    path = tmp_path / "bomb.gpulens"
    path.write_bytes(HEAD + START + _frame(z))
    tracemalloc.start()
    try:
        with pytest.raises(RecordingError) as err:
            read_recording(str(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.value.problem is TOO_LARGE
    assert peak < 3 * MAX_RECORD_BYTES < 256 << 20, f"peak {peak >> 20} MiB"


def test_a_block_changed_under_the_index_is_reported(tmp_path: Path) -> None:
    path = write(tmp_path / "r.gpulens", demo_events(10, hosts=2))
    index = built(path)
    assert len(index.events_between(T0 - 1, T0 + 3)) > 0
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)  # same size, a block's frames damaged
    path.write_bytes(bytes(data))
    index.close()  # nothing kept: read from the file again
    with pytest.raises(RecordingError) as err:
        index.events_between(T0 - 1, T0 + 10)
    assert err.value.problem is RecordingProblem.CHANGED  # other bytes where the block was
    path.write_bytes(bytes(data[: len(data) // 3]))
    index.close()
    with pytest.raises(RecordingError) as err:
        index.events_between(T0 - 1, T0 + 10)
    assert err.value.problem is RecordingProblem.CHANGED  # shorter than it was
    index.close()


def test_playback_reads_each_byte_once_and_threads_keep_their_own_blocks(tmp_path: Path) -> None:
    """A tick reads on where the last one stopped; a seek's worker reading meanwhile does not evict its block."""
    events = demo_events(30, hosts=4)
    path = write(tmp_path / "r.gpulens", events)
    assert sum(isinstance(o, dict) for o in objects(path)[1:]) == 1  # one block
    index = built(path)
    reads: list[tuple[int, int, int]] = []
    pread = index._pread

    def counted(fd: int, offset: int, size: int) -> bytes:
        reads.append((threading.get_ident(), offset, size))
        return pread(fd, offset, size)

    index._pread = counted  # type: ignore[method-assign]
    elsewhere: list[list[SourceEvent]] = []
    for k in range(30):
        assert index.events_between(T0 + k - 1, T0 + k) == [e for e in events if T0 + k - 1 < time_of(e) <= T0 + k]
        if k % 10 == 5:  # another thread (a seek's rebuild) reads meanwhile, from the start
            worker = threading.Thread(target=lambda: elsewhere.append(index.events_between(T0 - 1, T0 + 3)))
            worker.start()
            worker.join()
    assert len(elsewhere) == 3 and all(got == [e for e in events if time_of(e) <= T0 + 3] for got in elsewhere)
    mine = [(offset, size) for who, offset, size in reads if who == threading.get_ident()]
    theirs = [offset for who, offset, _ in reads if who != threading.get_ident()]
    start = len(header("demo", True, T0))
    assert len(mine) == 30 and mine[0][0] == start and theirs == [start] * 3
    assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(mine))  # on from where it stopped
    assert sum(n for _, n in mine) == path.stat().st_size - start  # every byte once
    index.close()
