"""Several real agents on loopback, one viewer (StreamSource) subscribed to all.

Kill -9 one agent and restart it on the same port: the viewer marks it down,
reconnects, and backfills, so every sample the new agent kept is in the
viewer's series. Cut a connection while the agent lives: the gap is
backfilled from the agent's ring with no hole at all.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulens.core.events import HostStatusEvent, SampleEvent
from gpulens.ipc.errors import RequestFailed
from gpulens.ipc.request_schema import HistoryParams
from gpulens.sources.ask import ask
from gpulens.sources.stream.source import LinkOptions, StreamSource, tcp_target
from tests.fakes.agent_helpers import AgentProc, EventLog, Proxy, count_samples, ring_times
from tests.fakes.request_source import RawParams

pytestmark = pytest.mark.slow

REAL = ["--interval", "0.2", "--quiet"]
SIM = ["--interval", "0.1", "--quiet", "--simulated-gpus", "2"]


@pytest.fixture
def agents(gpulens_exe: str, tmp_path: Path) -> Iterator[list[AgentProc]]:
    procs: list[AgentProc] = []
    yield procs
    for p in procs:
        p.stop()


def _viewer(addresses: list[str], **opts: float) -> tuple[StreamSource, EventLog]:
    log = EventLog()
    src = StreamSource([tcp_target(a) for a in addresses], LinkOptions(**opts))  # type: ignore[arg-type]
    src.start(log)
    return src, log


def test_kill9_and_restart_marks_down_reconnects_and_backfills(
    gpulens_exe: str, tmp_path: Path, agents: list[AgentProc]
) -> None:
    for name in ("alpha", "beta", "gamma"):
        agents.append(AgentProc(gpulens_exe, tmp_path, name, extra=REAL))
    src, log = _viewer([a.address for a in agents], backoff_min_s=1.0)
    try:
        for name in ("alpha", "beta", "gamma"):
            def enough(evs: list[Any], n: str = name) -> bool:
                return count_samples(n)(evs) >= 3

            log.wait_for(enough, what=f"samples from {name}")
        # Real collectors ran: the sample has this machine's CPU and memory.
        first = log.samples("alpha")[0].sample
        assert first.memory.total_bytes and first.memory.total_bytes > 0 and not first.simulated

        beta = agents[1]
        old_last = log.samples("beta")[-1].sample.time
        beta.kill9()
        log.wait_for(
            lambda evs: any(isinstance(e, HostStatusEvent) and e.host == "beta" and not e.up for e in evs),
            what="beta marked down",
        )
        down = next(e for e in log.statuses("beta") if not e.up)
        assert down.reason and down.address == beta.address and down.time > 0
        alpha_at_kill = count_samples("alpha")(log.snapshot())

        agents[1] = beta = AgentProc(gpulens_exe, tmp_path, "beta", port=beta.port, extra=REAL)
        log.wait_for(lambda evs: any(e.up for e in log.statuses("beta")[1:]), what="beta back up")
        n_after = len(log.samples("beta"))
        log.wait_for(lambda evs: count_samples("beta")(evs) >= n_after + 5, what="live beta samples")

        series = [e.sample.time for e in log.samples("beta")]
        assert series == sorted(series) and len(series) == len(set(series)), "no duplicates, in order"
        backfilled = [e for e in log.samples("beta") if e.backfill]
        assert backfilled and all(e.sample.time > old_last for e in backfilled)
        # No holes: every sample the restarted agent kept, up to what the
        # viewer has seen, reached the viewer.
        seen = set(series)
        kept = [t for t in ring_times(beta.port) if t <= series[-1]]
        missing = [t for t in kept if t not in seen]
        assert kept and not missing, f"{len(missing)} of {len(kept)} kept samples never reached the viewer"
        # The other agents went on streaming and were never marked down.
        assert count_samples("alpha")(log.snapshot()) > alpha_at_kill
        for name in ("alpha", "gamma"):
            assert all(e.up for e in log.statuses(name))
    finally:
        src.stop()


def test_cut_connection_backfills_with_no_hole_at_all(
    gpulens_exe: str, tmp_path: Path, agents: list[AgentProc]
) -> None:
    agents.append(AgentProc(gpulens_exe, tmp_path, "delta", extra=SIM))
    proxy = Proxy(agents[0].port)
    src, log = _viewer([f"127.0.0.1:{proxy.port}"], backoff_min_s=0.5)
    try:
        log.wait_for(lambda evs: count_samples("delta")(evs) >= 5, what="delta samples")
        proxy.cut()
        log.wait_for(lambda evs: any(not e.up for e in log.statuses("delta")), what="delta down")
        n = len(log.samples("delta"))
        # The agent keeps sampling while the viewer is cut off; let it gather
        # a gap worth backfilling, measured in the agent's own samples.
        start = ring_times(agents[0].port)[-1]
        while ring_times(agents[0].port)[-1] < start + 1.0:
            time.sleep(0.05)
        proxy.resume()
        log.wait_for(lambda evs: any(e.up for e in log.statuses("delta")[1:]), what="delta back up")
        log.wait_for(lambda evs: count_samples("delta")(evs) >= n + 15, what="delta after the cut")
        series = [e.sample.time for e in log.samples("delta")]
        assert any(e.backfill for e in log.samples("delta"))
        kept = [t for t in ring_times(agents[0].port) if series[0] <= t <= series[-1]]
        assert set(kept) <= set(series), "every sample from the first seen to the last seen arrived"
        steps = [round(b - a, 6) for a, b in itertools.pairwise(series)]
        assert set(steps) == {0.1}, f"simulated samples are 0.1 s apart with no hole: {sorted(set(steps))}"
    finally:
        src.stop()
        proxy.close()


def test_requests_history_and_unsupported_kind(
    gpulens_exe: str, tmp_path: Path, agents: list[AgentProc]
) -> None:
    agents.append(AgentProc(gpulens_exe, tmp_path, "eps", extra=SIM))
    src, log = _viewer([agents[0].address])
    try:
        log.wait_for(lambda evs: count_samples("eps")(evs) >= 3, what="eps samples")
        res = ask(src, "eps", HistoryParams(since=0), timeout_s=30).result(timeout=60)
        assert res.answer.count == len(res.samples) >= 3
        assert all(s.host == "eps" for s in res.samples)
        by_address = ask(src, agents[0].address, HistoryParams(since=res.samples[-1].time), 30)
        assert all(s.time > res.samples[-1].time for s in by_address.result(timeout=60).samples)
        with pytest.raises(RequestFailed, match=r"unsupported request kind 'teleport'.*serves: history"):
            src.request("eps", RawParams("teleport"), 30).result(timeout=60)
        with pytest.raises(RequestFailed, match="since must be a number"):
            src.request("eps", RawParams("history", {"since": "yesterday"}), 30).result(timeout=60)
        with pytest.raises(RequestFailed, match="unknown host"):
            src.request("nohost", HistoryParams(), 30).result(timeout=60)
        # The connection survived the bad requests.
        n = count_samples("eps")(log.snapshot())
        log.wait_for(lambda evs: count_samples("eps")(evs) > n, what="samples after bad requests")
    finally:
        src.stop()


def test_never_reached_address_is_reported_down(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src, log = _viewer([f"127.0.0.1:{port}"], backoff_min_s=0.2)
    try:
        log.wait_for(lambda evs: any(isinstance(e, HostStatusEvent) for e in evs), what="down event")
        ev = next(e for e in log.snapshot() if isinstance(e, HostStatusEvent))
        assert (ev.host, ev.up, ev.address) == (f"127.0.0.1:{port}", False, f"127.0.0.1:{port}")
        assert "refused" in ev.reason.lower()
        assert not any(isinstance(e, SampleEvent) for e in log.snapshot())
    finally:
        src.stop()


def test_metrics_port_serves_the_latest_sample(gpulens_exe: str, tmp_path: Path, agents: list[AgentProc]) -> None:
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agents.append(AgentProc(gpulens_exe, tmp_path, "metr", extra=[*SIM, "--metrics-port", str(port)]))
    deadline = time.monotonic() + 60
    while True:
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            if 'host="metr"' in body:
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, "metrics never served"
        time.sleep(0.1)
    assert "gpulens_" in body
