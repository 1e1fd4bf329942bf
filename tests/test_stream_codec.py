"""The agent <-> viewer wire format (gpulens.ipc.stream): round trips, limits, fuzz."""

from __future__ import annotations

import contextlib
import struct

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulens.collectors.synthetic import SyntheticSampler
from gpulens.ipc import auth, stream
from gpulens.ipc.errors import AuthError, ProtocolError, VersionMismatch
from gpulens.ipc.serialize import sample_from_dict, sample_to_dict
from gpulens.ipc.stream_frames import history_frames, sample_frame

MESSAGES: list[stream.Message] = [
    stream.Hello(proto=1, role="agent", host="n1", caps=("history", "trace"), version="0.1.0", interval_s=1.0),
    stream.Hello(proto=1, role="viewer", since=1700000000.5),
    stream.Challenge(proto=1, nonce=b"\x01" * 32),
    stream.AuthResponse(cnonce=b"\x02" * 32, mac=b"\x03" * 32),
    stream.AuthOk(mac=b"\x04" * 32),
    stream.SampleMsg(sample={"host": "n1"}),
    stream.History(id=3, samples=({"a": 1}, {"b": 2}), last=False),
    stream.Request(id=7, kind="profile", params={"pids": [1, 2], "duration_s": 2.5}),
    stream.Response(id=7, ok=False, error="no"),
    stream.Response(id=8, ok=True, result={"files": ["x"]}),
    stream.FileChunk(id=7, name="p.folded", offset=0, data=b"a;b 1\n", last=True),
    stream.ErrorMsg(code="auth", message="wrong token"),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(msg: stream.Message) -> None:
    (out,) = stream.FrameDecoder().feed(stream.encode(msg))
    assert out == msg


def test_byte_by_byte_feed_yields_all_messages_in_order() -> None:
    data = b"".join(stream.encode(m) for m in MESSAGES)
    dec = stream.FrameDecoder()
    got: list[stream.Message] = []
    for i in range(len(data)):
        got.extend(dec.feed(data[i : i + 1]))
    assert got == MESSAGES
    assert dec.buffered == 0


def test_pre_encoded_sample_and_history_frames_decode_to_the_sample() -> None:
    s = SyntheticSampler(hostname="h", gpus=8, interval_s=1.0).sample()
    raw = msgpack.packb(sample_to_dict(s), use_bin_type=True)
    (msg,) = stream.FrameDecoder().feed(sample_frame(raw))
    assert isinstance(msg, stream.SampleMsg)
    assert sample_from_dict(msg.sample) == s
    frames = history_frames(5, [raw] * 250)
    msgs = [m for f in frames for m in stream.FrameDecoder().feed(f)]
    assert [len(m.samples) for m in msgs if isinstance(m, stream.History)] == [100, 100, 50]
    assert [m.last for m in msgs if isinstance(m, stream.History)] == [False, False, True]
    (empty,) = stream.FrameDecoder().feed(history_frames(1, [])[0])
    assert isinstance(empty, stream.History) and empty.samples == () and empty.last


def test_huge_declared_length_is_refused_before_buffering() -> None:
    dec = stream.FrameDecoder(max_frame_bytes=1024)
    with pytest.raises(ProtocolError, match="declares 4294967295 bytes; the limit is 1024"):
        dec.feed(struct.pack(">I", 0xFFFFFFFF) + b"x" * 10)
    assert dec.buffered == 0
    with pytest.raises(ProtocolError):  # poisoned: the stream cannot resync
        dec.feed(stream.encode(MESSAGES[0]))


def test_huge_declared_array_inside_a_small_frame_is_an_error_not_an_allocation() -> None:
    body = b"\xdd\xff\xff\xff\xff"  # array32 of 4 billion items, no items
    with pytest.raises(ProtocolError, match="not valid msgpack"):
        stream.FrameDecoder().feed(struct.pack(">I", len(body)) + body)
    body = b"\xdb\x7f\xff\xff\xff"  # str32 of 2 GiB
    with pytest.raises(ProtocolError, match="not valid msgpack"):
        stream.FrameDecoder().feed(struct.pack(">I", len(body)) + body)


def test_deep_nesting_is_an_error() -> None:
    body = b"\x91" * 5000 + b"\x00"
    with pytest.raises(ProtocolError):
        stream.FrameDecoder().feed(struct.pack(">I", len(body)) + body)


def test_truncated_frame_waits_then_completes() -> None:
    data = stream.encode(MESSAGES[0])
    dec = stream.FrameDecoder()
    assert dec.feed(data[:-1]) == []
    assert dec.buffered == len(data) - 1 - 4
    assert dec.feed(data[-1:]) == [MESSAGES[0]]


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ([1, 2], "must be a map"),
        ({"x": 1}, "no message type"),
        ({"t": "bogus"}, "unknown message type 'bogus'"),
        ({"t": "hello", "proto": "1", "role": "agent"}, "field 'proto' must be an integer"),
        ({"t": "hello", "proto": 1, "role": "boss"}, "role must be"),
        ({"t": "hello", "proto": 1, "role": "agent", "caps": [1]}, "caps"),
        ({"t": "request", "id": True, "kind": "x"}, "field 'id' must be an integer"),
        ({"t": "request", "id": 1}, "missing field 'kind'"),
        ({"t": "sample", "sample": [1]}, "field 'sample' must be a map"),
        ({"t": "history", "id": 1, "samples": [1]}, "maps only"),
        ({"t": "chunk", "id": 1, "name": "a", "offset": -1, "data": b"", "last": True}, "negative offset"),
        ({"t": "chunk", "id": 1, "name": "a", "offset": 0, "data": "text", "last": True}, "must be bytes"),
        ({"t": "response", "id": 1, "ok": 1}, "true or false"),
    ],
)
def test_wrong_types_name_the_field(body: object, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        stream.FrameDecoder().feed(stream.encode_body(body) if isinstance(body, dict) else _frame(body))


def _frame(obj: object) -> bytes:
    payload = msgpack.packb(obj, use_bin_type=True)
    return struct.pack(">I", len(payload)) + payload


def test_unsupported_version_names_both_versions() -> None:
    with pytest.raises(VersionMismatch, match=r"protocol version 99; this gpulens speaks version 1"):
        stream.FrameDecoder().feed(_frame({"t": "hello", "proto": 99, "role": "agent"}))


def test_non_string_map_keys_are_refused() -> None:
    with pytest.raises(ProtocolError):
        stream.FrameDecoder().feed(_frame({1: "x"}))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_fuzz_random_bytes_only_raise_protocol_error(data: bytes) -> None:
    dec = stream.FrameDecoder(max_frame_bytes=4096)
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
        (msg,) = stream.FrameDecoder().feed(frame)
    except ProtocolError:
        return
    assert stream.to_wire(msg)["t"] == tag


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=200), st.binary(min_size=1, max_size=64))
def test_fuzz_truncation_and_garbage_after_valid_frames(cut: int, junk: bytes) -> None:
    data = b"".join(stream.encode(m) for m in MESSAGES[:4])
    dec = stream.FrameDecoder(max_frame_bytes=4096)
    got = dec.feed(data[: len(data) - cut] if cut < len(data) else b"")
    assert got == MESSAGES[: len(got)]
    with contextlib.suppress(ProtocolError):
        dec.feed(junk)


# -- auth -----------------------------------------------------------------------


def test_token_file_must_be_0600(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = auth.make_token_file(tmp_path / "tok")
    assert len(auth.load_token(p)) == 64
    p.chmod(0o644)
    with pytest.raises(AuthError, match=r"mode 0644.*chmod 600"):
        auth.load_token(p)
    p.chmod(0o600)
    p.write_text("short")
    with pytest.raises(AuthError, match="shorter than"):
        auth.load_token(p)
    with pytest.raises(AuthError, match="cannot read"):
        auth.load_token(tmp_path / "missing")


def test_challenge_response_and_replay() -> None:
    token, other = b"t" * 32, b"u" * 32
    guard = auth.ReplayGuard()
    s, c = auth.new_nonce(), auth.new_nonce()
    mac = auth.viewer_proof(token, s, c)
    assert token not in mac
    auth.verify_viewer(token, s, c, mac, guard)
    with pytest.raises(AuthError, match="replayed"):
        auth.verify_viewer(token, s, c, mac, guard)
    with pytest.raises(AuthError, match="wrong token"):
        auth.verify_viewer(token, auth.new_nonce(), c, mac, guard)  # replay on a new connection
    c2 = auth.new_nonce()
    with pytest.raises(AuthError, match="wrong token"):
        auth.verify_viewer(token, s, c2, auth.viewer_proof(other, s, c2), guard)
    auth.verify_agent(token, s, c, auth.agent_proof(token, s, c))
    with pytest.raises(AuthError):
        auth.verify_agent(token, s, c, auth.viewer_proof(token, s, c))


# -- the viewer's fast sample decoder matches the reference ----------------------

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


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(_ALL_PATHS), _wire_values | st.just(float("nan")) | st.just(True), st.booleans())
def test_fast_decoder_equals_reference(path: tuple[object, ...], value: object, delete: bool) -> None:
    import copy

    from gpulens.core.errors import SchemaError
    from gpulens.ipc.fast_decode import fast_sample_from_dict

    data: object = copy.deepcopy(_BASE)
    if path:
        parent: object = data
        for key in path[:-1]:
            parent = parent[key]  # type: ignore[index]
        if delete and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = value  # type: ignore[index]
    else:
        data = value
    try:
        expected = sample_from_dict(data)
    except SchemaError as err:
        with pytest.raises(SchemaError) as got:
            fast_sample_from_dict(data)
        assert str(got.value) == str(err)
        return
    assert fast_sample_from_dict(data) == expected


def test_fast_decoder_fills_defaults_like_the_constructor() -> None:
    from gpulens.ipc.fast_decode import fast_sample_from_dict

    minimal = {k: _BASE[k] for k in ("host", "time", "cpu", "memory", "network", "storage")}
    got = fast_sample_from_dict(minimal)
    assert got == sample_from_dict(minimal) and got.gpus == () and got.unavailable == {} and not got.simulated


# -- the msgspec typed path (FrameDecoder sample_hook) matches the reference -------


def _hooked() -> stream.FrameDecoder:
    from gpulens.ipc.fast_decode import sample_from_msgpack

    return stream.FrameDecoder(sample_hook=sample_from_msgpack)


def _viewer_decode(frame: bytes) -> tuple[bool, object]:
    """What the viewer's link does with one sample frame: (typed path taken, sample)."""
    from gpulens.ipc.fast_decode import fast_sample_from_dict

    (msg,) = _hooked().feed(frame)
    if isinstance(msg, stream.ParsedSample):
        return True, msg.sample
    assert isinstance(msg, stream.SampleMsg)
    return False, fast_sample_from_dict(msg.sample)


def _same_outcome(data: object) -> bool:
    """Assert the typed path and the reference agree on ``data``; True if the typed path took it."""
    from gpulens.core.errors import SchemaError

    try:
        raw = msgpack.packb(data, use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        return False  # not representable in msgpack: never on the wire
    frame = sample_frame(raw)
    if not isinstance(data, dict):  # not a map: the envelope check refuses it on both paths
        with pytest.raises(ProtocolError) as plain:
            stream.FrameDecoder().feed(frame)
        with pytest.raises(ProtocolError) as hooked:
            _hooked().feed(frame)
        assert str(hooked.value) == str(plain.value)
        return False
    try:
        expected = sample_from_dict(msgpack.unpackb(raw, raw=False))
    except SchemaError as err:
        with pytest.raises(SchemaError) as got:
            _viewer_decode(frame)
        assert str(got.value) == str(err)
        return False
    typed, sample = _viewer_decode(frame)
    assert sample == expected
    assert repr(sample) == repr(expected)  # same value types too (1.0, not 1)
    return typed


def test_typed_path_takes_a_valid_sample_and_equals_the_reference() -> None:
    for gpus in (0, 1, 8):
        s = SyntheticSampler(hostname="h", gpus=gpus, interval_s=1.0).sample()
        (msg,) = _hooked().feed(sample_frame(msgpack.packb(sample_to_dict(s), use_bin_type=True)))
        assert isinstance(msg, stream.ParsedSample) and msg.sample == s
    assert _same_outcome(_BASE)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(_ALL_PATHS),
    _wire_values | st.just(float("nan")) | st.just(float("-inf")) | st.just(1e308) | st.just(True) | st.just(7)
    | st.just("a\x1b[31mb\x07"),
    st.sampled_from(["set", "delete", "add_key"]),
)
def test_typed_path_agrees_with_reference_on_mutations(path: tuple[object, ...], value: object, how: str) -> None:
    import copy

    data: object = copy.deepcopy(_BASE)
    if not path:
        data = value
    else:
        parent: object = data
        for key in path[:-1]:
            parent = parent[key]  # type: ignore[index]
        if how == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif how == "add_key" and isinstance(parent, dict):
            parent["zz_unknown_" + str(path[-1])] = value  # forward compatibility: ignored
        else:
            parent[path[-1]] = value  # type: ignore[index]
    _same_outcome(data)


def test_typed_path_ignores_unknown_keys_at_every_level() -> None:
    import copy

    data = copy.deepcopy(_BASE)
    data["new_top"] = {"x": [1, 2, {"y": None}]}
    data["cpu"]["new_cpu"] = "later"
    data["gpus"][0]["new_gpu"] = 1.5
    assert _same_outcome(data)
    body = msgpack.packb({"t": "sample", "sample": _BASE, "extra": [1, 2, 3]}, use_bin_type=True)
    (msg,) = _hooked().feed(struct.pack(">I", len(body)) + body)
    assert isinstance(msg, stream.ParsedSample)


@pytest.mark.parametrize("single", [False, True])
@pytest.mark.parametrize("value", [float("nan"), -float("nan"), float("inf"), float("-inf"), 1e308])
def test_every_path_turns_non_finite_and_absurd_values_into_na_with_a_reason(value: float, single: bool) -> None:
    """NaN, infinities and 1e308 become None plus the GPU's reason, on the typed path and the dict paths alike."""
    import copy

    from gpulens.ipc.fast_decode import fast_sample_from_dict

    data = copy.deepcopy(_BASE)
    data["gpus"][1]["power_w"] = 3e38 if single and value == 1e308 else value  # float32 tops out at 3.4e38
    frame = sample_frame(msgpack.packb(data, use_bin_type=True, use_single_float=single))
    (msg,) = _hooked().feed(frame)
    assert isinstance(msg, stream.ParsedSample)  # the typed path takes it and checks it
    unpacked = msgpack.unpackb(msgpack.packb(data, use_single_float=single), raw=False)
    for got in (msg.sample, fast_sample_from_dict(unpacked), sample_from_dict(unpacked)):
        assert got.gpus[1].power_w is None
        assert "gpus[1].power_w" in got.gpus[1].unavailable["power_w"]
        assert got == msg.sample


def test_typed_path_gives_the_plain_paths_errors_for_hostile_frames() -> None:
    def both(body: bytes) -> tuple[str, str]:
        frame = struct.pack(">I", len(body)) + body
        out = []
        for dec in (stream.FrameDecoder(), _hooked()):
            try:
                (msg,) = dec.feed(frame)
                out.append(type(msg).__name__)
            except ProtocolError as err:
                out.append(f"ProtocolError: {err}")
        return out[0], out[1]

    head = b"\x83\xa1t\xa6sample\xa6sample"
    deep = b"\x82\xa1t\xa6sample\xa5extra" + b"\x91" * 60_000 + b"\xc0"
    cases = [
        deep,  # nesting deeper than either decoder's recursion limit
        b"\x82\xa1t\xa6sample\xa6sample\xc4\x02ab",  # sample is bytes
        b"\x82\xa1t\xa6sample\xa6sample\x93\x01\x02\x03",  # sample is a list
        b"\x81\xa1t\xa6sample",  # no sample
        b"\x82\xa1t\xa6sample\xa6sample\xd4\x01\x00",  # ext type
        b"\x82\xa1t\xa6sample\xa6sample\x81\xa4host\xa3\xff\xfe\xfd",  # invalid UTF-8
        b"\x82\xa1t\xa6sample\xa6sample\xde\xff\xff",  # truncated map
        head + b"\x01" + b"\xa6sample" + msgpack.packb(_BASE),  # duplicate key: last wins in both
        b"\x82\xa1t\xc4\x06sample\xa6sample" + msgpack.packb(_BASE),  # tag as bytes
    ]
    for body in cases:
        plain, hooked = both(body)
        if plain == "SampleMsg":
            assert hooked in ("SampleMsg", "ParsedSample")
        else:
            assert hooked == plain
    assert both(head + b"\x01" + b"\xa6sample" + msgpack.packb(_BASE)) == ("SampleMsg", "ParsedSample")


def test_typed_path_keeps_the_sequence_limits() -> None:
    import copy

    from gpulens.ipc.serialize import MAX_SEQUENCE

    data = copy.deepcopy(_BASE)
    data["cpu"]["per_core_percent"] = [1.0] * (MAX_SEQUENCE + 1)
    frame = sample_frame(msgpack.packb(data, use_bin_type=True))
    with pytest.raises(ProtocolError, match="not valid msgpack"):
        _hooked().feed(frame)  # as on the plain path: msgpack's container limit
    data["cpu"]["per_core_percent"] = [1.0] * 20_000  # a valid body over the typed path's size bound
    typed, sample = _viewer_decode(sample_frame(msgpack.packb(data, use_bin_type=True)))
    assert not typed and sample == sample_from_dict(data)
