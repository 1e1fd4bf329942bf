"""PrometheusSource: a whole cluster read from an existing Prometheus server.

``gpulens --prometheus URL [--prom-selector '{cluster="a"}']``. Queries are
batched and bounded: one PromQL query per mapped field across *all* hosts
(ipc/prom_names.py), never one per host, and only for fields whose
metrics Prometheus holds (the metric-name list is re-read every minute). The
latest values come from ``/api/v1/query`` every ``step_s``; the history
window is backfilled once from ``/api/v1/query_range``. When Prometheus is
slow (a poll over ``slow_s``), down or answers garbage, a
:class:`SourceStatusEvent` says so and the last data stays on screen; hosts
that vanish get a :class:`HostStatusEvent`.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

from gpulens.core.errors import ConfigError, ConfigProblem, PrometheusError
from gpulens.core.events import Emit, HostStatusEvent, PanelData, SampleEvent, SourceStatusEvent
from gpulens.core.model import HostSample
from gpulens.ipc.prom_names import MetricMap, escape_label_value, parse_selector, rows_for
from gpulens.sources.prometheus.access import PromAccess, access_from, check_files
from gpulens.sources.prometheus.assemble import assemble
from gpulens.sources.prometheus.client import MAX_RESPONSE_BYTES, PromClient, Series, Vector
from gpulens.sources.prometheus.tally import Answer, Digest, digest

T = TypeVar("T")
log = logging.getLogger(__name__)
NAMES_REFRESH_S = 60.0
STATIC_REFRESH_S = 60.0
"""Sizes and names (MetricMap.tier == "static") are re-read this often."""
MAX_BACKFILL_POINTS = 720
BACKFILL_BUDGET = 2_000_000
"""Most values one backfill fetches (all fields, hosts and steps together)."""
DETAIL_PENDING = "loading (host-screen details arrive with the next poll)"
NOT_BACKFILLED = "not in backfilled history (host-screen detail; live samples have it)"


def _windows() -> dict[str, int]:
    try:
        from gpulens.core.config import WINDOWS
    except ImportError:  # pragma: no cover - collectors used without the CLI package
        return {"5m": 300}
    return dict(WINDOWS)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause CPython's cyclic GC while a poll's ~10,000 sample objects are
    built (tens of ms). They all survive, so collections during the build free
    nothing yet walk them again and again, and promote them into full
    collections; afterwards one young-generation pass takes them all. The
    switch is process-wide and only re-enabled if it was on."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


class PrometheusSource:
    """A :class:`~.source.Source` and :class:`~.source.PanelProvider` over Prometheus."""

    def __init__(
        self,
        url: str,
        selector: str = "",
        cfg: object | None = None,
        *,
        step_s: float | None = None,
        timeout_s: float = 5.0,
        slow_s: float = 2.0,
        rate_window_s: float | None = None,
        backfill: bool = True,
        detail_every: int = 3,
        workers: int = 4,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        poll_timeout_s: float | None = None,
        access: PromAccess | None = None,
    ) -> None:
        """``cfg`` is a gpulens Config (``interval_s``, ``window`` and ``prometheus`` are read).

        ``access``: credentials, CA file and extra headers (default: config.toml's
        ``[prometheus]``); a user and password in ``url`` win and are never shown.

        ``timeout_s`` bounds each whole answer (connect to last byte);
        ``poll_timeout_s`` (default ``2 * timeout_s``) bounds one poll, the
        metric-name list and every field's query together, so a server that
        drips its answers costs a poll at most that long.

        Defaults: ``step_s = max(cfg.interval_s, 5)``, ``rate_window_s =
        max(60, 4 * step_s)`` (a rate needs two scrapes inside it). Fields the
        overview draws are read every poll; host-screen details (clocks, PCIe,
        NVLink, ECC, XID, throttling) every ``detail_every`` polls, sizes and
        names every minute; their last answers fill the polls in between.

        Raises:
            ConfigError: a URL or selector that cannot be used.
        """
        try:
            self._client = PromClient(url, timeout_s=timeout_s, max_bytes=max_response_bytes,
                                      access=access if access is not None else access_from(None, cfg))
            check_files(self._client.access)  # a missing token file: one line at start, not a down host
            self._sel = parse_selector(selector)
        except ValueError as err:
            raise ConfigError(where="--prometheus/--prom-selector", problem=ConfigProblem.BAD_FORMAT,
                              detail=str(err)) from None
        interval = float(getattr(cfg, "interval_s", 1.0))
        self.step_s = step_s if step_s is not None else max(interval, 5.0)
        self.rate_window_s = rate_window_s if rate_window_s is not None else max(60.0, 4 * self.step_s)
        self.window_s = float(_windows().get(str(getattr(cfg, "window", "5m")), 300))
        self.slow_s = slow_s
        self.poll_timeout_s = poll_timeout_s if poll_timeout_s is not None else 2 * timeout_s
        self.detail_every = max(1, detail_every)
        self._backfill = backfill
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._rows: tuple[MetricMap, ...] | None = None
        self._names_at = 0.0
        # tier -> (its rows, their last answers pre-applied, monotonic time read)
        self._cache: dict[str, tuple[tuple[MetricMap, ...], Digest, float]] = {}
        self._hosts: dict[str, HostSample] = {}
        self._down_hosts: set[str] = set()
        self._announced: set[str] = set()
        self._polled = False
        self._healthy: bool | None = None
        self.queries_sent = 0

    @property
    def name(self) -> str:
        """``prometheus <url>`` for the header."""
        return f"prometheus {self._client.url}"

    @property
    def address(self) -> str:
        """The server's URL: how ``gpulens snapshot`` lists it when it cannot be reached."""
        return self._client.url

    @property
    def simulated(self) -> bool:
        """Never simulated: the data is whatever Prometheus holds."""
        return False

    # ---- queries -------------------------------------------------------
    def _current_rows(self, deadline: float | None = None) -> tuple[MetricMap, ...]:
        now = time.monotonic()
        if self._rows is None or now - self._names_at > NAMES_REFRESH_S:
            names = self._client.metric_names(deadline=deadline)
            self.queries_sent += 1
            self._rows = rows_for(names)
            self._names_at = now
        return self._rows

    def _run_all(self, calls: Iterable[tuple[MetricMap, Callable[[], T]]]) -> list[tuple[MetricMap, T]]:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="gpulens-prom")
            pool = self._pool
        jobs = [(row, pool.submit(call)) for row, call in calls]
        self.queries_sent += len(jobs)
        return [(row, fut.result()) for row, fut in jobs]  # first error propagates; order kept

    def fetch_latest(self, quick: bool = False) -> dict[str, HostSample]:
        """One instant query per available field; host -> sample.

        ``quick`` skips host-screen details not fetched yet (they say
        "loading" in ``unavailable``), for a fast first screen. All of it
        shares one deadline, ``poll_timeout_s`` from now.

        Raises:
            PrometheusError: down, slow, garbage, or a rejected query.
        """
        deadline = time.monotonic() + self.poll_timeout_s
        rows = self._current_rows(deadline)
        at = time.time()
        q = self._client.query_pairs
        now = time.monotonic()
        due, skipped = self._due_tiers(rows, quick, now)
        wanted = [r for r in rows if r.tier in due]

        def call(r: MetricMap) -> Callable[[], Vector]:
            return lambda: q(r.query(self._sel, self.rate_window_s), at, deadline=deadline)

        answers: list[tuple[MetricMap, Answer]] = list(self._run_all((r, call(r)) for r in wanted))
        with _gc_paused():
            digests = self._cache_tiers(answers, due, now)
            return assemble(answers, at, skipped=skipped, digests=digests)

    def _due_tiers(self, rows: tuple[MetricMap, ...], quick: bool, now: float) -> tuple[set[str], dict[str, str]]:
        """The tiers to query now (``core`` always; the others when their rows changed or their answers are
        old), and the fields ``quick`` leaves out (those of a detail tier not fetched yet)."""
        due = {"core"}
        skipped: dict[str, str] = {}
        for tier in ("detail", "static"):
            tier_rows = tuple(r for r in rows if r.tier == tier)
            cached = self._cache.get(tier)
            period = STATIC_REFRESH_S if tier == "static" else (self.detail_every - 0.5) * self.step_s
            if quick and tier == "detail" and cached is None and tier_rows:
                skipped = {r.field: DETAIL_PENDING for r in tier_rows}
            elif cached is None or cached[0] != tier_rows or now - cached[2] >= period:
                due.add(tier)
        return due, skipped

    def _cache_tiers(self, answers: list[tuple[MetricMap, Answer]], due: set[str], now: float) -> list[Digest]:
        """Keep the digest of each queried non-core tier; the cached digests of those not queried."""
        digests: list[Digest] = []
        for tier in ("detail", "static"):
            if tier in due:
                fresh = [a for a in answers if a[0].tier == tier]
                # detail answers are re-read every few polls: hosts found only there are hosts
                self._cache[tier] = (tuple(a[0] for a in fresh), digest(fresh, tier == "detail"), now)
            elif tier in self._cache:
                digests.append(self._cache[tier][1])
        return digests

    def fetch_range(
        self, start: float, end: float, step_s: float, budget: int = BACKFILL_BUDGET
    ) -> list[dict[str, HostSample]]:
        """History for [start, end]: one range query per overview (``core``) field.

        The step grows so that at most ``budget`` values are fetched in all
        (1,000 hosts x 8 GPUs costs seconds of CPU per million values); names
        and sizes come from the latest answers; host-screen details are not
        backfilled and say so in ``unavailable``.

        Raises:
            PrometheusError: as :meth:`fetch_latest`.
        """
        rows = self._current_rows()
        core = [r for r in rows if r.tier == "core"]
        gpus = sum(len(s.gpus) for s in self._hosts.values())
        series = max(1, gpus * sum(1 for r in core if r.scope == "gpu")
                     + len(self._hosts) * sum(1 for r in core if r.scope != "gpu"))
        points = max(2, min(MAX_BACKFILL_POINTS, budget // series))
        step_s = max(step_s, (end - start) / (points - 1))
        qr = self._client.query_range

        def call(r: MetricMap) -> Callable[[], list[Series]]:
            return lambda: qr(r.query(self._sel, self.rate_window_s), start, end, step_s)

        results = self._run_all((r, call(r)) for r in core)
        by_time: dict[float, list[tuple[MetricMap, Answer]]] = {}
        for row, answer_series in results:  # results keep table order
            per_t: dict[float, list[tuple[dict[str, str], float]]] = {}
            for s in answer_series:
                for t, v in s.points:
                    per_t.setdefault(t, []).append((s.labels, v))
            for t, answer in per_t.items():
                by_time.setdefault(t, []).append((row, answer))
        static = [self._cache["static"][1]] if "static" in self._cache else []
        skipped = {r.field: NOT_BACKFILLED for r in rows if r.tier == "detail"}
        history = []
        for t, ans in sorted(by_time.items()):
            with _gc_paused():  # one snapshot at a time: the pause stays short
                history.append(assemble(ans, t, skipped=skipped, digests=static))
        return history

    # ---- Source ----------------------------------------------------------
    def expected_hosts(self) -> tuple[str, ...]:
        """The hosts Prometheus has data for (those not gone). Before the first
        poll this runs one poll itself, bounded by the timeout.

        Raises:
            PrometheusError: that first poll failed (down, slow, garbage).
        """
        if not self._polled:
            with self._lock:
                if not self._polled:
                    self._hosts = self.fetch_latest()
                    self._polled = True
        return tuple(sorted(set(self._hosts) - self._down_hosts))

    def start(self, emit: Emit) -> None:
        """Start polling in a thread; events go to ``emit``."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(emit,), name="gpulens-prom-poll", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling (waits for the poll in flight, at most the timeout)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._client.timeout_s + 1)
            self._thread = None
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _status(self, emit: Emit, ok: bool, message: str, **details: str) -> None:
        emit(SourceStatusEvent(message=message, ok=ok, time=time.time(), details=details))

    def _loop(self, emit: Emit) -> None:
        first, quick = True, True
        logged = ""
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                with self._lock:
                    samples = self.fetch_latest(quick=quick)
                    self._polled = True
                took = time.monotonic() - began
                self._publish(emit, samples)
                if took > self.slow_s:
                    self._healthy = False
                    self._status(emit, False, f"Prometheus slow: {took:.1f} s per refresh", url=self._client.url)
                elif self._healthy is not True:
                    self._healthy = True
                    self._status(emit, True, f"Prometheus OK: {len(samples)} hosts", url=self._client.url)
                if quick:
                    quick = False
                    if "detail" not in self._cache:
                        continue  # the quick first screen is out: fetch the details at once
                if first and self._backfill and samples:
                    first = False
                    self._do_backfill(emit, min(s.time for s in samples.values()))
            except PrometheusError as err:
                self._healthy = False
                last = "no data yet"
                if self._hosts:
                    newest = max(s.time for s in self._hosts.values())
                    last = f"showing data from {time.strftime('%H:%M:%S', time.localtime(newest))}"
                self._status(emit, False, f"{err}; {last}", kind=err.kind, url=self._client.url)
            except Exception as err:  # last resort of the poll thread: a bug must not end polling
                if self._stop.is_set():
                    break
                message = f"Prometheus source error: {type(err).__name__}: {err}"
                if message != logged:  # once per distinct error, not every poll
                    log.exception("%s", message)
                    logged = message
                self._healthy = False
                self._status(emit, False, message, kind="internal")
            self._stop.wait(max(0.0, self.step_s - (time.monotonic() - began)))

    def _do_backfill(self, emit: Emit, before: float) -> None:
        end = before - self.step_s / 2
        try:
            history = self.fetch_range(end - self.window_s, end, self.step_s)
        except PrometheusError as err:
            self._healthy = False  # the next good poll says OK again
            self._status(emit, False, f"history not loaded: {err}", kind=err.kind)
            return
        for snapshot in history:
            for sample in snapshot.values():
                emit(SampleEvent(sample, backfill=True))

    def _publish(self, emit: Emit, samples: dict[str, HostSample]) -> None:
        now = time.time()
        for host in sorted(set(samples) - self._announced):
            # address=host lets consumers that wait for expected_hosts() match them up
            self._announced.add(host)
            emit(HostStatusEvent(host=host, up=True, time=now, reason="in Prometheus", address=host))
        for host in sorted(set(self._hosts) - set(samples) - self._down_hosts):
            self._down_hosts.add(host)
            emit(HostStatusEvent(host=host, up=False, time=now,
                                 reason="no longer in Prometheus (target down or removed); last data kept"))
        for host in sorted(self._down_hosts & set(samples)):
            self._down_hosts.discard(host)
            emit(HostStatusEvent(host=host, up=True, time=now, reason="back in Prometheus"))
        for sample in samples.values():
            emit(SampleEvent(sample))
        self._hosts = {**self._hosts, **samples}

    # ---- PanelProvider ---------------------------------------------------
    def panel_series(self, expr: str, host: str | None, job: str | None, window_s: float) -> PanelData:
        """Run a user's PromQL over the last ``window_s`` seconds.

        ``$host`` and ``$job`` are replaced by the escaped names (empty when
        None). Several result series are summed point by point; write
        ``sum(...)``/``avg(...)`` to choose. Never raises: any failure is
        returned as ``PanelData(error=...)`` with Prometheus' own message.
        """
        text = expr.replace("$host", escape_label_value(host or "")).replace("$job", escape_label_value(job or ""))
        end = time.time()
        window_s = max(window_s, 1.0)
        try:
            series = self._client.query_range(text, end - window_s, end, max(window_s / 240, 1.0))
        except PrometheusError as err:  # the client turns every failure into one (its module docstring)
            return PanelData(error=str(err))
        total: dict[float, float] = {}
        for s in series:
            for t, v in s.points:
                total[t] = total.get(t, 0.0) + v
        if not series:
            return PanelData(error=f"no data for {text[:80]}")
        return PanelData(points=tuple(sorted(total.items())))
