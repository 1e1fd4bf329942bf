"""Token challenge-response for agents listening on TCP.

The shared secret (the token file's contents) never crosses the wire:

1. agent -> viewer: ``Challenge(nonce=S)``, 32 fresh random bytes per connection;
2. viewer -> agent: ``AuthResponse(cnonce=C, mac=HMAC-SHA256(token, "viewer" | S | C))``;
3. agent checks the MAC in constant time, refuses a client nonce it has
   already accepted (a replayed response), then answers
   ``AuthOk(mac=HMAC-SHA256(token, "agent" | S | C))`` so the viewer knows
   the agent holds the token too.

A response captured from one connection is useless on another (the agent's
nonce differs), and a replay on a connection with the same server nonce is
caught by the client-nonce memory.

The token is the agent owner's 0600 secret, so a viewer that proves it acts
with the owner's authority (``gpulens.ipc.principal``: a root agent's token
holder may trace anyone); over TCP without a token only samples and
history are served.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import stat
import threading
from collections import OrderedDict
from pathlib import Path

from gpulens.core.errors import ConfigProblem
from gpulens.ipc.errors import AuthError, AuthProblem

NONCE_BYTES = 32
MIN_TOKEN_BYTES = 16
MAX_TOKEN_BYTES = 4096


def load_token(path: str | Path) -> bytes:
    """Read a token file; it must be a regular file of mode 0600 (or stricter).

    Surrounding whitespace is stripped, so ``openssl rand -hex 32 > FILE`` works.

    Raises:
        AuthError: unreadable, group/other-accessible, too short or too long.
    """
    p = Path(path)
    try:
        st = p.stat()
    except OSError as err:
        raise _token_file_error(f"token file {p}: cannot read: {err.strerror}", ConfigProblem.UNREADABLE) from err
    if not stat.S_ISREG(st.st_mode):
        raise _token_file_error(f"token file {p}: not a regular file", ConfigProblem.NOT_REGULAR)
    if st.st_mode & 0o077:
        raise _token_file_error(
            f"token file {p} has mode {stat.S_IMODE(st.st_mode):04o}; it must be readable by "
            f"its owner only: run 'chmod 600 {p}'", ConfigProblem.UNSAFE
        )
    if st.st_size > MAX_TOKEN_BYTES:
        raise _token_file_error(f"token file {p}: larger than {MAX_TOKEN_BYTES} bytes", ConfigProblem.TOO_LARGE)
    try:
        token = p.read_bytes().strip()
    except OSError as err:
        raise _token_file_error(f"token file {p}: cannot read: {err.strerror}", ConfigProblem.UNREADABLE) from err
    if len(token) < MIN_TOKEN_BYTES:
        raise _token_file_error(
            f"token file {p}: token shorter than {MIN_TOKEN_BYTES} bytes "
            "(make one with 'openssl rand -hex 32')", ConfigProblem.OUT_OF_RANGE
        )
    return token


def _token_file_error(message: str, why: ConfigProblem) -> AuthError:
    """A token file refused: ``why`` as its ``file_problem``."""
    return AuthError(message, problem=AuthProblem.TOKEN_FILE, file_problem=why)


def new_nonce() -> bytes:
    """32 bytes from the OS's secure random source."""
    return secrets.token_bytes(NONCE_BYTES)


def _mac(token: bytes, label: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    return hmac.new(token, label + b"\0" + server_nonce + client_nonce, hashlib.sha256).digest()


def viewer_proof(token: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    """The MAC a viewer sends to prove it holds ``token``."""
    return _mac(token, b"gpulens-viewer", server_nonce, client_nonce)


def agent_proof(token: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    """The MAC an agent sends back to prove it holds ``token`` too."""
    return _mac(token, b"gpulens-agent", server_nonce, client_nonce)


class ReplayGuard:
    """Remembers the last ``capacity`` accepted client nonces (thread-safe)."""

    def __init__(self, capacity: int = 65536) -> None:
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def check_and_remember(self, client_nonce: bytes) -> bool:
        """True the first time ``client_nonce`` is seen, False on a replay."""
        with self._lock:
            if client_nonce in self._seen:
                return False
            self._seen[client_nonce] = None
            if len(self._seen) > self._capacity:
                self._seen.popitem(last=False)
            return True


def verify_viewer(
    token: bytes, server_nonce: bytes, client_nonce: bytes, mac: bytes, guard: ReplayGuard
) -> None:
    """Check a viewer's response; raises AuthError saying what was wrong."""
    if len(client_nonce) != NONCE_BYTES:
        raise AuthError(f"client nonce must be {NONCE_BYTES} bytes, got {len(client_nonce)}", problem=AuthProblem.BAD_NONCE)
    if not hmac.compare_digest(mac, viewer_proof(token, server_nonce, client_nonce)):
        raise AuthError("wrong token (the viewer's --token-file does not match the agent's)",
                        problem=AuthProblem.WRONG_TOKEN)
    if not guard.check_and_remember(client_nonce):
        raise AuthError("replayed authentication response (client nonce already used)", problem=AuthProblem.REPLAYED)


def verify_agent(token: bytes, server_nonce: bytes, client_nonce: bytes, mac: bytes) -> None:
    """Check the agent's proof; raises AuthError if it does not hold the token."""
    if not hmac.compare_digest(mac, agent_proof(token, server_nonce, client_nonce)):
        raise AuthError("the agent could not prove it holds the token (wrong agent, or wrong token)",
                        problem=AuthProblem.AGENT_PROOF_WRONG)
