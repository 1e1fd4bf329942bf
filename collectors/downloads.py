"""Files a request's result brings back from an agent, written chunk by chunk.

Shared by the viewer's links (collectors/stream_link.py) and the local
control-socket client (gpulens/agent_client.py): names are checked, chunks
must arrive in order, and one request may bring back at most
:data:`MAX_DOWNLOAD_BYTES`.
"""

from __future__ import annotations

import re
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any

from gpulens.ipc.errors import ProtocolError
from gpulens.ipc.stream import FileChunk

MAX_DOWNLOAD_BYTES = 4 * 1024**3
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")


class PendingRequest:
    """A request awaiting its response: its future, samples and files so far."""

    def __init__(self, future: Future[Any]) -> None:
        self.future = future
        self.samples: list[Any] = []
        self.files: dict[str, tuple[Path, IO[bytes]]] = {}
        self.bytes = 0

    def write_chunk(self, msg: FileChunk, base: Path, prefix: str) -> None:
        """Append ``msg`` to its file under ``base`` as ``PREFIX-NAME``.

        Raises:
            ProtocolError: an unsafe name, a chunk out of order, or too many bytes.
        """
        if not SAFE_NAME.fullmatch(msg.name) or ".." in msg.name:
            raise ProtocolError(f"unsafe file name from the agent: {msg.name[:60]!r}")
        entry = self.files.get(msg.name)
        if entry is None:
            base.mkdir(parents=True, exist_ok=True)
            # The prefix may come from the peer (its host name): it must never shape the path.
            safe_prefix = re.sub(r"[^A-Za-z0-9_-]", "_", prefix)[:64]
            path = base / f"{safe_prefix}-{msg.name}"
            entry = (path, path.open("wb"))
            self.files[msg.name] = entry
        _path, f = entry
        if f.closed or msg.offset != f.tell():
            raise ProtocolError(f"file chunk for {msg.name!r} out of order")
        self.bytes += len(msg.data)
        if self.bytes > MAX_DOWNLOAD_BYTES:
            raise ProtocolError(f"request {msg.id} sent more than {MAX_DOWNLOAD_BYTES} bytes")
        f.write(msg.data)
        if msg.last:
            f.close()
