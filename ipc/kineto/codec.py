"""Sans-IO codec for Kineto's on-demand IPC datagrams (the dynolog protocol).

Wire format (native little-endian, x86-64), one datagram per message::

    header (40 bytes): uint64 size   body length in bytes
                       char[32] type NUL-terminated ("req", "ctxt")
    req  body (client): int32 config_type, int32 n, int64 job_id, n x int32 pids
    req  body (daemon): config text, UTF-8, no NUL (empty = nothing to do)
    ctxt body (client): int32 gpu, int32 pid, int64 job_id
    ctxt body (daemon): int32 number of processes registered

This module is the daemon's side: it decodes what a client sends and encodes the
replies (a client's side, for the tests, is tests/fakes/kineto_client.py); sockets
live in :mod:`gpulens.ipc.kineto.endpoint`. Every decoder bounds sizes and raises
:class:`~gpulens.ipc.errors.MalformedDatagram` naming what was wrong.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from gpulens.ipc.errors import DatagramProblem, MalformedDatagram

HEADER = struct.Struct("<Q32s")
HEADER_BYTES = HEADER.size  # 40
REQ_FIXED = struct.Struct("<iiq")
CTXT_BODY = struct.Struct("<iiq")
CTXT_REPLY = struct.Struct("<i")
# A real request carries the pid and its ancestors (a few dozen at most);
# a Linux pid chain cannot exceed the pid limit, but 4096 is plenty and bounds work.
MAX_PIDS = 4096
MAX_DATAGRAM_BYTES = 64 * 1024
MAX_CONFIG_BYTES = MAX_DATAGRAM_BYTES - HEADER_BYTES
TYPE_REQ = "req"
TYPE_CTXT = "ctxt"


@dataclass(frozen=True, slots=True)
class ConfigRequest:
    """A client's poll for on-demand config: ``pids[0]`` is the requester, then ancestors."""

    config_type: int
    job_id: int
    pids: tuple[int, ...]

    @property
    def pid(self) -> int:
        """The polling process (first pid); 0 when the client sent none."""
        return self.pids[0] if self.pids else 0


@dataclass(frozen=True, slots=True)
class ContextRegistration:
    """A client's registration at GPU init (CUDA builds only)."""

    gpu: int
    pid: int
    job_id: int


Message = ConfigRequest | ContextRegistration


def encode_header(msg_type: str, body_size: int) -> bytes:
    """Build a 40-byte header; raises ValueError for a type longer than 31 bytes."""
    raw = msg_type.encode("ascii")
    if len(raw) > 31:
        raise ValueError(f"message type {msg_type!r} longer than 31 bytes")
    if body_size < 0:
        raise ValueError("negative body size")
    return HEADER.pack(body_size, raw)


def decode_header(data: bytes) -> tuple[str, int]:
    """Return ``(type, body_size)``; raises MalformedDatagram when short or inconsistent."""
    if len(data) < HEADER_BYTES:
        raise MalformedDatagram(f"datagram of {len(data)} bytes is shorter than the 40-byte header",
                                problem=DatagramProblem.SHORT_HEADER)
    size, raw_type = HEADER.unpack_from(data)
    nul = raw_type.find(b"\0")
    if nul < 0:
        raise MalformedDatagram("message type is not NUL-terminated", problem=DatagramProblem.BAD_TYPE)
    try:
        msg_type = raw_type[:nul].decode("ascii")
    except UnicodeDecodeError as err:
        raise MalformedDatagram("message type is not ASCII", problem=DatagramProblem.BAD_TYPE) from err
    if size != len(data) - HEADER_BYTES:
        raise MalformedDatagram(
            f"header says {size} body bytes but the datagram carries {len(data) - HEADER_BYTES}",
            problem=DatagramProblem.SIZE_MISMATCH,
        )
    return msg_type, size


def decode(data: bytes) -> Message:
    """Parse one client datagram (``req`` or ``ctxt``).

    Raises:
        MalformedDatagram: short header, a size field that disagrees with the
            datagram length, a pid count that overruns the body or exceeds
            MAX_PIDS, trailing bytes, or an unknown type.
    """
    if len(data) > MAX_DATAGRAM_BYTES:
        raise MalformedDatagram(f"datagram of {len(data)} bytes exceeds {MAX_DATAGRAM_BYTES}",
                                problem=DatagramProblem.TOO_LARGE)
    msg_type, size = decode_header(data)
    body = memoryview(data)[HEADER_BYTES:]
    if msg_type == TYPE_REQ:
        if size < REQ_FIXED.size:
            raise MalformedDatagram(f"req body of {size} bytes is shorter than {REQ_FIXED.size}",
                                    problem=DatagramProblem.BAD_BODY)
        config_type, n, job_id = REQ_FIXED.unpack_from(body)
        if n < 0 or n > MAX_PIDS:
            raise MalformedDatagram(f"req pid count {n} outside 0..{MAX_PIDS}", problem=DatagramProblem.BAD_BODY)
        if REQ_FIXED.size + 4 * n != size:
            raise MalformedDatagram(
                f"req pid count {n} needs {REQ_FIXED.size + 4 * n} body bytes, got {size}",
                problem=DatagramProblem.BAD_BODY,
            )
        pids = struct.unpack_from(f"<{n}i", body, REQ_FIXED.size)
        return ConfigRequest(config_type=config_type, job_id=job_id, pids=tuple(pids))
    if msg_type == TYPE_CTXT:
        if size != CTXT_BODY.size:
            raise MalformedDatagram(f"ctxt body must be {CTXT_BODY.size} bytes, got {size}",
                                    problem=DatagramProblem.BAD_BODY)
        gpu, pid, job_id = CTXT_BODY.unpack_from(body)
        return ContextRegistration(gpu=gpu, pid=pid, job_id=job_id)
    raise MalformedDatagram(f"unknown message type {msg_type!r}", problem=DatagramProblem.UNKNOWN_TYPE)


def encode_config_reply(config: str) -> bytes:
    """The daemon's answer to ``req``: config text (empty = nothing to do).

    Raises:
        ValueError: config text larger than MAX_CONFIG_BYTES or containing NUL.
    """
    body = config.encode("utf-8")
    if len(body) > MAX_CONFIG_BYTES:
        raise ValueError(f"config of {len(body)} bytes exceeds {MAX_CONFIG_BYTES}")
    if b"\0" in body:
        raise ValueError("config text contains NUL")
    return encode_header(TYPE_REQ, len(body)) + body


def encode_context_reply(count: int) -> bytes:
    """The daemon's answer to ``ctxt``: the number of processes registered."""
    return encode_header(TYPE_CTXT, CTXT_REPLY.size) + CTXT_REPLY.pack(count)
