"""The mapping table against real dcgm-exporter and node_exporter scrapes.

Offline: the exposition text is parsed with prometheus_client.parser and each
mapped metric must be found with its labels and the converted value checked.
Online: the same files are served on loopback, scraped by the real Prometheus
and read back through PrometheusSource, so the PromQL itself is exercised.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpulens.ipc.prom_names import (
    FAMILIES,
    MIB,
    TABLE,
    escape_label_value,
    host_of,
    parse_selector,
    rows_for,
)
from gpulens.sources.prometheus.assemble import MISSING
from gpulens.sources.prometheus.source import PrometheusSource
from tests.fakes.prom_fixtures import MISSING_REASON, prometheus_binary, start_prometheus
from tests.paths import DATA

PROM_DATA = DATA / "prometheus"
DCGM = PROM_DATA / "datadog-dcgm-metrics.txt"
NODE = PROM_DATA / "node_exporter-e2e-output.txt"

Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse(path: Path) -> Samples:
    out: Samples = {}
    for fam in text_string_to_metric_families(path.read_text()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


# Rows whose metrics these two real scrapes do not contain (checked, so the list stays true).
NOT_IN_FIXTURES = {
    ("dcgm", "gpu.sm_activity_percent"),  # only an unlabelled dummy sample (Datadog's NOTE)
    ("dcgm", "gpu.sm_occupancy_percent"),
    ("dcgm", "gpu.pcie_rx_bytes_per_s"),
    ("dcgm", "gpu.pcie_tx_bytes_per_s"),
    ("node", "memory.available_bytes"),
    ("node", "memory.used_bytes"),
    ("node", "network.rx_bytes_per_s"),
    ("node", "network.tx_bytes_per_s"),
}


def test_every_field_has_a_gpulens_row_and_families_are_known() -> None:
    assert {r.family for r in TABLE} == set(FAMILIES)
    gpulens = {r.field for r in TABLE if r.family == "gpulens"}
    assert {r.field for r in TABLE} <= gpulens  # other families only map fields we export
    for row in TABLE:
        q = row.query('cluster="a",', 30)
        assert "$SEL" not in q and "$RATE" not in q
        assert 'cluster="a"' in q


def test_mapped_metrics_found_in_real_scrapes_with_labels_and_units() -> None:
    scraped = {**parse(DCGM), **parse(NODE)}
    seen = set()
    for row in TABLE:
        if row.family == "gpulens":
            continue
        if not all(m in scraped for m in row.metrics) or not any(
            all(k in lab for k in row.labels) for lab, _ in scraped[row.metrics[0]]
        ):
            assert (row.family, row.field) in NOT_IN_FIXTURES, f"{row.metrics} missing"
            continue
        seen.add((row.family, row.field))
        labelled = [(lab, v) for lab, v in scraped[row.metrics[0]] if all(k in lab for k in row.labels)]
        assert labelled, row
        if row.family == "dcgm":
            assert all(host_of(lab) for lab, _ in labelled)  # dcgm-exporter names its host
    assert seen == {(r.family, r.field) for r in TABLE if r.family != "gpulens"} - NOT_IN_FIXTURES
    assert len(seen) == 18


def converted(samples: Samples, metric: str, host: str) -> float:
    row = next(r for r in TABLE if r.metrics == (metric,) and r.family == "dcgm")
    assert row.scale is not None
    (value,) = [v for lab, v in samples[metric] if lab.get("Hostname") == host]
    return value * row.scale


def test_dcgm_unit_conversions_on_recorded_values() -> None:
    d = parse(DCGM)
    assert converted(d, "DCGM_FI_DEV_FB_USED", "424773df46e0") == 0
    assert converted(d, "DCGM_FI_DEV_POWER_USAGE", "424773df46e0") == pytest.approx(8.969)
    assert converted(d, "DCGM_FI_DEV_SM_CLOCK", "424773df46e0") == 300
    assert converted(d, "DCGM_FI_DEV_GPU_TEMP", "424773df46e0") == 25
    assert converted(d, "DCGM_FI_DEV_POWER_MGMT_LIMIT", "551bdf382151") == 70
    assert converted(d, "DCGM_FI_PROF_DRAM_ACTIVE", "ip-11111") == pytest.approx(0.0003)  # ratio -> %


def test_host_label_and_selector_helpers() -> None:
    assert host_of({"host": "a", "Hostname": "b", "instance": "c:1"}) == "a"
    assert host_of({"Hostname": "b", "instance": "c:9400"}) == "b"
    assert host_of({"instance": "node7:9100"}) == "node7"
    assert host_of({"instance": "[::1]:9100"}) == "::1"
    assert host_of({"job": "x"}) is None
    assert parse_selector('{cluster="a", env!~"dev.*"}') == 'cluster="a",env!~"dev.*",'
    assert parse_selector("") == ""
    for bad in ['{cluster="a"} or vector(1)', '{a=b}', 'up', '{a="x"}}']:
        with pytest.raises(ValueError):
            parse_selector(bad)
    assert escape_label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert rows_for(set()) == ()
    assert {r.family for r in rows_for({"DCGM_FI_DEV_GPU_UTIL"})} == {"dcgm"}


class _Files(http.server.BaseHTTPRequestHandler):
    files: ClassVar[dict[str, bytes]] = {}

    def do_GET(self) -> None:
        body = self.files.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def fixture_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if prometheus_binary() is None:
        pytest.skip(MISSING_REASON)
    _Files.files = {"/dcgm": DCGM.read_bytes(), "/node": NODE.read_bytes()}
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    target = f"127.0.0.1:{httpd.server_address[1]}"
    prom = start_prometheus(tmp_path_factory.mktemp("prom"), {"dcgm": [target], "node": [target]},
                            metrics_paths={"dcgm": "/dcgm", "node": "/node"})
    try:
        prom.wait_targets_up(2)
        prom.wait_query("rate(node_disk_read_bytes_total[5s])", 1)  # two scrapes in the rate window
        prom.wait_query("DCGM_FI_DEV_GPU_TEMP", 1)
        prom.wait_query("DCGM_FI_PROF_DRAM_ACTIVE", 1)
        yield prom.url
    finally:
        prom.close()
        httpd.shutdown()


@pytest.mark.prometheus
def test_real_prometheus_reads_dcgm_and_node_exporter(fixture_prometheus: str) -> None:
    src = PrometheusSource(fixture_prometheus, step_s=1, rate_window_s=5, backfill=False)
    try:
        hosts = src.fetch_latest()
    finally:
        src.stop()
    assert set(hosts) == {"424773df46e0", "551bdf382151", "ip-11111", "127.0.0.1"}
    g = hosts["424773df46e0"].gpus[0]
    assert (g.uuid, g.name) == ("GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e", "Tesla T4")
    assert g.mem_used_bytes == 0 and g.mem_total_bytes == 15109 * MIB
    assert g.power_w == pytest.approx(8.969) and g.temperature_c == 25
    assert (g.sm_clock_mhz, g.mem_clock_mhz, g.utilization_percent) == (300, 405, 0)
    assert hosts["551bdf382151"].gpus[0].power_limit_w == 70
    assert hosts["ip-11111"].gpus[0].dram_bw_util_percent == pytest.approx(0.0003)
    assert hosts["ip-11111"].gpus[0].utilization_percent is None
    node = hosts["127.0.0.1"]
    assert node.gpus == ()  # dcgm's unlabelled dummy samples cannot be placed on a GPU
    assert node.memory.total_bytes == 3831959552
    assert node.memory.swap_used_bytes == 4294963200 - 3231088640
    assert node.cpu.load_avg_1m == pytest.approx(0.21) and node.cpu.count == 8
    # a recorded scrape never changes: 0/0 CPU rate is "unknown", not 0 % or 100 %
    assert node.cpu.total_percent is None and node.unavailable["cpu.total_percent"] == MISSING
    assert node.storage.read_bytes_per_s == 0.0  # constant counters: a real zero rate


@pytest.mark.prometheus
def test_selector_limits_every_query(fixture_prometheus: str) -> None:
    src = PrometheusSource(fixture_prometheus, selector='{job="node"}', step_s=1, rate_window_s=5, backfill=False)
    try:
        assert set(src.fetch_latest()) == {"127.0.0.1"}
    finally:
        src.stop()
