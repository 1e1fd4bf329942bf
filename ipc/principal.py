"""Who sent a request to the agent, and for which user it may act.

Every viewer connection carries one :class:`Principal`, fixed by how the
peer proved who it is, never by what it says:

- ``peercred`` (the local control socket): the kernel's ``SO_PEERCRED`` uid;
  the peer acts for that uid only (root acts for anyone).
- ``token`` (TCP or TLS with a verified ``--token-file``): the token is the
  agent owner's 0600 secret, so the peer acts with the owner's authority
  (the agent's euid; a root agent's token holder acts for anyone).
- ``stdio`` (``ssh HOST gpulens agent --stdio``): ssh already logged the
  user in as the agent's user, so the owner's authority again.
- ``none`` (TCP without a token configured): samples only -- the hello,
  live samples and ``history``; no trace, profile or file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from gpulens.core.procfs import may_trace

HOW = ("token", "peercred", "stdio", "none")

NOT_AUTHENTICATED = (
    "this connection is not authenticated: requests other than history need --token-file on both sides"
)
"""The refusal a samples-only connection gets for anything but ``history``."""


@dataclass(frozen=True, slots=True)
class Principal:
    """How a peer was identified (``how``) and the uid it may act for (None: samples only)."""

    how: str
    uid: int | None

    def __post_init__(self) -> None:
        if self.how not in HOW:
            raise ValueError(f"principal: unknown identification {self.how!r}")

    @property
    def samples_only(self) -> bool:
        """True when this peer may receive samples and history, nothing else."""
        return self.uid is None

    def may_act_for(self, target_uid: int | None) -> bool:
        """True when this peer may trace or profile a process of ``target_uid``."""
        return self.uid is not None and may_trace(self.uid, target_uid)

    def describe(self) -> str:
        """Short form for logs and refusals, e.g. ``uid 1000 (control socket)``."""
        if self.uid is None:
            return "an unauthenticated connection"
        where = {"token": "token", "peercred": "control socket", "stdio": "stdio"}[self.how]
        return f"uid {self.uid} ({where})"


def owner(how: str) -> Principal:
    """A principal with the agent owner's authority (token or stdio)."""
    return Principal(how, os.geteuid())


def peer(uid: int) -> Principal:
    """A control-socket peer acting for its own ``uid``."""
    return Principal("peercred", uid)


SAMPLES_ONLY = Principal("none", None)
