"""Pre-encoded stream frames: a sample packed once, framed for every viewer.

The agent packs each sample map once and wraps the same bytes in a
``sample`` frame for live viewers and in ``history`` frames for backfill
(docs/protocol.md); the result decodes exactly like ``stream.encode`` output.
"""

from __future__ import annotations

import msgpack

from gpulens.ipc import stream

HISTORY_CHUNK = 100
"""Samples per history frame (about 300 KB with 8 GPUs)."""

_packer = msgpack.Packer(use_bin_type=True)


def sample_frame(raw: bytes) -> bytes:
    """A ``sample`` frame around an already packed sample map."""
    body: bytes = _packer.pack_map_header(2) + _packer.pack("t") + _packer.pack("sample") + _packer.pack("sample") + raw
    return stream.HEADER.pack(len(body)) + body


def history_frames(request_id: int, raws: list[bytes]) -> list[bytes]:
    """``history`` frames (chunks of HISTORY_CHUNK) around packed sample maps."""
    frames = []
    chunks = [raws[i : i + HISTORY_CHUNK] for i in range(0, len(raws), HISTORY_CHUNK)] or [[]]
    for n, chunk in enumerate(chunks):
        last = n == len(chunks) - 1
        body = (
            _packer.pack_map_header(4)
            + _packer.pack("t") + _packer.pack("history")
            + _packer.pack("id") + _packer.pack(request_id)
            + _packer.pack("last") + _packer.pack(last)
            + _packer.pack("samples") + _packer.pack_array_header(len(chunk))
            + b"".join(chunk)
        )
        frames.append(stream.HEADER.pack(len(body)) + body)
    return frames


def pack_sample(data: object) -> bytes:
    """The msgpack bytes of one plain-data sample map (``serialize.sample_to_dict`` output)."""
    raw: bytes = _packer.pack(data)
    return raw
