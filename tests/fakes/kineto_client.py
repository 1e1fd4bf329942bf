"""libkineto's half of the Kineto on-demand datagrams: what a traced program sends and reads back.

gpulens is only ever the daemon side (:mod:`gpulens.ipc.kineto.codec` decodes ``req`` and ``ctxt``
and encodes the replies); these build a program's datagrams and read the config reply, for the
tests, the golden frames and benchmarks/security_soak.py. The wire format is the codec's
(its module docstring), built from its own header and body layouts.

Usage::

    reply = endpoint.handle_datagram(encode_request(ConfigRequest(3, 0, (os.getpid(), 1))))
    assert decode_config_reply(reply) == ""
"""

from __future__ import annotations

import struct

from gpulens.ipc.errors import DatagramProblem, MalformedDatagram
from gpulens.ipc.kineto.codec import (
    CTXT_BODY,
    HEADER_BYTES,
    REQ_FIXED,
    TYPE_CTXT,
    TYPE_REQ,
    ConfigRequest,
    ContextRegistration,
    decode_header,
    encode_header,
)


def encode_request(req: ConfigRequest) -> bytes:
    """A ``req`` datagram: libkineto's poll for on-demand config."""
    body = REQ_FIXED.pack(req.config_type, len(req.pids), req.job_id)
    body += struct.pack(f"<{len(req.pids)}i", *req.pids)
    return encode_header(TYPE_REQ, len(body)) + body


def encode_context(reg: ContextRegistration) -> bytes:
    """A ``ctxt`` datagram: libkineto's registration at GPU init."""
    body = CTXT_BODY.pack(reg.gpu, reg.pid, reg.job_id)
    return encode_header(TYPE_CTXT, len(body)) + body


def decode_config_reply(data: bytes) -> str:
    """The config text of the daemon's ``req`` reply, as libkineto reads it.

    Raises:
        MalformedDatagram: wrong type, bad size, or text that is not UTF-8.
    """
    msg_type, _ = decode_header(data)
    if msg_type != TYPE_REQ:
        raise MalformedDatagram(f"expected a req reply, got {msg_type!r}", problem=DatagramProblem.UNKNOWN_TYPE)
    try:
        return bytes(data[HEADER_BYTES:]).decode("utf-8")
    except UnicodeDecodeError as err:
        raise MalformedDatagram("config reply is not UTF-8", problem=DatagramProblem.BAD_BODY) from err
