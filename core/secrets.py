"""Credential files (a Prometheus or Pyroscope bearer token, a password): read once, never shown."""

from __future__ import annotations

from gpulens.core.errors import ConfigError, ConfigProblem

MAX_SECRET_BYTES = 64 * 1024
"""A token or password file larger than this is not one."""


def read_secret(path: str, what: str, owner: str) -> str:
    """The first line of a credential file, stripped; errors name ``owner``, ``what`` and the file, never its text.

    Raises:
        ConfigError: unreadable, too large, or empty.
    """
    where = f"{owner} {what} {path}"  # the fields name the file, never its text (no ``got``)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_SECRET_BYTES + 1)
    except OSError as err:
        raise ConfigError(where=where, expected=f"a readable {what}", problem=ConfigProblem.UNREADABLE,
                          detail=f"cannot read: {err.strerror or type(err).__name__}") from None
    if len(raw) > MAX_SECRET_BYTES:
        raise ConfigError(where=where, expected=f"at most {MAX_SECRET_BYTES} bytes", problem=ConfigProblem.TOO_LARGE,
                          detail=f"larger than {MAX_SECRET_BYTES} bytes; not a {what}")
    lines = raw.decode("utf-8", "replace").splitlines()
    text = lines[0].strip() if lines else ""
    if not text or any(c in text for c in "\r\n\0"):
        raise ConfigError(where=where, expected="the secret on its first line", problem=ConfigProblem.MISSING,
                          detail="empty (expected the secret on its first line)")
    return text
