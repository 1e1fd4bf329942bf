"""The agent <-> viewer wire format (gpulens.ipc.stream): round trips, limits, fuzz."""

from __future__ import annotations

import contextlib
import struct
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulens.collectors.synthetic import SyntheticSampler
from gpulens.core.errors import ConfigProblem, SchemaError
from gpulens.core.model import MAX_ITEMS, MAX_TEXT_LEN
from gpulens.ipc import auth, stream
from gpulens.ipc.errors import (
    AuthError,
    AuthProblem,
    ProtocolError,
    ProtocolProblem,
    VersionMismatch,
)
from gpulens.ipc.serialize import sample_from_dict, sample_from_msgpack, sample_to_dict
from gpulens.ipc.stream_decode import FrameDecoder
from gpulens.ipc.stream_frames import history_frames, sample_frame
from tests.fakes.agent_helpers import make_token_file

_SAMPLE = SyntheticSampler(hostname="n1", gpus=1, interval_s=1.0).sample()
_LATER = SyntheticSampler(hostname="n1", gpus=0, interval_s=1.0).sample()

MESSAGES: list[stream.Message] = [
    stream.Hello(proto=1, role="agent", host="n1", caps=("history", "trace"), version="0.1.0", interval_s=1.0),
    stream.Hello(proto=1, role="viewer", since=1700000000.5),
    stream.Challenge(proto=1, nonce=b"\x01" * 32),
    stream.AuthResponse(cnonce=b"\x02" * 32, mac=b"\x03" * 32),
    stream.AuthOk(mac=b"\x04" * 32),
    stream.SampleMsg(sample=_SAMPLE),
    stream.History(id=3, samples=(_SAMPLE, _LATER), last=False),
    stream.Request(id=7, kind="profile", params={"pids": [1, 2], "duration_s": 2.5}),
    stream.Response(id=7, ok=False, error="no"),
    stream.Response(id=8, ok=True, result={"files": ["x"]}),
    stream.FileChunk(id=7, name="p.folded", offset=0, data=b"a;b 1\n", last=True),
    stream.ErrorMsg(code="auth", message="wrong token"),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(msg: stream.Message) -> None:
    (out,) = FrameDecoder().feed(stream.encode(msg))
    assert out == msg


def test_byte_by_byte_feed_yields_all_messages_in_order() -> None:
    data = b"".join(stream.encode(m) for m in MESSAGES)
    dec = FrameDecoder()
    got: list[stream.Message] = []
    for i in range(len(data)):
        got.extend(dec.feed(data[i : i + 1]))
    assert got == MESSAGES
    assert dec.buffered == 0


def test_pre_encoded_sample_and_history_frames_decode_to_the_sample() -> None:
    s = SyntheticSampler(hostname="h", gpus=8, interval_s=1.0).sample()
    raw = msgpack.packb(sample_to_dict(s), use_bin_type=True)
    (msg,) = FrameDecoder().feed(sample_frame(raw))
    assert isinstance(msg, stream.SampleMsg)
    assert msg.sample == s
    assert stream.encode(stream.SampleMsg(s)) == sample_frame(raw)  # byte for byte what the agent sends
    frames = history_frames(5, [raw] * 250)
    msgs = [m for f in frames for m in FrameDecoder().feed(f)]
    assert [len(m.samples) for m in msgs if isinstance(m, stream.History)] == [100, 100, 50]
    assert all(x == s for m in msgs if isinstance(m, stream.History) for x in m.samples)
    assert [m.last for m in msgs if isinstance(m, stream.History)] == [False, False, True]
    (empty,) = FrameDecoder().feed(history_frames(1, [])[0])
    assert isinstance(empty, stream.History) and empty.samples == () and empty.last


def test_huge_declared_length_is_refused_before_buffering() -> None:
    dec = FrameDecoder(max_frame_bytes=1024)
    with pytest.raises(ProtocolError) as err:
        dec.feed(struct.pack(">I", 0xFFFFFFFF) + b"x" * 10)
    assert err.value.problem is ProtocolProblem.FRAME_TOO_LARGE
    # Pinned on purpose, ProtocolError's one sentence: both sizes, as the session's end reason shows them.
    assert str(err.value) == "frame declares 4294967295 bytes; the limit is 1024"
    assert dec.buffered == 0
    with pytest.raises(ProtocolError) as again:  # poisoned: the stream cannot resync
        dec.feed(stream.encode(MESSAGES[0]))
    assert again.value is err.value


def test_huge_declared_array_inside_a_small_frame_is_an_error_not_an_allocation() -> None:
    body = b"\xdd\xff\xff\xff\xff"  # array32 of 4 billion items, no items
    with pytest.raises(ProtocolError) as err:
        FrameDecoder().feed(struct.pack(">I", len(body)) + body)
    assert err.value.problem is ProtocolProblem.NOT_MSGPACK
    body = b"\xdb\x7f\xff\xff\xff"  # str32 of 2 GiB
    with pytest.raises(ProtocolError) as err:
        FrameDecoder().feed(struct.pack(">I", len(body)) + body)
    assert err.value.problem is ProtocolProblem.NOT_MSGPACK


def test_deep_nesting_is_an_error() -> None:
    body = b"\x91" * 5000 + b"\x00"
    with pytest.raises(ProtocolError) as err:
        FrameDecoder().feed(struct.pack(">I", len(body)) + body)
    assert err.value.problem is ProtocolProblem.NOT_MSGPACK


def test_truncated_frame_waits_then_completes() -> None:
    data = stream.encode(MESSAGES[0])
    dec = FrameDecoder()
    assert dec.feed(data[:-1]) == []
    assert dec.buffered == len(data) - 1 - 4
    assert dec.feed(data[-1:]) == [MESSAGES[0]]


P = ProtocolProblem


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ([1, 2], P.NOT_A_MAP),
        ({"x": 1}, P.NO_MESSAGE_TYPE),
        ({"t": "bogus"}, P.UNKNOWN_MESSAGE),
        ({"t": "hello", "proto": "1", "role": "agent"}, P.WRONG_TYPE),
        ({"t": "hello", "proto": 1, "role": "boss"}, P.OUT_OF_RANGE),
        ({"t": "hello", "proto": 1, "role": "agent", "caps": [1]}, P.WRONG_TYPE),
        ({"t": "request", "id": True, "kind": "x"}, P.WRONG_TYPE),
        ({"t": "request", "id": 1}, P.MISSING_FIELD),
        ({"t": "sample", "sample": [1]}, P.BAD_SAMPLE),
        ({"t": "sample"}, P.MISSING_FIELD),
        ({"t": "sample", "sample": {"host": "h", "time": "now"}}, P.BAD_SAMPLE),
        ({"t": "history", "id": 1, "samples": [1]}, P.BAD_SAMPLE),
        ({"t": "history", "id": "1", "samples": []}, P.WRONG_TYPE),
        ({"t": "history", "id": 1}, P.MISSING_FIELD),
        ({"t": "history", "id": 1, "samples": [], "last": 3}, P.WRONG_TYPE),
        ({"t": "chunk", "id": 1, "name": "a", "offset": -1, "data": b"", "last": True}, P.OUT_OF_RANGE),
        ({"t": "chunk", "id": 1, "name": "a", "offset": 0, "data": "text", "last": True}, P.WRONG_TYPE),
        ({"t": "response", "id": 1, "ok": 1}, P.WRONG_TYPE),
    ],
)
def test_wrong_frames_are_refused_for_their_reason(body: object, problem: ProtocolProblem) -> None:
    with pytest.raises(ProtocolError) as err:
        FrameDecoder().feed(stream.encode_body(body) if isinstance(body, dict) else _frame(body))
    assert type(err.value) is ProtocolError and err.value.problem is problem


def _frame(obj: object) -> bytes:
    payload: bytes = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


def test_unsupported_version_names_both_versions() -> None:
    with pytest.raises(VersionMismatch) as err:
        FrameDecoder().feed(_frame({"t": "hello", "proto": 99, "role": "agent"}))
    assert err.value.problem is ProtocolProblem.BAD_VERSION
    # Pinned on purpose, VersionMismatch's one sentence: both versions and the fix, as a user reads it.
    assert str(err.value) == ("peer speaks protocol version 99; this gpulens speaks version 1 "
                              "(upgrade the older side so both match)")


def test_non_string_map_keys_are_refused() -> None:
    with pytest.raises(ProtocolError) as err:
        FrameDecoder().feed(_frame({1: "x"}))
    assert err.value.problem is ProtocolProblem.NOT_MSGPACK


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_fuzz_random_bytes_only_raise_protocol_error(data: bytes) -> None:
    dec = FrameDecoder(max_frame_bytes=4096)
    try:
        msgs = dec.feed(data)
    except ProtocolError:
        return
    for m in msgs:
        assert type(m) in stream._TAGS


_wire_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([*list(stream._TAGS.values()), "zzz"]),
    st.dictionaries(
        st.sampled_from(["proto", "role", "host", "caps", "id", "kind", "params", "ok", "samples", "sample",
                         "nonce", "cnonce", "mac", "name", "offset", "data", "last", "code", "message", "since"]),
        _wire_values,
        max_size=8,
    ),
)
def test_fuzz_structured_maps_decode_or_raise_protocol_error(tag: str, fields: dict[str, object]) -> None:
    body = {"t": tag, **fields}
    try:
        frame = stream.encode_body(body)
    except (ProtocolError, OverflowError, TypeError, ValueError):
        return  # hypothesis made something msgpack cannot pack: not a decoder case
    try:
        (msg,) = FrameDecoder().feed(frame)
    except ProtocolError:
        return
    assert stream.to_wire(msg)["t"] == tag


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=200), st.binary(min_size=1, max_size=64))
def test_fuzz_truncation_and_garbage_after_valid_frames(cut: int, junk: bytes) -> None:
    data = b"".join(stream.encode(m) for m in MESSAGES[:4])
    dec = FrameDecoder(max_frame_bytes=4096)
    got = dec.feed(data[: len(data) - cut] if cut < len(data) else b"")
    assert got == MESSAGES[: len(got)]
    with contextlib.suppress(ProtocolError):
        dec.feed(junk)


# -- auth -----------------------------------------------------------------------


def test_token_file_must_be_0600(tmp_path: Path) -> None:
    p = make_token_file(tmp_path / "tok")
    assert len(auth.load_token(p)) == 64
    p.chmod(0o644)
    with pytest.raises(AuthError) as err:
        auth.load_token(p)
    assert (err.value.problem, err.value.file_problem) == (AuthProblem.TOKEN_FILE, ConfigProblem.UNSAFE)
    # Pinned on purpose, AuthError's one sentence: the mode found and the command that fixes it.
    assert str(err.value) == f"token file {p} has mode 0644; it must be readable by its owner only: run 'chmod 600 {p}'"
    p.chmod(0o600)
    p.write_text("short")
    with pytest.raises(AuthError) as err:
        auth.load_token(p)
    assert (err.value.problem, err.value.file_problem) == (AuthProblem.TOKEN_FILE, ConfigProblem.OUT_OF_RANGE)
    with pytest.raises(AuthError) as err:
        auth.load_token(tmp_path / "missing")
    assert (err.value.problem, err.value.file_problem) == (AuthProblem.TOKEN_FILE, ConfigProblem.UNREADABLE)


def test_challenge_response_and_replay() -> None:
    token, other = b"t" * 32, b"u" * 32
    guard = auth.ReplayGuard()
    s, c = auth.new_nonce(), auth.new_nonce()
    mac = auth.viewer_proof(token, s, c)
    assert token not in mac
    auth.verify_viewer(token, s, c, mac, guard)
    with pytest.raises(AuthError) as err:
        auth.verify_viewer(token, s, c, mac, guard)
    assert err.value.problem is AuthProblem.REPLAYED
    with pytest.raises(AuthError) as err:
        auth.verify_viewer(token, auth.new_nonce(), c, mac, guard)  # replay on a new connection
    assert err.value.problem is AuthProblem.WRONG_TOKEN
    c2 = auth.new_nonce()
    with pytest.raises(AuthError) as err:
        auth.verify_viewer(token, s, c2, auth.viewer_proof(other, s, c2), guard)
    assert err.value.problem is AuthProblem.WRONG_TOKEN
    with pytest.raises(AuthError) as err:
        auth.verify_viewer(token, s, c2[:5], mac, guard)
    assert err.value.problem is AuthProblem.BAD_NONCE
    auth.verify_agent(token, s, c, auth.agent_proof(token, s, c))
    with pytest.raises(AuthError) as err:
        auth.verify_agent(token, s, c, auth.viewer_proof(token, s, c))
    assert err.value.problem is AuthProblem.AGENT_PROOF_WRONG
    assert err.value.file_problem is None


# -- the one sample decoder: typed, bounded, checked, naming the failing path ----

_BASE = sample_to_dict(SyntheticSampler(hostname="h", gpus=2, interval_s=1.0).sample())


def _paths(obj: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


_ALL_PATHS = _paths(_BASE)


def _dotted(path: tuple[object, ...]) -> str:
    """``("gpus", 1, "power_w")`` as the decoder names it: ``gpus[1].power_w``.

    Inside a map of strings (``unavailable``, ``gpu_mem_bytes``) the decoder
    names the map, not the key, so the path stops there.
    """
    out = ""
    for key in path:
        if isinstance(key, int):
            out += f"[{key}]"
        else:
            out += f".{key}" if out else str(key)
            if key in ("unavailable", "gpu_mem_bytes"):
                break
    return out


def _decode_frame(data: object) -> stream.SampleMsg:
    (msg,) = FrameDecoder().feed(sample_frame(msgpack.packb(data, use_bin_type=True)))
    assert isinstance(msg, stream.SampleMsg)
    return msg


def test_valid_samples_decode_to_equal_frozen_dataclasses() -> None:
    for gpus in (0, 1, 8):
        s = SyntheticSampler(hostname="h", gpus=gpus, interval_s=1.0).sample()
        got = _decode_frame(sample_to_dict(s)).sample
        assert got == s and repr(got) == repr(s)  # same value types too (1.0, not 1)
        assert sample_from_msgpack(msgpack.packb(sample_to_dict(s))) == s


def test_missing_optional_fields_take_the_model_defaults() -> None:
    minimal = {k: _BASE[k] for k in ("host", "time", "cpu", "memory", "network", "storage")}
    for got in (_decode_frame(minimal).sample, sample_from_dict(minimal)):
        assert got.gpus == () and got.unavailable == {} and not got.simulated and got.cache == type(got.cache)()


_OPTIONAL_OBJECTS = {"workload", "allocated"}
"""Fields typed ``Workload | None``: every Workload field has a default, so any map decodes as one."""


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([p for p in _ALL_PATHS if p]),
    st.text(max_size=4) | st.binary(max_size=4) | st.lists(st.integers(-5, 300), max_size=2) | st.just({"x": 1})
    | st.just(True),
)
def test_a_wrongly_typed_field_is_refused_naming_its_path(path: tuple[object, ...], value: object) -> None:
    import copy

    data = copy.deepcopy(_BASE)
    parent: Any = data  # nested maps and lists
    for key in path[:-1]:
        parent = parent[key]
    old = parent[path[-1]]
    if type(old) is type(value) or (isinstance(old, list) and isinstance(value, list) and not value):
        return  # not a type change
    parent[path[-1]] = value
    try:
        _decode_frame(data)
    except ProtocolError as err:
        assert err.problem is ProtocolProblem.BAD_SAMPLE
        assert isinstance(err.__cause__, SchemaError)
        assert err.__cause__.path.startswith(_dotted(path)), (path, err.__cause__.path)
        with pytest.raises(SchemaError) as plain:  # a recording or --json file says the same
            sample_from_dict(data)
        assert plain.value.path == err.__cause__.path
        return
    # Accepted only where the new value fits the field's type: numbers for a list of numbers, a string for
    # str | None, a map for an optional object whose every field has a default (a Workload: unknown keys ignored).
    fits_object = old is None and isinstance(value, dict) and path[-1] in _OPTIONAL_OBJECTS
    assert (isinstance(old, list) and isinstance(value, list)) or (old is None and isinstance(value, str)) \
        or fits_object, (path, value)


def test_unknown_keys_are_ignored_at_every_level() -> None:
    import copy

    data = copy.deepcopy(_BASE)
    data["new_top"] = {"x": [1, 2, {"y": None}]}
    data["cpu"]["new_cpu"] = "later"
    data["gpus"][0]["new_gpu"] = 1.5
    assert _decode_frame(data).sample == sample_from_dict(_BASE)
    body = msgpack.packb({"t": "sample", "sample": _BASE, "extra": [1, 2, 3]}, use_bin_type=True)
    (msg,) = FrameDecoder().feed(struct.pack(">I", len(body)) + body)
    assert isinstance(msg, stream.SampleMsg) and msg.sample.host == "h"


@pytest.mark.parametrize("single", [False, True])
@pytest.mark.parametrize("value", [float("nan"), -float("nan"), float("inf"), float("-inf"), 1e308])
def test_both_doors_turn_non_finite_and_absurd_values_into_na_with_a_reason(value: float, single: bool) -> None:
    """NaN, infinities and 1e308 become None plus the GPU's reason, off the wire and from plain data alike."""
    import copy

    data = copy.deepcopy(_BASE)
    data["gpus"][1]["power_w"] = 3e38 if single and value == 1e308 else value  # float32 tops out at 3.4e38
    packed = msgpack.packb(data, use_bin_type=True, use_single_float=single)
    (msg,) = FrameDecoder().feed(sample_frame(packed))
    assert isinstance(msg, stream.SampleMsg)
    (hist,) = FrameDecoder().feed(history_frames(0, [packed])[0])
    assert isinstance(hist, stream.History)
    for got in (msg.sample, hist.samples[0], sample_from_dict(msgpack.unpackb(packed, raw=False))):
        assert got.gpus[1].power_w is None
        assert "gpus[1].power_w" in got.gpus[1].unavailable["power_w"]
        assert got == msg.sample


def test_an_implausible_time_refuses_the_frame_naming_the_sample() -> None:
    data = dict(_BASE, time=float("inf"))
    with pytest.raises(ProtocolError) as err:
        _decode_frame(data)
    assert _bad_sample(err.value) == ("time", "a finite number from 0 to 1e+11")
    raws = [msgpack.packb(_BASE), msgpack.packb(data)]
    with pytest.raises(ProtocolError) as err:
        FrameDecoder().feed(history_frames(0, raws)[0])
    assert _bad_sample(err.value) == ("time", "a finite number from 0 to 1e+11")
    bad = dict(_BASE, cpu={"total_percent": "hot"})
    with pytest.raises(ProtocolError) as err:
        FrameDecoder().feed(history_frames(0, [msgpack.packb(bad)])[0])
    assert _bad_sample(err.value) == ("cpu.total_percent", "a number")


def _bad_sample(err: ProtocolError) -> tuple[str, str]:
    """A BAD_SAMPLE refusal's path and rule, from the SchemaError it carries."""
    assert err.problem is ProtocolProblem.BAD_SAMPLE and isinstance(err.__cause__, SchemaError), err
    return err.__cause__.path, err.__cause__.expected


def test_hostile_sample_frames_are_protocol_errors() -> None:
    def decode(body: bytes) -> ProtocolProblem | str | None:
        try:
            (msg,) = FrameDecoder().feed(struct.pack(">I", len(body)) + body)
        except ProtocolError as err:
            return err.problem
        return type(msg).__name__

    base = msgpack.packb(_BASE)
    head = b"\x82\xa1t\xa6sample\xa6sample"
    deep = b"\x91" * 60_000 + b"\xc0"
    P = ProtocolProblem
    cases = {
        b"\x82\xa1t\xa6sample\xa5extra" + deep: P.NOT_MSGPACK,  # nesting deeper than any decoder's limit
        head + deep: P.NOT_MSGPACK,
        head + b"\xc4\x02ab": P.BAD_SAMPLE,  # sample: expected a map, got bytes
        head + b"\x93\x01\x02\x03": P.BAD_SAMPLE,  # a list
        head + b"\xd4\x01\x00": P.BAD_SAMPLE,  # an extension type
        head + b"\x81\xa4host\xa3\xff\xfe\xfd": P.NOT_MSGPACK,  # invalid UTF-8
        head + b"\xde\xff\xff": P.NOT_MSGPACK,  # truncated map
        head + base + b"\xc0": P.NOT_MSGPACK,  # trailing bytes
        b"\x82\xa1t\xc4\x06sample\xa6sample" + base: P.NO_MESSAGE_TYPE,  # tag as bytes
        b"\x82\xa1t\xa6sample\xa5extra" + b"\x91" * 1010 + b"\xc0": P.UNREADABLE_ENVELOPE,  # msgpack reads it, msgspec not
        b"\x82\xa1t\xa7history\xa5extra" + b"\x91" * 1010 + b"\xc0": P.UNREADABLE_ENVELOPE,
    }
    for body, problem in cases.items():
        assert decode(body) is problem, (body[:40], decode(body))
    assert decode(b"\x83\xa1t\xa6sample\xa6sample\x01\xa6sample" + base) == "SampleMsg"  # repeated key: the last wins


def test_the_sample_bounds_apply_before_anything_is_built() -> None:
    import copy

    data = copy.deepcopy(_BASE)
    data["cpu"]["per_core_percent"] = [1.0] * (MAX_ITEMS + 1)
    with pytest.raises(ProtocolError) as err:
        _decode_frame(data)
    assert _bad_sample(err.value) == ("cpu.per_core_percent", f"at most {MAX_ITEMS} items")
    with pytest.raises(SchemaError, match=rf"^cpu\.per_core_percent: expected at most {MAX_ITEMS} items"):
        sample_from_dict(data)
    data["cpu"]["per_core_percent"] = [1.0] * 20_000  # a valid body of 180 kB: the same single path
    assert len(_decode_frame(data).sample.cpu.per_core_percent) == 20_000
    data = dict(_BASE, host="x" * (MAX_TEXT_LEN + 1))
    with pytest.raises(ProtocolError) as err:
        _decode_frame(data)
    assert _bad_sample(err.value) == ("host", f"at most {MAX_TEXT_LEN} characters")
    data = dict(_BASE, unavailable={str(i): "" for i in range(MAX_ITEMS + 1)})
    with pytest.raises(ProtocolError) as err:
        _decode_frame(data)
    assert _bad_sample(err.value) == ("unavailable", f"at most {MAX_ITEMS} entries")
    # A declared length of 4 billion GPUs, or history samples, in a small frame: refused, nothing allocated.
    raw = msgpack.packb(dict(_BASE, gpus=[]))
    gpus = raw.index(b"\xa4gpus\x90")
    hostile = raw[: gpus + 5] + b"\xdd\xff\xff\xff\xff" + raw[gpus + 6 :]
    history = b"\x83\xa1t\xa7history\xa2id\x01\xa7samples\xdd\xff\xff\xff\xff"
    for frame in (sample_frame(hostile), struct.pack(">I", len(history)) + history):
        with pytest.raises(ProtocolError) as err:
            FrameDecoder().feed(frame)
        assert err.value.problem is ProtocolProblem.NOT_MSGPACK
    # As many real packed samples as the bound allows, plus one, in one history frame.
    body = b"\x83\xa1t\xa7history\xa2id\x01\xa7samples\xdd" + struct.pack(">I", MAX_ITEMS + 1) + b"\xc0" * (MAX_ITEMS + 1)
    with pytest.raises(ProtocolError) as err:
        FrameDecoder().feed(struct.pack(">I", len(body)) + body)
    assert err.value.problem is ProtocolProblem.OUT_OF_RANGE  # the history's own list, not a sample's
