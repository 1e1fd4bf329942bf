"""Recording (--record) and replay (--replay): round trip and hostile files."""

from __future__ import annotations

import threading
from pathlib import Path

import msgpack
import pytest

from gpulens.core.errors import ConfigError, ConfigProblem, RecordingError, RecordingProblem
from gpulens.core.events import (
    HostSampler,
    HostStatusEvent,
    SampleEvent,
    SourceEvent,
    SourceStatusEvent,
)
from gpulens.core.model import HostSample
from gpulens.ipc.recording import header, read_recording
from gpulens.sources.demo import DemoSource
from gpulens.sources.local import Recorder
from gpulens.sources.replay import ReplaySource
from gpulens.store.store import Store

T0 = 1_700_000_000.0
V1 = header("x", False, T0, version=1)
"""A version-1 header: the records after it are plain msgpack maps (version 2: tests/unit/sources/test_recording_v2.py)."""


def record(path: Path, seconds: float = 20) -> list[SourceEvent]:
    events: list[SourceEvent] = []
    rec = Recorder(str(path), "demo", simulated=True)
    emit = rec.wrap(events.append)
    DemoSource(seed=5, clock=lambda: T0, live=False, backfill_s=seconds).start(emit)
    emit(HostStatusEvent(host="gpu-node02", up=False, reason="ssh: timed out", time=T0))
    emit(SourceStatusEvent(message="ok", ok=True, time=T0))
    rec.close()
    return events


def test_round_trip_is_exact(tmp_path: Path) -> None:
    path = tmp_path / "r.gpulens"
    events = record(path)
    head, back = read_recording(str(path))
    assert head["source"] == "demo" and head["simulated"] is True
    assert back == events
    # compact: defaults are left out, so a sample costs well under its full dict form
    assert path.stat().st_size / len(events) < 9000


def replay_into_store(path: Path) -> Store:
    store = Store()
    done = threading.Event()

    def emit(e: SourceEvent) -> None:
        store.apply(e)
        if isinstance(e, SourceStatusEvent) and e.message.startswith(("replayed", str(path))):
            done.set()

    src = ReplaySource(str(path))
    src.start(emit)
    assert done.wait(20)
    src.stop()
    return store


def test_replay_shows_same_store(tmp_path: Path) -> None:
    path = tmp_path / "r.gpulens"
    events = record(path)
    direct = Store()
    direct.apply_many(events[:-1])
    replayed = replay_into_store(path)
    assert replayed.fleet(300) == direct.fleet(300)
    assert replayed.source_status is not None and replayed.source_status.message.startswith("replayed")
    assert ReplaySource(str(path)).load()[1] is None


def test_truncated_file_keeps_what_was_read(tmp_path: Path) -> None:
    path = tmp_path / "r.gpulens"
    events = record(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 50])
    with pytest.raises(RecordingError) as err:
        read_recording(str(path))
    assert err.value.problem is RecordingProblem.TRUNCATED and 0 < len(err.value.events) < len(events)
    store = replay_into_store(path)
    assert store.source_status is not None and not store.source_status.ok
    assert "truncated" in store.source_status.message and len(store.hosts()) == 16


MISTYPED_DEEP = V1 + msgpack.packb({"k": "s", "d": {
    "host": "a", "time": T0, "cpu": {"total_percent": 1}, "memory": {"total_bytes": 1, "used_bytes": 1},
    "network": {"rx_bytes_per_s": 1, "tx_bytes_per_s": 1}, "storage": {"read_bytes_per_s": 1, "write_bytes_per_s": 1},
    "gpus": [{"index": 0, "name": "g", "uuid": "u", "power_w": "hot"}]}})
"""A sample whose mistyped field lies deep in it: the sentence names its path."""


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (b"", RecordingProblem.EMPTY),
        (b"hello world", RecordingProblem.NOT_A_RECORDING),
        (msgpack.packb({"format": "gpulens-recording", "version": 99}), RecordingProblem.UNSUPPORTED_VERSION),
        (V1 + msgpack.packb([1, 2, 3]), RecordingProblem.WRONG_TYPE),
        (V1 + msgpack.packb({"k": "s", "d": {"host": 5}}), RecordingProblem.BAD_SAMPLE),
        (MISTYPED_DEEP, RecordingProblem.BAD_SAMPLE),
        (V1 + msgpack.packb({"k": "zz"}), RecordingProblem.UNKNOWN_KIND),
        (V1 + msgpack.packb({"k": "h", "host": "a", "up": "yes"}), RecordingProblem.WRONG_TYPE),
        (V1 + b"\xc1" * 10, RecordingProblem.CORRUPT),
        # a claimed 4 GiB string: refused by the size limits, not allocated (the file ends inside it)
        (V1 + b"\xdb\xff\xff\xff\xff" + b"a" * 100, RecordingProblem.TRUNCATED),
        # 2**31 element array header
        (V1 + b"\xdd\x80\x00\x00\x00", RecordingProblem.TRUNCATED),
    ],
)
def test_hostile_files_give_clear_errors(tmp_path: Path, payload: bytes, problem: RecordingProblem) -> None:
    path = tmp_path / "bad.gpulens"
    path.write_bytes(payload)
    with pytest.raises(RecordingError) as err:
        read_recording(str(path))
    assert err.value.problem is problem and "\n" not in str(err.value)


def test_a_mistyped_field_deep_in_a_sample_is_named_in_the_sentence(tmp_path: Path) -> None:
    """The one recording sentence pinned on purpose: what a user reads names the file, the record and the
    field's path in the sample (the one sample decoder's words)."""
    path = tmp_path / "bad.gpulens"
    path.write_bytes(MISTYPED_DEEP)
    with pytest.raises(RecordingError) as err:
        read_recording(str(path))
    assert str(err.value) == f"{path}: record 1: gpus[0].power_w: expected a number, got a string"


def test_missing_replay_file_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        ReplaySource(str(tmp_path / "nope"))
    assert (err.value.where, err.value.problem) == (f"--replay {tmp_path / 'nope'}", ConfigProblem.UNREADABLE)


def test_recorder_cannot_create(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        Recorder(str(tmp_path / "no" / "dir" / "x"))
    assert (err.value.got, err.value.problem) == (str(tmp_path / "no" / "dir" / "x"), ConfigProblem.UNAVAILABLE)


def test_sample_event_backfill_flag_survives(tmp_path: Path) -> None:
    events = record(tmp_path / "r")
    assert any(isinstance(e, SampleEvent) and e.backfill for e in events)
    assert any(isinstance(e, SampleEvent) and not e.backfill for e in events)


class FakeSampler:
    """A test double of collectors.sampler.Sampler: counts calls, fails once."""

    def __init__(self, error: Exception | None = None) -> None:
        self.calls = 0
        self.closed = False
        self.error = error or OSError("boom")

    def sample(self) -> HostSample:
        self.calls += 1
        if self.calls == 2:
            raise self.error
        return DemoSource(seed=1, clock=lambda: T0).sample(0, T0 + self.calls)

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("error", [OSError("boom"), TypeError("boom: a bug")], ids=["os-error", "bug"])
def test_local_source_ticks_reports_errors_and_stops(error: Exception) -> None:
    """A tick that fails, for a reason foreseen or by a bug, is said in the header; sampling goes on."""
    from gpulens.core.config import Config
    from gpulens.sources.local import LocalSource, MultiSource

    fake = FakeSampler(error)
    got: list[SourceEvent] = []
    enough = threading.Event()

    def emit(e: SourceEvent) -> None:
        got.append(e)
        if sum(isinstance(x, SampleEvent) for x in got) >= 3:
            enough.set()

    src = MultiSource([LocalSource(Config(interval_s=0.05), sampler_factory=lambda: fake)])
    assert src.name == "local" and not src.simulated
    src.start(emit)
    assert enough.wait(10)
    src.stop()
    src.stop()  # idempotent
    assert fake.closed
    errors = [e for e in got if isinstance(e, SourceStatusEvent) and not e.ok]
    assert errors and "boom" in errors[0].message
    assert any(isinstance(e, SourceStatusEvent) and e.ok and "resumed" in e.message for e in got)


def test_local_source_sampler_that_cannot_start() -> None:
    from gpulens.core.config import Config
    from gpulens.sources.local import LocalSource

    got: list[SourceEvent] = []
    done = threading.Event()

    def factory() -> HostSampler:
        raise OSError("no /proc")

    def emit(e: SourceEvent) -> None:
        got.append(e)
        done.set()

    src = LocalSource(Config(), sampler_factory=factory)
    src.start(emit)
    assert done.wait(5)
    src.stop()
    assert isinstance(got[0], SourceStatusEvent) and "no /proc" in got[0].message


def test_a_recording_with_only_its_header_is_refused_before_the_ui_opens(tmp_path: Path) -> None:
    """Issue 31 item 13: it showed "replay: indexing … (empty)" forever."""
    from gpulens.sources.replay import read_header

    path = tmp_path / "header-only.gpulens"
    path.write_bytes(header("x", False, T0))
    with pytest.raises(RecordingError) as err:
        read_header(str(path))
    assert err.value.problem is RecordingProblem.NO_SAMPLES
    path.write_bytes(V1 + msgpack.packb({"k": "h", "host": "a", "up": True, "t": T0}))
    assert read_header(str(path))["format"] == "gpulens-recording"  # one record after it: accepted
