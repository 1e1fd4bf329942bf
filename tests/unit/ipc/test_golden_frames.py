"""The wire format is pinned by golden frames (tests/data/frames, issue 33).

Each message docs/protocol.md lists has one fixed example (tests/unit/ipc/golden_frames.py)
and its exact bytes in tests/data/frames. Checked both ways: the product's encoders make
exactly those bytes, and its decoders read them back as the fixed message. A digest over the
files is recorded here beside the version that governs them, so a changed frame (regenerated
or not) fails until the protocol version is bumped and docs/protocol.md updated.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import msgpack
import pytest

from gpulens.ipc import stream
from gpulens.ipc.request_schema import KINDS
from tests.paths import ROOT
from tests.unit.ipc import golden_frames as gf

GOLDEN_DIGESTS: dict[int, str] = {
    # Version 1 gained the "processes" request kind (issue 31 item 7): additive, no frame of the others
    # changed, and an agent without it answers "unsupported request kind" (docs/protocol.md), so the
    # version stayed and its digest (da3e9f6c… before) was recorded again.
    # The "gpumem" kind (issue 28) was on the wire in version 1 before it had golden frames; issue 33
    # item 2 added stream-request-gpumem, stream-chunk-gpumem and stream-response-gpumem. No other file's
    # bytes changed (regen.py --check listed only those three) and no peer sees anything new, so this is no
    # format change: the version stayed and its digest (eb8ccd12… before) was recorded again.
    1: "6e294c1bd8b793c28aee3e636f90401888aa800c350238e915212d4b9efb4e0b",
}
"""Digest of the gpulens golden frames (``gf.family_digest``) for each stream protocol version.

Add a line when ``stream.PROTOCOL_VERSION`` is bumped; never change a version's line."""

KINETO_DIGEST = "605bfac5363e5a5955f3c4a247cb33511aaeabd223daf93cca1f8f664fa7f0d1"
"""Digest of the Kineto golden datagrams: libkineto's format, which gpulens follows and cannot version."""

BUMP = (
    "The gpulens wire format changed. If that is intended: run tests/data/frames/regen.py, bump "
    "PROTOCOL_VERSION (and SUPPORTED_VERSIONS) in ipc/stream.py, record the digest regen.py prints "
    "in GOLDEN_DIGESTS of tests/unit/ipc/test_golden_frames.py under the new version, and update "
    "docs/protocol.md. If not: the change breaks every peer of the old version; undo it."
)
KINETO_FIXED = (
    "The Kineto datagram format is libkineto's (ipc/kineto/codec.py; docs/protocol.md, 'Golden "
    "frames'): gpulens cannot change it, only follow a change in libkineto. If libkineto "
    "changed: run tests/data/frames/regen.py and record the digest it prints as KINETO_DIGEST."
)


def _why(entry: gf.Golden) -> str:
    return BUMP if entry.family == gf.GPULENS else KINETO_FIXED


def _first_difference(a: bytes, b: bytes) -> str:
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"{len(a)} bytes against {len(b)} stored; first difference at byte {at}"


ENCODINGS = [
    pytest.param(g, desc, fn, id=f"{g.name}:{desc}") for g in gf.CATALOG for desc, fn in g.encoders
]
DECODED = [pytest.param(g, id=g.name) for g in gf.CATALOG if g.decoder is not None]


def test_every_message_has_its_golden_file_and_no_file_is_stale() -> None:
    on_disk = set(gf.stored())
    assert on_disk == set(gf.BY_NAME), (
        f"missing: {sorted(set(gf.BY_NAME) - on_disk)}, stale: {sorted(on_disk - set(gf.BY_NAME))}; "
        "run tests/data/frames/regen.py"
    )


@pytest.mark.parametrize(("entry", "desc", "encode"), ENCODINGS)
def test_the_product_encoder_makes_exactly_the_golden_bytes(
    entry: gf.Golden, desc: str, encode: Callable[[], bytes]
) -> None:
    want = gf.read(entry.name)
    got = encode()
    assert got == want, (
        f"{desc} makes other bytes for {entry.name} ({entry.what}) than tests/data/frames/{entry.name}.hex: "
        f"{_first_difference(got, want)}. {_why(entry)}"
    )


@pytest.mark.parametrize("entry", DECODED)
def test_the_product_decoder_reads_the_golden_bytes_as_the_fixed_message(entry: gf.Golden) -> None:
    assert entry.decoder is not None
    desc, decode = entry.decoder
    try:
        got = decode(gf.read(entry.name))
    except Exception as err:
        pytest.fail(
            f"{desc} refuses tests/data/frames/{entry.name}.hex ({entry.what}): {type(err).__name__}: {err}; "
            f"a peer that sends the stored bytes is no longer understood. {_why(entry)}"
        )
    assert got == entry.message, (
        f"{desc} reads tests/data/frames/{entry.name}.hex ({entry.what}) as another message: a peer that "
        f"sends the stored bytes is no longer understood. {_why(entry)}"
    )


def test_gpulens_frames_match_the_digest_recorded_for_this_protocol_version() -> None:
    frames = {name: gf.read(name) for name in gf.stored() if name in gf.BY_NAME}
    got = gf.family_digest(gf.GPULENS, frames)
    version = stream.PROTOCOL_VERSION
    assert version in GOLDEN_DIGESTS, (
        f"no golden digest recorded for protocol version {version}: add {version}: {got!r} to "
        "GOLDEN_DIGESTS in tests/unit/ipc/test_golden_frames.py (and describe the change in docs/protocol.md)"
    )
    assert got == GOLDEN_DIGESTS[version], (
        f"the golden frames in tests/data/frames no longer match protocol version {version} "
        f"(digest {got}, recorded {GOLDEN_DIGESTS[version]}). {BUMP}"
    )
    assert len(set(GOLDEN_DIGESTS.values())) == len(GOLDEN_DIGESTS), "two protocol versions with the same frames"


def test_kineto_datagrams_match_their_recorded_digest() -> None:
    frames = {name: gf.read(name) for name in gf.stored() if name in gf.BY_NAME}
    got = gf.family_digest(gf.KINETO, frames)
    assert got == KINETO_DIGEST, f"the Kineto golden datagrams changed (digest {got}). {KINETO_FIXED}"


def test_golden_files_say_what_they_are_and_how_they_were_made() -> None:
    for name, path in gf.stored().items():
        text = path.read_text(encoding="ascii")
        assert text.startswith(f"# golden frame {name} ("), path
        assert "# made by: " in text and "regen.py" in text, path
        assert gf.parse(text) == gf.read(name)


def test_every_stream_frame_is_one_whole_frame_of_its_declared_length() -> None:
    for entry in gf.CATALOG:
        if entry.name.startswith("stream-"):
            data = gf.read(entry.name)
            (size,) = stream.HEADER.unpack_from(data)
            assert size == len(data) - stream.HEADER.size, entry.name
            assert msgpack.unpackb(data[stream.HEADER.size :], raw=False)["t"] == stream.to_wire(entry.message)["t"]


def test_stream_encode_of_a_history_differs_from_the_agents_frame_only_in_key_order() -> None:
    # The agent frames history from pre-packed samples (stream_frames.history_frames, the golden
    # bytes); stream.encode writes the same map with "last" after "samples". Both are the format.
    for name in ("stream-history-backfill", "stream-history-reply"):
        entry = gf.BY_NAME[name]
        golden = gf.read(name)
        other = stream.encode(entry.message)
        assert other != golden
        assert gf.decode_frame(other) == entry.message
        body = slice(stream.HEADER.size, None)
        assert msgpack.unpackb(other[body], raw=False) == msgpack.unpackb(golden[body], raw=False)


def _doc_section(doc: str, title: str) -> str:
    start = doc.index(f"\n## {title}\n")
    end = doc.find("\n## ", start + 1)
    return doc[start : end if end >= 0 else len(doc)]


def test_every_message_type_and_request_kind_in_docs_protocol_md_has_golden_frames() -> None:
    doc = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    row = re.compile(r"^\| `([a-z_]+)` \|", re.MULTILINE)
    types = set(row.findall(_doc_section(doc, "Messages")))
    kinds = set(row.findall(_doc_section(doc, "Requests")))
    assert {"hello", "challenge", "auth", "auth_ok", "sample", "history", "request", "response"} <= types
    missing_rows = set(KINDS) - kinds
    assert not missing_rows, (
        f"request kinds of ipc/request_schema.py (KINDS) without a row in docs/protocol.md, 'Requests': "
        f"{sorted(missing_rows)}"
    )
    assert {"history", "profile", "gpumem", "trace", "trace_status", "trace_diagnose", "trace_processes",
            "processes"} <= kinds
    covered = {
        stream.to_wire(g.message)["t"] for g in gf.CATALOG if g.name.startswith("stream-")
    }
    assert types <= covered, f"message types in docs/protocol.md without a golden frame: {sorted(types - covered)}"
    requests = {g.message.kind for g in gf.CATALOG if isinstance(g.message, stream.Request)}
    assert kinds <= requests, f"request kinds in docs/protocol.md without a golden request: {sorted(kinds - requests)}"
    for kind in kinds:
        reply = gf.BY_NAME.get(f"stream-response-{kind}")
        assert reply is not None, f"request kind {kind!r} has no golden response"
        assert isinstance(reply.message, stream.Response) and reply.message.ok
