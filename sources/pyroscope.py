"""Reading a stored profile from Pyroscope (``gpulens flame --pyroscope URL --query …``; issue 32 item 14).

``GET /pyroscope/render?query=…&from=…&until=…&format=json`` answers a
flamebearer (:mod:`gpulens.analysis.flame.flamebearer`). One request, a
deadline, at most :data:`MAX_BYTES` read, http(s) only; a bearer token from a
file as for ``--pyroscope`` on the agent.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from gpulens.core.errors import ConfigError, ConfigProblem, GpulensError

MAX_BYTES = 64 << 20
TIMEOUT_S = 15.0


class PyroscopeError(GpulensError):
    """The server could not be asked, or answered something that is not a profile."""

    title = "Pyroscope error"


def render_url(base: str, query: str, start: str, until: str) -> str:
    """The render request for ``query`` between ``start`` and ``until`` (unix seconds or Pyroscope's ``now-1h``)."""
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(where=f"--pyroscope {base!r}", expected="http(s)://HOST[:PORT]", got=base,
                          problem=ConfigProblem.BAD_FORMAT, detail="expected http(s)://HOST[:PORT]")
    q = urllib.parse.urlencode({"query": query, "from": start, "until": until, "format": "json"})
    return f"{base.rstrip('/')}/pyroscope/render?{q}"


def render(base: str, query: str, start: str = "now-1h", until: str = "now", token: str = "") -> object:
    """The JSON document Pyroscope renders for ``query``.

    Raises:
        ConfigError: a URL that is not http(s).
        PyroscopeError: no answer, an HTTP error, over the size bound, not JSON.
    """
    req = urllib.request.Request(render_url(base, query, start, until), headers={"Accept": "application/json"})
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            body = resp.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as err:
        raise PyroscopeError(f"{base}: HTTP {err.code} {err.reason}") from None
    except (urllib.error.URLError, OSError) as err:
        raise PyroscopeError(f"{base}: {getattr(err, 'reason', err)}") from None
    if len(body) > MAX_BYTES:
        raise PyroscopeError(f"{base}: the answer is over {MAX_BYTES >> 20} MiB")
    try:
        doc: object = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise PyroscopeError(f"{base}: the answer is not JSON: {str(err)[:100]}") from None
    return doc
