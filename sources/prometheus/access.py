"""How to reach a Prometheus that asks who you are: credentials, CA, extra headers.

From flags (``--prom-bearer-token-file``, ``--prom-user`` with
``--prom-password-file``, ``--prom-ca-file``, ``--prom-header 'Name: value'``),
the ``[prometheus]`` table of config.toml (the same keys, Prometheus' own
names: ``bearer_token_file``, ``username``, ``password_file``, ``ca_file``,
``headers``), or the URL itself (``http://user:password@host:9090``). A flag
wins over the file; a user in the URL wins over both.

Secrets never leave this module in text meant for people: :func:`split_url`
takes the user and password out of the URL before it is shown anywhere (the
header, errors, ``snapshot --json``), :class:`PromAccess` hides them from
``repr``, and every error names the file, never its content. Mimir, Thanos
and Cortex want the tenant in ``X-Scope-OrgID``: ``--prom-header
'X-Scope-OrgID: team-a'``.
"""

from __future__ import annotations

import base64
import re
import ssl
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gpulens.core.errors import ConfigError, ConfigProblem
from gpulens.core.secrets import read_secret

_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,256}$")
_RESERVED = frozenset({"authorization", "host", "content-length", "accept-encoding", "connection"})


@dataclass(frozen=True, slots=True)
class PromAccess:
    """Credentials and transport settings for one Prometheus server (secrets kept out of ``repr``)."""

    bearer_token_file: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    """From the URL; a password from a file is read at each use, never kept."""
    password_file: str | None = None
    ca_file: str | None = None
    headers: tuple[tuple[str, str], ...] = ()

    def request_headers(self) -> dict[str, str]:
        """The headers every request carries (``Authorization`` and the extra ones).

        Raises:
            ConfigError: a credential file that cannot be read (named, not quoted).
        """
        out = dict(self.headers)
        if self.bearer_token_file and (self.username or self.password):
            raise ConfigError(where="Prometheus", expected="a bearer token or a user/password",
                              problem=ConfigProblem.CONFLICT,
                              detail="a bearer token and a user/password cannot both be used")
        if self.bearer_token_file:
            out["Authorization"] = f"Bearer {_secret(self.bearer_token_file, 'bearer token file')}"
        elif self.username is not None or self.password is not None or self.password_file:
            password = self.password
            if password is None and self.password_file:
                password = _secret(self.password_file, "password file")
            pair = f"{self.username or ''}:{password or ''}".encode()
            out["Authorization"] = f"Basic {base64.b64encode(pair).decode('ascii')}"
        return out

    def ssl_context(self) -> ssl.SSLContext | None:
        """A verifying context trusting ``ca_file`` (None: the system's default one).

        Raises:
            ConfigError: a CA file that cannot be read or holds no certificate.
        """
        if not self.ca_file:
            return None
        try:
            return ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as err:
            why = getattr(err, "strerror", None) or type(err).__name__
            raise ConfigError(where=f"Prometheus CA file {self.ca_file}", expected="a readable PEM CA file",
                              got=self.ca_file, problem=ConfigProblem.UNREADABLE,
                              detail=f"cannot use it ({why})") from None


def _secret(path: str, what: str) -> str:
    """The first line of a credential file, stripped; errors name the file only."""
    return read_secret(path, what, "Prometheus")


def split_url(url: str) -> tuple[str, str | None, str | None]:
    """``http://u:p@host:9090/x`` -> (``http://host:9090/x``, ``u``, ``p``), percent-decoded.

    The returned URL is safe to show; the user and password are None when absent.

    Raises:
        ValueError: a URL that cannot be split (the message does not repeat it).
    """
    try:
        parts = urllib.parse.urlsplit(url.strip())
        user, password = parts.username, parts.password
        host = parts.hostname or ""
        port = parts.port
    except ValueError as err:
        raise ValueError(f"not a usable URL ({err})") from None
    if user is None and password is None:
        return url.strip(), None, None
    shown = f"[{host}]" if ":" in host else host
    netloc = shown if port is None else f"{shown}:{port}"
    clean = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    unquote = urllib.parse.unquote
    return clean, None if user is None else unquote(user), None if password is None else unquote(password)


def parse_header(text: str, where: str) -> tuple[str, str]:
    """``'X-Scope-OrgID: team-a'`` -> (name, value).

    Raises:
        ConfigError: not ``Name: value``, a name that is not an HTTP token, a
            value with line breaks, or a header gpulens sets itself.
    """
    name, sep, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not sep or not _HEADER_NAME.match(name):
        raise ConfigError(where=where, expected="'Name: value' (e.g. 'X-Scope-OrgID: team-a')", got=text[:80],
                          problem=ConfigProblem.BAD_FORMAT)
    if any(c in value for c in "\r\n\0"):
        raise ConfigError(where=where, expected="a one-line value", got=name, problem=ConfigProblem.BAD_FORMAT,
                          detail=f"header {name}: a value may not hold line breaks")
    if name.lower() in _RESERVED:
        raise ConfigError(where=where, expected="a header gpulens does not set", got=name,
                          problem=ConfigProblem.CONFLICT,
                          detail=f"header {name} is set by gpulens (use the credential options for Authorization)")
    return name, value


class FlagGroup(Protocol):
    """Where flags are added (an ``argparse`` parser or group: sources take no parsed flags, only this)."""

    def add_argument(self, *flags: str, action: str = ..., metavar: str = ..., help: str = ...) -> object:
        """Add one flag."""
        ...


def add_access_flags(group: FlagGroup) -> None:
    """The access flags, next to ``--prometheus`` (TUI and snapshot)."""
    group.add_argument("--prom-bearer-token-file", metavar="FILE",
                       help="send the token in FILE as 'Authorization: Bearer' (default: config [prometheus])")
    group.add_argument("--prom-user", metavar="USER", help="basic-auth user (or http://USER:PASSWORD@host in the URL)")
    group.add_argument("--prom-password-file", metavar="FILE", help="basic-auth password, the first line of FILE")
    group.add_argument("--prom-ca-file", metavar="PEM", help="CA certificates to verify an https:// Prometheus")
    group.add_argument("--prom-header", metavar="'NAME: VALUE'", action="append",
                       help="an extra request header, e.g. 'X-Scope-OrgID: team-a' for Mimir/Thanos (repeatable)")


@dataclass(frozen=True, slots=True)
class PromFlags:
    """The access flags as given (:func:`add_access_flags`; None: not given)."""

    bearer_token_file: str | None = None
    """``--prom-bearer-token-file FILE``."""
    user: str | None = None
    """``--prom-user USER``."""
    password_file: str | None = None
    """``--prom-password-file FILE``."""
    ca_file: str | None = None
    """``--prom-ca-file PEM``."""
    headers: tuple[str, ...] = ()
    """Each ``--prom-header 'NAME: VALUE'``, in order (a later one of a name wins)."""


def access_from(flags: PromFlags | None, cfg: object | None) -> PromAccess:
    """Flags over ``cfg.prometheus`` (config.toml's ``[prometheus]``); the URL's user comes later.

    Raises:
        ConfigError: a malformed ``--prom-header``.
    """
    base = getattr(cfg, "prometheus", None)
    flags = flags or PromFlags()

    def pick(value: str | None, key: str) -> str | None:
        return value if value is not None else getattr(base, key, None)

    headers = dict(getattr(base, "headers", ()) or ())
    for text in flags.headers:
        name, value = parse_header(text, "--prom-header")
        headers[name] = value
    return PromAccess(
        bearer_token_file=pick(flags.bearer_token_file, "bearer_token_file"),
        username=pick(flags.user, "username"),
        password_file=pick(flags.password_file, "password_file"),
        ca_file=pick(flags.ca_file, "ca_file"),
        headers=tuple(headers.items()),
    )


def with_url_credentials(access: PromAccess, url: str) -> tuple[str, PromAccess]:
    """The URL to show and use, and ``access`` with the URL's user and password (they win).

    Raises:
        ValueError: a URL that cannot be split.
    """
    clean, user, password = split_url(url)
    if user is None and password is None:
        return clean, access
    return clean, PromAccess(
        bearer_token_file=access.bearer_token_file, username=user, password=password,
        password_file=access.password_file if password is None else None, ca_file=access.ca_file,
        headers=access.headers,
    )


def check_files(access: PromAccess) -> None:
    """Fail early (at start-up, one clear line) on credential or CA files that cannot be used.

    Raises:
        ConfigError: as :meth:`PromAccess.request_headers` and :meth:`PromAccess.ssl_context`.
    """
    access.request_headers()
    access.ssl_context()
    for path in (access.bearer_token_file, access.password_file):
        if path and not Path(path).is_file():
            raise ConfigError(where=f"Prometheus credential file {path}", expected="a regular file", got=path,
                              problem=ConfigProblem.NOT_REGULAR, detail="not a regular file")
