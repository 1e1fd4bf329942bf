"""PrometheusSource end to end: gpulens exporters on loopback, scraped by the
real Prometheus, read back (directly, through ``gpulens snapshot --prometheus``
and through a real ``gpulens agent --metrics-port``); custom panels."""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpulens.agent.metrics import MetricsServer, serve_metrics
from gpulens.core.events import HostStatusEvent, SampleEvent, SourceEvent, SourceStatusEvent
from gpulens.ipc.prom_names import AMD_NOT_EXPORTED, MIB
from gpulens.sources.prometheus.source import DETAIL_PENDING, NOT_BACKFILLED, PrometheusSource
from tests.fakes.prom_fixtures import (
    MISSING_REASON,
    PromServer,
    free_port,
    prometheus_binary,
    start_prometheus,
    synthetic_sample,
    ticking,
)
from tests.paths import DATA

pytestmark = pytest.mark.prometheus
HOSTS = {"h1": 1, "h2": 2, "h3": 3}


RATE_S = 3.0
"""Rate window of these tests: covered by scrapes (1 s apart) once the cluster is up,
so Prometheus' rate() extrapolates to both ends of it."""


@dataclass
class Cluster:
    prom: PromServer
    exporters: dict[str, MetricsServer]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if prometheus_binary() is None:
        pytest.skip(MISSING_REASON)
    # each scrape sees the host's sample at that moment: its counters grow at the sample's rates
    exporters = {h: serve_metrics(0, h, ticking(h, k)) for h, k in HOSTS.items()}
    prom = start_prometheus(tmp_path_factory.mktemp("prom"),
                            {"gpulens": [f"127.0.0.1:{e.port}" for e in exporters.values()]})
    try:
        prom.wait_targets_up(len(HOSTS))
        prom.wait_query("gpulens_gpu_info", 2 * len(HOSTS))
        # rates need the window covered: more scrapes than RATE_S seconds of them
        prom.wait_query(f"count_over_time(gpulens_cpus[{RATE_S + 2:g}s]) >= {RATE_S + 2:g}", len(HOSTS))
        yield Cluster(prom, exporters)
    finally:
        prom.close()
        for e in exporters.values():
            e.close()


def test_values_read_back_equal_values_exported(cluster: Cluster) -> None:
    src = PrometheusSource(cluster.prom.url, step_s=1, backfill=False, rate_window_s=RATE_S)
    try:
        got = src.fetch_latest()
        assert src.expected_hosts() == ("h1", "h2", "h3")
    finally:
        src.stop()
    assert set(got) == set(HOSTS)
    for host, k in HOSTS.items():
        want, s = synthetic_sample(host, k), got[host]
        assert s.cpu.total_percent == pytest.approx(want.cpu.total_percent, rel=1e-3)
        assert (s.cpu.load_avg_1m, s.cpu.count) == (want.cpu.load_avg_1m, want.cpu.count)
        assert s.memory == want.memory  # swap None stays None (absent, not 0)
        # rate() over the kernel counters: the exporting host's rates (to the ms between a
        # sample's time and Prometheus' scrape time, and whole bytes)
        assert s.network.rx_bytes_per_s == pytest.approx(1000.0 * k, rel=0.01)
        assert s.network.tx_bytes_per_s == pytest.approx(2000.0 * k, rel=0.01)
        assert s.storage.read_bytes_per_s == pytest.approx(4096.0, rel=0.01)
        assert s.storage.write_bytes_per_s == pytest.approx(8192.0 * k, rel=0.01)
        assert s.cache.l2_hit_ratio is None
        assert s.unavailable["cache.l2_hit_ratio"] == want.unavailable["cache.l2_hit_ratio"]
        assert len(s.gpus) == 2
        for g, w in zip(s.gpus, want.gpus, strict=True):
            for name in ("index", "name", "uuid", "mem_used_bytes", "mem_total_bytes", "power_w",
                         "power_limit_w", "temperature_c", "sm_clock_mhz", "mem_clock_mhz",
                         "ecc_corrected", "ecc_uncorrected", "xid_events",
                         "throttle_reasons", "processes", "sm_occupancy_percent", "pcie_tx_bytes_per_s"):
                assert getattr(g, name) == getattr(w, name), (host, g.index, name)
            # integrated by the exporter from the samples it saw, read back with rate()
            assert g.pcie_rx_bytes_per_s == pytest.approx(w.pcie_rx_bytes_per_s, rel=0.01)
            for name in ("utilization_percent", "memory_utilization_percent", "sm_activity_percent",
                         "dram_bw_util_percent"):
                assert getattr(g, name) == pytest.approx(getattr(w, name)), (host, g.index, name)
            assert g.unavailable["pcie_tx_bytes_per_s"] == "NVML: not supported"
        (job,) = s.jobs
        wj = want.jobs[0]
        assert (job.pid, job.user, job.tree_id, job.cmdline, job.job_key, job.start_time) == (
            wj.pid, wj.user, wj.tree_id, wj.cmdline, wj.job_key, wj.start_time)
        assert job.cpu_percent == pytest.approx(150.0)
        assert (job.rss_bytes, dict(job.gpu_mem_bytes)) == (wj.rss_bytes, dict(wj.gpu_mem_bytes))


def burst_bytes(t: float) -> float:
    """Bytes received by time ``t`` of a stream that bursts at 27 MB/s one second in three
    (9.0 MB/s on average): the integral of its rate, exact at any ``t``."""
    whole, frac = divmod(t, 3.0)
    return whole * 27e6 + min(frac, 1.0) * 27e6


def test_rate_of_a_bursty_stream_is_its_true_average(tmp_path: Path) -> None:
    """Read through the real Prometheus, the network rate over a window is the stream's true
    average between the window's first and last scrape, whatever its bursts (a gauge of
    the last second would show 27 or 0 depending on the phase)."""
    import dataclasses

    def latest() -> object:
        t = time.time()
        s = synthetic_sample("burst", 1, t=t)
        nic = dataclasses.replace(s.network.interfaces[0], rx_bytes=round(burst_bytes(t)))
        return dataclasses.replace(s, network=dataclasses.replace(s.network, interfaces=(nic,)))

    exp = serve_metrics(0, "burst", latest)  # type: ignore[arg-type]
    prom = start_prometheus(tmp_path, {"b": [f"127.0.0.1:{exp.port}"]})
    src = PrometheusSource(prom.url, step_s=1, backfill=False, rate_window_s=7)
    try:
        prom.wait_query("count_over_time(gpulens_cpus[9s]) >= 9", 1, timeout_s=40)
        s = src.fetch_latest()["burst"]
        raw = prom.api("/api/v1/query", query='gpulens_network_receive_bytes_total{host="burst"}[7s]',
                       time=f"{s.time:.3f}")["data"]["result"][0]["values"]
        # The exporter reads the stream when it serves a scrape, a little after the scrape's timestamp (tens of
        # ms on a loaded machine): the truth is the stream's average between the window's first and last
        # samples as Prometheus stored them, not the stream at Prometheus' timestamps.
        (t1, v1), (t2, v2) = raw[0], raw[-1]
        truth = (float(v2) - float(v1)) / (float(t2) - float(t1))
        assert len(raw) >= 5
        assert s.network.rx_bytes_per_s == pytest.approx(truth, rel=0.02)
        assert 5e6 < truth < 14e6  # the average, not a burst (27) nor a pause (0)
    finally:
        src.stop()
        prom.close()
        exp.close()


def test_snapshot_command_shows_exported_values(cluster: Cluster) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gpulens", "snapshot", "--prometheus", cluster.prom.url, "--json", "--timeout", "20"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "XDG_CONFIG_HOME": "/nonexistent"},
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert set(hosts) == set(HOSTS)
    for host, k in HOSTS.items():
        s = hosts[host]["sample"]
        assert hosts[host]["up"] is True
        assert s["cpu"]["total_percent"] == pytest.approx(12.5 * k)
        assert s["memory"]["used_bytes"] == (8 + k) * 1024**3
        assert [g["utilization_percent"] for g in s["gpus"]] == pytest.approx([10.0 * k, 10.0 * k + 1])
        assert [g["mem_used_bytes"] for g in s["gpus"]] == [(1000 + 10 * k) * 1048576, (1001 + 10 * k) * 1048576]
        assert s["jobs"][0]["job_key"] == "slurm-77"


def collect(src: PrometheusSource) -> tuple[list[SourceEvent], Callable[[Callable[[list[SourceEvent]], bool]], None]]:
    events: list[SourceEvent] = []
    lock = threading.Lock()

    def emit(ev: SourceEvent) -> None:
        with lock:
            events.append(ev)

    def wait(pred: Callable[[list[SourceEvent]], bool], timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with lock:
                if pred(list(events)):
                    return
            time.sleep(0.05)
        raise AssertionError(f"condition not met; events: {events[-10:]}")

    src.start(emit)
    return events, wait


def test_polling_backfill_and_host_that_disappears(cluster: Cluster, tmp_path: Path) -> None:
    # a fourth exporter with its own Prometheus, so the shared cluster stays intact
    exp = serve_metrics(0, "gone", ticking("gone", 4))
    keep = cluster.exporters["h1"]
    prom = start_prometheus(tmp_path, {"g": [f"127.0.0.1:{exp.port}", f"127.0.0.1:{keep.port}"]})
    src = PrometheusSource(prom.url, step_s=0.5, slow_s=30)
    try:
        prom.wait_targets_up(2)
        prom.wait_query("gpulens_gpu_info", 4)
        time.sleep(1.5)  # a little history to backfill
        events, wait = collect(src)
        wait(lambda ev: any(isinstance(e, SampleEvent) and e.backfill for e in ev))
        wait(lambda ev: any(isinstance(e, SourceStatusEvent) and e.ok for e in ev))
        live = [e for e in events if isinstance(e, SampleEvent) and not e.backfill]
        assert {e.sample.host for e in live} >= {"gone", "h1"}
        back = [e.sample for e in events if isinstance(e, SampleEvent) and e.backfill]
        assert all(s.time < min(e.sample.time for e in live) for s in back)
        assert any(s.host == "gone" and s.cpu.total_percent == pytest.approx(50.0, rel=1e-3) for s in back)
        old = next(s for s in back if s.host == "gone")
        # history holds the overview fields; names come along; details say why they are missing
        assert old.gpus[1].uuid == "GPU-0004-0001" and old.gpus[1].utilization_percent == pytest.approx(41.0)
        assert old.gpus[1].sm_clock_mhz is None and old.gpus[1].unavailable["sm_clock_mhz"] == NOT_BACKFILLED
        exp.close()  # the target goes down: Prometheus marks its series stale at the next scrape
        wait(lambda ev: any(isinstance(e, HostStatusEvent) and e.host == "gone" and not e.up for e in ev))
        assert src.expected_hosts() == ("h1",)
        assert not any(isinstance(e, SourceStatusEvent) and not e.ok for e in events)
    finally:
        src.stop()
        prom.close()
        exp.close()


def test_panel_with_host_substituted_and_bad_expression(cluster: Cluster) -> None:
    src = PrometheusSource(cluster.prom.url, step_s=1, backfill=False)
    try:
        data = src.panel_series('sum(gpulens_gpu_power_watts{host="$host"})', "h2", None, 30)
        assert data.error is None and data.points
        assert data.points[-1][1] == pytest.approx(102.5 + 103.5)  # GPUs 0 and 1 of h2
        job = src.panel_series('gpulens_job_resident_memory_bytes{host="$host",gpulens_job="$job"}', "h1", "slurm-77", 30)
        assert job.error is None and job.points[-1][1] == 2 * 1024**3
        bad = src.panel_series("sum(rate(gpulens_gpu_power_watts[1m])", "h1", None, 30)
        assert bad.error is not None and "parse error" in bad.error and not bad.points
        # a hostile host name stays inside its string: no injection, just no data
        evil = src.panel_series('gpulens_load1{host="$host"}', 'h1"} or vector(1) or up{x="', None, 30)
        assert evil.error is not None and "no data" in evil.error
    finally:
        src.stop()


def test_real_agent_metrics_port_through_prometheus(tmp_path: Path) -> None:
    if prometheus_binary() is None:
        pytest.skip(MISSING_REASON)
    port = free_port()
    agent = subprocess.Popen(
        [sys.executable, "-m", "gpulens", "agent", "--listen", "127.0.0.1:0", "--hostname", "agent-a",
         "--simulated-gpus", "2", "--metrics-port", str(port), "--no-trace", "--quiet", "--interval", "3600"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "XDG_CONFIG_HOME": "/nonexistent"},
    )
    prom = start_prometheus(tmp_path, {"agents": [f"127.0.0.1:{port}"]})
    src = PrometheusSource(prom.url, step_s=1, backfill=False)
    try:
        prom.wait_query("gpulens_gpu_utilization_ratio", 2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        exported = {
            line.split("{")[0] + line.split("gpu=")[1][:3]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith("gpulens_gpu_utilization_ratio{")
        }
        sample = src.fetch_latest()["agent-a"]
        assert sample.simulated is True  # the agent's SIMULATED flag survives the trip
        got = {f'gpulens_gpu_utilization_ratio"{g.index}"': (g.utilization_percent or 0) / 100 for g in sample.gpus}
        assert got == pytest.approx(exported)
    finally:
        src.stop()
        prom.close()
        agent.terminate()
        agent.wait(timeout=10)


def test_detail_fields_are_read_every_few_polls_and_kept_between(cluster: Cluster) -> None:
    src = PrometheusSource(cluster.prom.url, step_s=1, backfill=False, detail_every=1000)
    try:
        first = src.fetch_latest()
        before = src.queries_sent
        second = src.fetch_latest()
        core = src.queries_sent - before
        rows = src._current_rows()
        assert core == sum(1 for r in rows if r.tier == "core") < len(rows)
        g1, g2 = first["h2"].gpus[1], second["h2"].gpus[1]
        assert (g2.sm_clock_mhz, g2.xid_events, g2.mem_total_bytes, g2.uuid) == (1980, (79,), g1.mem_total_bytes, g1.uuid)
        assert g2.utilization_percent == pytest.approx(21.0)
    finally:
        src.stop()


def test_quick_first_screen_then_details_at_once(cluster: Cluster) -> None:
    src = PrometheusSource(cluster.prom.url, step_s=60, backfill=False)  # no second poll for a minute
    try:
        events, wait = collect(src)
        wait(lambda ev: any(isinstance(e, SampleEvent) and e.sample.gpus[0].sm_clock_mhz == 1980 for e in ev))
        samples = [e.sample for e in events if isinstance(e, SampleEvent) and e.sample.host == "h1"]
        first = samples[0].gpus[0]
        assert first.sm_clock_mhz is None and first.unavailable["sm_clock_mhz"] == DETAIL_PENDING
        assert first.utilization_percent == pytest.approx(10.0) and first.uuid == "GPU-0001-0000"
    finally:
        src.stop()


AMD_SCRAPE = DATA / "prometheus" / "amd-device-metrics-exporter-mi300x.txt"
AMD_GROWTH = {"gpu_xgmi_link_rx": 1000.0, "gpu_xgmi_link_tx": 2500.0, "pcie_rx": 4.0e8, "pcie_tx": 1.5e8}
"""Per second (XGMI in KB, PCIe in bytes), x (GPU index + 1), x link index for XGMI links."""
_AMD_LINE = re.compile(r"^(gpu_xgmi_link_rx|gpu_xgmi_link_tx|pcie_rx|pcie_tx)\{(.*)\} (\S+)$")


def amd_scrape(up: float) -> bytes:
    """AMD's exporter as served ``up`` seconds after start: its counters grown at AMD_GROWTH."""
    out = []
    for line in AMD_SCRAPE.read_text().splitlines():
        m = _AMD_LINE.match(line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            per_s = AMD_GROWTH[m.group(1)] * (int(labels["gpu_id"]) + 1) * int(labels.get("link_index", "1"))
            line = f"{m.group(1)}{{{m.group(2)}}} {float(m.group(3)) + per_s * up:.0f}"
        out.append(line)
    return ("\n".join(out) + "\n").encode()


def test_amd_device_metrics_exporter_xgmi_and_pcie_through_prometheus(tmp_path: Path) -> None:
    """AMD's exporter scraped by the real Prometheus: per-link XGMI counters (KB) read back as
    each GPU's summed rx/tx bytes/s, PCIe byte counters as rates, the power cap it never
    exports n/a with that reason."""
    if prometheus_binary() is None:
        pytest.skip(MISSING_REASON)
    t0 = time.time()

    class Exporter(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = amd_scrape(time.time() - t0)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    prom = start_prometheus(tmp_path, {"amd": [f"127.0.0.1:{httpd.server_address[1]}"]})
    src = PrometheusSource(prom.url, step_s=1, backfill=False, rate_window_s=RATE_S)
    try:
        prom.wait_query(f"count_over_time(gpu_xgmi_link_rx[{RATE_S + 2:g}s]) >= {RATE_S + 2:g}", 16)
        gpus = {g.index: g for g in src.fetch_latest()["mi300x-node"].gpus}
    finally:
        src.stop()
        prom.close()
        httpd.shutdown()
    assert set(gpus) == {0, 1}
    links = sum(range(8))
    for i, g in gpus.items():
        assert (g.vendor, g.uuid, g.name) == ("amd", f"FPL2518002{i}", "AMD Instinct MI300X")
        assert g.nvlink_rx_bytes_per_s == pytest.approx(1000.0 * (i + 1) * links * 1024, rel=0.01)
        assert g.nvlink_tx_bytes_per_s == pytest.approx(2500.0 * (i + 1) * links * 1024, rel=0.01)
        assert g.nvlink_total_bytes_per_s is None  # rx and tx known: the GPU screen adds them
        assert g.pcie_rx_bytes_per_s == pytest.approx(4.0e8 * (i + 1), rel=0.01)
        assert g.pcie_tx_bytes_per_s == pytest.approx(1.5e8 * (i + 1), rel=0.01)
        assert g.power_limit_w is None and g.unavailable["power_limit_w"] == AMD_NOT_EXPORTED["power_limit_w"]
    g0 = gpus[0]
    assert (g0.mem_used_bytes, g0.power_w, g0.temperature_c, g0.sm_clock_mhz) == (98304 * MIB, 548, 61, 1420)
    assert g0.energy_joules == pytest.approx(1_883_801.0)
