"""Client for a running dynolog daemon's JSON RPC (TCP port 1778).

Used when dynolog already holds the Kineto daemon name: gpulens then asks
dynolog to hand the config over instead of serving the name itself.
Framing: native-endian int32 length, then that many bytes of JSON, both ways.
Port 1778 is unprivileged: any local user can listen on it, so
:func:`listener_uid` tells who does (from /proc/net/tcp) before a trace
config is sent there.
"""

from __future__ import annotations

import json
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulens.ipc.errors import DynologRpcError

DEFAULT_PORT = 1778
LENGTH = struct.Struct("=i")
MAX_REPLY_BYTES = 1 << 20


def encode_frame(payload: dict[str, Any]) -> bytes:
    """Length-prefixed JSON frame."""
    raw = json.dumps(payload).encode("utf-8")
    return LENGTH.pack(len(raw)) + raw


def decode_reply(raw: bytes) -> dict[str, Any]:
    """Parse a reply body; raises DynologRpcError when it is not a JSON object."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise DynologRpcError(f"dynolog replied with something that is not JSON: {err}") from err
    if not isinstance(value, dict):
        raise DynologRpcError("dynolog's reply is not a JSON object")
    return value


@dataclass(frozen=True, slots=True)
class DynologClient:
    """Talks to dynolog on ``host:port``; each call opens one short connection."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    timeout_s: float = 5.0

    def call(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Send one request and return the decoded reply.

        Raises:
            DynologRpcError: connection refused, short or oversized reply, bad JSON.
        """
        try:
            with socket.create_connection((self.host, self.port), timeout=self.timeout_s) as conn:
                conn.sendall(encode_frame(payload))
                (size,) = LENGTH.unpack(_read_exact(conn, LENGTH.size))
                if not 0 <= size <= MAX_REPLY_BYTES:
                    raise DynologRpcError(f"dynolog reply length {size} out of bounds")
                return decode_reply(_read_exact(conn, size))
        except OSError as err:
            raise DynologRpcError(f"cannot reach dynolog at {self.host}:{self.port}: {err}") from err

    def set_kineto_on_demand_request(
        self, config: str, *, pids: tuple[int, ...] = (), job_id: int = 0, process_limit: int = 3
    ) -> list[int]:
        """Ask dynolog to hand ``config`` to matching processes; returns the matched pids."""
        reply = self.call(
            {
                "fn": "setKinetOnDemandRequest",
                "config": config,
                "job_id": job_id,
                "pids": list(pids),
                "process_limit": process_limit,
            }
        )
        matched = reply.get("processesMatched", [])
        if not isinstance(matched, list) or not all(isinstance(p, int) for p in matched):
            raise DynologRpcError("dynolog's processesMatched is not a list of pids")
        return list(matched)

    def reachable(self) -> bool:
        """True when something accepts connections on the port."""
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5):
                return True
        except OSError:
            return False


def listener_uid(port: int = DEFAULT_PORT, proc: Path = Path("/proc")) -> int | None:
    """The uid owning the TCP socket listening on ``port`` (IPv4 or IPv6), or None when unknown."""
    want = f":{port:04X}"
    for table in ("tcp", "tcp6"):
        try:
            with open(proc / "net" / table, encoding="ascii", errors="replace") as fh:
                next(fh, None)
                for line in fh:
                    parts = line.split()
                    # local_address, state 0A = LISTEN, uid in the 8th column
                    if len(parts) > 7 and parts[1].endswith(want) and parts[3] == "0A":
                        return int(parts[7])
        except (OSError, ValueError):
            continue
    return None


def _read_exact(conn: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = conn.recv(min(65536, size - len(chunks)))
        if not chunk:
            raise DynologRpcError("dynolog closed the connection mid-reply")
        chunks += chunk
    return bytes(chunks)
