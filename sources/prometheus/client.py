"""A small, bounded client for the Prometheus HTTP API (urllib only).

Every call is bounded in time and size. The timeout is a deadline for the
whole answer: connecting, the headers and the last byte of the body (each
socket read may wait only for the time left, so a server dripping a byte
every few seconds is cut off at the deadline, not fed forever); a caller may
pass an earlier ``deadline`` shared by several calls (one poll). The body may
not exceed ``max_bytes`` (:data:`MAX_RESPONSE_BYTES`; ``Content-Length`` is
checked before reading, then every chunk), an answer may not hold more than
:data:`MAX_SERIES` series nor a range answer more than
:data:`MAX_RANGE_SAMPLES` samples, all checked before the answer is decoded
into objects. Every answer is checked before use: anything that is not the
documented JSON shape becomes a :class:`PrometheusError` of kind
``garbage`` with a short description, a refused or unreachable server one of
kind ``down``, a timeout one of kind ``slow``, and Prometheus' own error (bad
PromQL, ...) one of kind ``query`` carrying Prometheus' message verbatim.
"""

from __future__ import annotations

import http.client
import itertools
import json
import math
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from gpulens.core.errors import ConfigError, PrometheusError
from gpulens.sources.prometheus.access import PromAccess, with_url_credentials
from gpulens.sources.prometheus.deadline import DeadlineHTTPHandler, DeadlineHTTPSHandler

MAX_RESPONSE_BYTES = 64 * 1024 * 1024
MAX_SERIES = 500_000
MAX_POINTS = 11_000
"""Prometheus itself refuses range queries of more than 11,000 points per series."""
MAX_RANGE_SAMPLES = 4_000_000
"""Samples in one range answer: twice the most a backfill asks for (prom_source.BACKFILL_BUDGET)."""
READ_CHUNK = 1 << 20

Labels = dict[str, str]


@dataclass(frozen=True, slots=True)
class Series:
    """One series of an answer: labels and (unix time, value) points, oldest first."""

    labels: Labels
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True, slots=True, repr=False)
class Vector:
    """An instant-query answer as two parallel lists, labels and values.

    Iterating yields ``(labels, value)`` pairs. Kept as lists rather than a
    list of pairs because a poll decodes ~50,000 series: pairs would be as
    many objects for CPython's cyclic garbage collector to walk, lists of
    (untracked) string maps and floats are not.
    """

    labels: list[Labels]
    values: list[float]

    def __iter__(self) -> Iterator[tuple[Labels, float]]:
        return zip(self.labels, self.values, strict=True)

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return f"Vector({list(self)!r:.200})"


# Typed shape of a successful instant-query answer, decoded by msgspec. gc=False:
# these never form cycles, so the collector need not track the ~50,000 a poll makes.
class _Point(msgspec.Struct, array_like=True, gc=False):
    t: float
    v: str


class _Item(msgspec.Struct, gc=False):
    metric: dict[str, str]
    value: _Point


class _VectorData(msgspec.Struct, gc=False):
    result_type: str = msgspec.field(name="resultType")
    result: list[_Item] = msgspec.field(default_factory=list)


class _VectorDoc(msgspec.Struct, gc=False):
    status: str
    data: _VectorData


_VECTOR_DECODER = msgspec.json.Decoder(_VectorDoc)


def _garbage(what: str) -> PrometheusError:
    return PrometheusError("garbage", f"Prometheus answered garbage: {what}")


class _Skip(msgspec.Struct, gc=False):
    """Any JSON object, its fields skipped: 16 bytes per series to count them."""


class _CountData(msgspec.Struct, gc=False):
    result: list[_Skip] = msgspec.field(default_factory=list)


class _CountDoc(msgspec.Struct, gc=False):
    data: _CountData = msgspec.field(default_factory=_CountData)


_COUNT_DECODER = msgspec.json.Decoder(_CountDoc)


def _few_enough_series(body: bytes) -> bool:
    """Refuse an answer of more than MAX_SERIES series before decoding it into objects.

    Every series is an object holding a ``metric`` object, so the text has at
    least two ``{`` per series: only a body with more than that many is
    counted exactly (without building the series). False: the body is not
    the documented shape, so the typed fast path must not run (the checked
    path, bounded by its own object count, says what is wrong).
    """
    if body.count(b"{") <= 2 * MAX_SERIES + 2:
        return True
    try:
        n = len(_COUNT_DECODER.decode(body).data.result)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return False
    if n > MAX_SERIES:
        raise _garbage(f"more than {MAX_SERIES} series in one answer (the series limit); "
                       "narrow the query with --prom-selector")
    return True


def _labels(obj: object) -> Labels:
    if not isinstance(obj, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in obj.items()
    ):
        raise _garbage("series labels are not a string map")
    return obj


def _point(obj: object) -> tuple[float, float]:
    if not isinstance(obj, list) or len(obj) != 2 or not isinstance(obj[1], str):
        raise _garbage("a sample is not [time, \"value\"]")
    try:
        t, v = float(obj[0]), float(obj[1])
    except (TypeError, ValueError) as err:
        raise _garbage(f"a sample value is not a number ({obj[1]!r:.40})") from err
    if not math.isfinite(t):
        raise _garbage("a sample time is not finite")
    return t, v


class _TooMany(Exception):
    pass


def _loads(body: bytes, max_objects: int) -> object:
    """``json.loads`` that stops once it has built more than ``max_objects`` objects."""
    counter = itertools.count(1)

    def hook(obj: dict[str, Any]) -> dict[str, Any]:
        if next(counter) > max_objects:
            raise _TooMany
        return obj

    doc: object = json.loads(body, object_hook=hook)
    return doc


def _result(body: bytes, result_type: str) -> list[Any]:
    """The answer's ``data.result``: decoded JSON, its items checked by the caller."""
    if result_type == "matrix" and body.count(b"[") > MAX_RANGE_SAMPLES:
        raise _garbage(f"more than {MAX_RANGE_SAMPLES} samples in one range answer (the sample limit); "
                       "ask for a shorter window or a longer step")
    try:
        doc = _loads(body, 2 * MAX_SERIES + 2)  # a series is an object with a 'metric' object
    except _TooMany:
        raise _garbage(f"more than {MAX_SERIES} series in one answer (the series limit); "
                       "narrow the query with --prom-selector") from None
    except RecursionError:
        raise _garbage("JSON nested deeper than Python's recursion limit") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise _garbage(f"not JSON ({len(body)} bytes starting {body[:40]!r})") from err
    if not isinstance(doc, dict):
        raise _garbage("top level is not an object")
    if doc.get("status") == "error":
        raise PrometheusError("query", str(doc.get("error", "unknown error"))[:500])
    data = doc.get("data")
    if doc.get("status") != "success" or not isinstance(data, dict):
        raise _garbage("no 'status: success' with 'data'")
    rtype, result = data.get("resultType"), data.get("result")
    if rtype == "scalar" and result_type == "vector":
        return [{"metric": {}, "value": result}]
    if rtype != result_type or not isinstance(result, list):
        raise _garbage(f"expected a {result_type}, got {rtype!r}")
    if len(result) > MAX_SERIES:
        raise _garbage(f"{len(result)} series (limit {MAX_SERIES})")
    return result


def _fast_vector(body: bytes) -> Vector | None:
    """The common case, a well-formed vector, decoded by msgspec straight into
    typed objects; None for anything else (the checked path then decides)."""
    try:
        doc = _VECTOR_DECODER.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    data = doc.data
    if doc.status != "success" or data.result_type != "vector" or len(data.result) > MAX_SERIES:
        return None
    items = data.result
    try:
        values = [float(item.value.v) for item in items]  # "NaN", "+Inf": float() reads them
    except ValueError:
        return None
    return Vector([item.metric for item in items], values)


def parse_vector(body: bytes) -> Vector:
    """Decode an instant-query body into (labels, value) pairs: the fast path
    for thousands of series (no per-series objects kept).

    Raises:
        PrometheusError: ``query`` for Prometheus' own error, else ``garbage``.
    """
    fast = _fast_vector(body) if _few_enough_series(body) else None
    if fast is not None:
        return fast
    result = _result(body, "vector")
    try:
        out = [(item["metric"], float(item["value"][1])) for item in result]
    except (TypeError, KeyError, IndexError, ValueError) as err:
        raise _garbage(f"a vector sample is malformed ({type(err).__name__}: {err})"[:200]) from err
    for labels, _ in out:
        if type(labels) is not dict or not all(type(v) is str for v in labels.values()):
            raise _garbage("series labels are not a string map")
    return Vector([labels for labels, _ in out], [value for _, value in out])


def parse_answer(body: bytes, result_type: str) -> list[Series]:
    """Decode a ``/api/v1/query`` or ``query_range`` body (``vector`` or ``matrix``).

    Raises:
        PrometheusError: ``query`` for Prometheus' own error, else ``garbage``.
    """
    result = _result(body, result_type)
    out: list[Series] = []
    for item in result:
        if not isinstance(item, dict):
            raise _garbage("a series is not an object")
        labels = _labels(item.get("metric", {}))
        if result_type == "vector":
            out.append(Series(labels, (_point(item.get("value")),)))
        else:
            values = item.get("values")
            if not isinstance(values, list) or len(values) > MAX_POINTS:
                raise _garbage("a range series has no (or too many) values")
            out.append(Series(labels, tuple(_point(p) for p in values)))
    return out


class PromClient:
    """GET requests to one Prometheus server, bounded in time and size."""

    def __init__(self, url: str, timeout_s: float = 5.0, max_bytes: int = MAX_RESPONSE_BYTES,
                 access: PromAccess | None = None) -> None:
        """``url`` is the server's base (``http://host:9090``, ``http://user:password@host:9090``);
        ``timeout_s`` bounds each whole answer (connect, headers, body), ``max_bytes`` its
        body; ``access`` gives credentials, a CA file and extra headers. A user and password
        in the URL are taken out of it: :attr:`url` is safe to show.

        Raises:
            ValueError: a URL that is not http(s)://host[:port][/path] (the message
                never repeats a password).
            ConfigError: a CA file that cannot be used.
        """
        clean, self._access = with_url_credentials(access or PromAccess(), url)
        parts = urllib.parse.urlsplit(clean)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"not an http(s) URL: {clean!r} (expected e.g. http://prometheus:9090)")
        self.url = clean.rstrip("/")
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._ssl = self._access.ssl_context()

    @property
    def access(self) -> PromAccess:
        """The credentials in use (their ``repr`` hides the password)."""
        return self._access

    def _get(self, path: str, params: dict[str, str], deadline: float | None = None) -> bytes:
        start = time.monotonic()
        end = start + self.timeout_s if deadline is None else min(deadline, start + self.timeout_s)
        slow = PrometheusError("slow", f"Prometheus slow: no answer in {round(max(end - start, 0.0), 1):g} s")
        if end <= start:
            raise slow
        full = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:  # read at each request, as Prometheus does: a rotated token is picked up
            creds = self._access.request_headers()
        except ConfigError as err:
            raise PrometheusError("auth", str(err)) from None
        headers = {**creds, "Accept": "application/json", "Accept-Encoding": "identity"}
        req = urllib.request.Request(full, headers=headers)
        opener = urllib.request.build_opener(DeadlineHTTPHandler(end), DeadlineHTTPSHandler(end, self._ssl))
        try:
            with opener.open(req, timeout=end - start) as resp:
                return self._read(resp, slow)
        except urllib.error.HTTPError as err:
            body = self._read(err, slow)
            if err.code in (400, 422, 503) and body.lstrip().startswith(b"{"):
                return body  # Prometheus' JSON error, decoded by the caller
            if err.code in (401, 403):
                raise PrometheusError("auth", f"Prometheus refused access: HTTP {err.code} {err.reason} ("
                                      f"{'credentials rejected' if 'Authorization' in creds else 'no credentials sent'}; "
                                      "--prom-bearer-token-file, --prom-user/--prom-password-file or "
                                      "[prometheus] in config.toml)") from None
            raise PrometheusError("garbage", f"Prometheus answered HTTP {err.code} {err.reason}") from err
        except TimeoutError as err:
            raise slow from err
        except urllib.error.URLError as err:
            if isinstance(err.reason, (TimeoutError, socket.timeout)):
                raise slow from err
            raise PrometheusError("down", f"Prometheus down: {self.url}: {err.reason}") from err
        except (ConnectionError, OSError) as err:
            raise PrometheusError("down", f"Prometheus down: {self.url}: {err}") from err
        except (http.client.HTTPException, ValueError) as err:  # bad status line and the like
            raise _garbage(f"not HTTP ({type(err).__name__}: {err})"[:200]) from err

    def _read(self, resp: http.client.HTTPResponse | urllib.error.HTTPError, slow: PrometheusError) -> bytes:
        """The body, in chunks: its declared length first, then every chunk, against ``max_bytes``."""
        declared = resp.headers.get("Content-Length") if resp.headers is not None else None
        if declared is not None and declared.strip().isdigit() and int(declared) > self.max_bytes:
            raise _garbage(f"answer larger than {self.max_bytes} bytes (Content-Length {int(declared)})")
        chunks: list[bytes] = []
        total = 0
        try:
            while total <= self.max_bytes:
                chunk = resp.read(min(READ_CHUNK, self.max_bytes + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
        except TimeoutError as err:
            raise slow from err
        except (OSError, ValueError, http.client.HTTPException) as err:
            raise _garbage(f"the answer broke off ({type(err).__name__})") from err
        if total > self.max_bytes:
            raise _garbage(f"answer larger than {self.max_bytes} bytes")
        return b"".join(chunks)

    def query(self, expr: str, at: float | None = None, *, deadline: float | None = None) -> list[Series]:
        """Instant query (``/api/v1/query``); one point per series.

        ``deadline`` (``time.monotonic()`` seconds) ends the call earlier than
        the timeout, for calls that share one budget.

        Raises:
            PrometheusError: down, slow, garbage, or Prometheus' error for ``expr``.
        """
        params = {"query": expr, "timeout": f"{self.timeout_s:g}s"}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return parse_answer(self._get("/api/v1/query", params, deadline), "vector")

    def query_pairs(self, expr: str, at: float | None = None, *, deadline: float | None = None) -> Vector:
        """Instant query as (labels, value) pairs (see :func:`parse_vector`).

        Raises:
            PrometheusError: as :meth:`query`.
        """
        params = {"query": expr, "timeout": f"{self.timeout_s:g}s"}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return parse_vector(self._get("/api/v1/query", params, deadline))

    def query_range(
        self, expr: str, start: float, end: float, step_s: float, *, deadline: float | None = None
    ) -> list[Series]:
        """Range query (``/api/v1/query_range``), at most :data:`MAX_POINTS` steps.

        Raises:
            PrometheusError: as :meth:`query`.
        """
        step_s = max(step_s, (end - start) / (MAX_POINTS - 1), 0.001)
        params = {
            "query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
            "step": f"{step_s:.3f}", "timeout": f"{self.timeout_s:g}s",
        }
        return parse_answer(self._get("/api/v1/query_range", params, deadline), "matrix")

    def metric_names(self, *, deadline: float | None = None) -> set[str]:
        """Every metric name Prometheus holds (``/api/v1/label/__name__/values``).

        Raises:
            PrometheusError: as :meth:`query`.
        """
        body = self._get("/api/v1/label/__name__/values", {}, deadline)
        try:
            doc = _loads(body, 1)
        except _TooMany:
            raise _garbage("metric names are not a list of strings") from None
        except RecursionError:
            raise _garbage("JSON nested deeper than Python's recursion limit") from None
        except (ValueError, UnicodeDecodeError) as err:
            raise _garbage(f"not JSON ({len(body)} bytes starting {body[:40]!r})") from err
        if isinstance(doc, dict) and doc.get("status") == "error":
            raise PrometheusError("query", str(doc.get("error", "unknown error"))[:500])
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
            raise _garbage("metric names are not a list of strings")
        return set(data)
