"""The mapping table against real dcgm-exporter and node_exporter scrapes.

Offline: the exposition text is parsed with prometheus_client.parser and each
mapped metric must be found with its labels and the converted value checked.
Online: the same files are served on loopback, scraped by the real Prometheus
and read back through PrometheusSource, so the PromQL itself is exercised.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
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
T4 = PROM_DATA / "dcgm-default-counters-t4.txt"
DEFAULT_COUNTERS = PROM_DATA / "dcgm-exporter-default-counters.csv"
AMD_EXPORTER = DATA / "amdgpu" / "device-metrics-exporter.txt"  # names and labels as AMD documents them
AMD_MI300X = PROM_DATA / "amd-device-metrics-exporter-mi300x.txt"  # as its source defines them, with XGMI

Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse(path: Path) -> Samples:
    out: Samples = {}
    text = path.read_text()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            # prometheus_client names a counter's samples NAME_total; Prometheus keeps them as exposed
            name = s.name[:-6] if s.name.endswith("_total") and f"\n{s.name[:-6]}{{" in text else s.name
            out.setdefault(name, []).append((dict(s.labels), s.value))
    return out


# Rows whose metrics these two real scrapes do not contain (checked, so the list stays true).
NOT_IN_FIXTURES = {
    ("dcgm", "gpu.sm_activity_percent"),  # only an unlabelled dummy sample (Datadog's NOTE)
    ("dcgm", "gpu.sm_occupancy_percent"),
    ("dcgm", "gpu.gr_engine_active_percent"),
    ("dcgm", "gpu.tensor_active_percent"),
    ("dcgm", "gpu.ecc_corrected"),  # not in Datadog's scrape: see the T4 file below
    ("dcgm", "gpu.ecc_uncorrected"),
    ("dcgm", "gpu.pcie_rx_bytes_per_s"),
    ("dcgm", "gpu.pcie_tx_bytes_per_s"),
    ("node", "memory.available_bytes"),
    ("node", "memory.used_bytes"),
    ("node", "network.rx_bytes_per_s"),
    ("node", "network.tx_bytes_per_s"),
}


# dcgm-exporter fields that only help read another one (no gpulens series of their own)
DCGM_ONLY = {"gpu.gr_engine_active_percent", "gpu.nvlink_total_bytes_per_s", "gpu.throttle_mask",
             "gpu.xid_last"}  # dcgm-exporter gives the last XID code; gpulens counts XIDs by code


def test_every_field_has_a_gpulens_row_and_families_are_known() -> None:
    assert {r.family for r in TABLE} == set(FAMILIES)
    gpulens = {r.field for r in TABLE if r.family == "gpulens"}
    assert {r.field for r in TABLE} <= gpulens | DCGM_ONLY  # other families only map fields we export
    for row in TABLE:
        q = row.query('cluster="a",', 30)
        assert "$SEL" not in q and "$RATE" not in q
        assert 'cluster="a"' in q


def test_mapped_metrics_found_in_real_scrapes_with_labels_and_units() -> None:
    scraped = {**parse(DCGM), **parse(NODE), **parse(AMD_EXPORTER), **parse(AMD_MI300X)}
    seen: set[tuple[str, str]] = set()
    for row in TABLE:
        if row.family == "gpulens":
            continue
        if not all(m in scraped for m in row.metrics) or not any(
            all(k in lab for k in row.labels) for lab, _ in scraped[row.metrics[0]]
        ):
            # a fallback row of a field already found (e.g. CLOCKS_EVENT_REASONS, DCGM 3.3's name) may be absent
            assert (row.family, row.field) in NOT_IN_FIXTURES | seen, f"{row.metrics} missing"
            continue
        seen.add((row.family, row.field))
        labelled = [(lab, v) for lab, v in scraped[row.metrics[0]] if all(k in lab for k in row.labels)]
        assert labelled, row
        if row.family in ("dcgm", "amd"):
            assert all(host_of(lab) for lab, _ in labelled)  # the exporter names its host
    assert seen == {(r.family, r.field) for r in TABLE if r.family != "gpulens"} - NOT_IN_FIXTURES
    assert len(seen) == 21 + 15  # dcgm-exporter and node_exporter; AMD's device-metrics-exporter


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


T0 = 1_700_000_000.0
NVLINK_RATE = 3.5e9
"""Bytes/s the served T4's NVLINK_BANDWIDTH_TOTAL counter grows at (and 60 W its energy, in mJ)."""


def t4_now() -> bytes:
    """The derived T4 scrape with its two counters at their values of now: growing at known rates."""
    up = time.time() - T0
    out = []
    for line in T4.read_text().splitlines():
        if line.startswith("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{"):
            line = f"{line.rsplit(' ', 1)[0]} {NVLINK_RATE * up:.0f}"
        elif line.startswith("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{"):
            line = f"{line.rsplit(' ', 1)[0]} {60_000 * up:.0f}"
        out.append(line)
    return ("\n".join(out) + "\n").encode()


class _Files(http.server.BaseHTTPRequestHandler):
    files: ClassVar[dict[str, bytes]] = {}

    def do_GET(self) -> None:
        body = t4_now() if self.path == "/t4" else self.files.get(self.path)
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
    prom = start_prometheus(tmp_path_factory.mktemp("prom"), {"dcgm": [target], "node": [target], "t4": [target]},
                            metrics_paths={"dcgm": "/dcgm", "node": "/node", "t4": "/t4"})
    try:
        prom.wait_targets_up(3)
        # the rate window (5 s) covered by scrapes, so rate() extrapolates to both ends
        prom.wait_query("count_over_time(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL[7s]) >= 7", 1)
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
    assert set(hosts) == {"424773df46e0", "551bdf382151", "ip-11111", "127.0.0.1", "t4-node"}
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


# dcgm-exporter default-counters fields gpulens has no place for (each with why)
UNUSED_DEFAULT_COUNTERS = {
    "DCGM_FI_DEV_MEMORY_TEMP": "no memory-temperature field in the sample model",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "no PCIe-retry field",
    "DCGM_FI_DEV_ENC_UTIL": "no encoder field",
    "DCGM_FI_DEV_DEC_UTIL": "no decoder field",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "vGPU licensing is not shown",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "no row-remapping field",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "no row-remapping field",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "no row-remapping field",
    "DCGM_FI_DRIVER_VERSION": "a label, not a metric",
}


def test_dcgm_exporter_default_counters_are_all_mapped() -> None:
    """Every field dcgm-exporter exports by default (etc/default-counters.csv) is read, or listed here with why."""
    fields = [line.split(",")[0].strip() for line in DEFAULT_COUNTERS.read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert len(fields) == 26
    mapped = {m for r in TABLE if r.family == "dcgm" for m in r.metrics}
    assert {f for f in fields if f not in mapped} == set(UNUSED_DEFAULT_COUNTERS)
    for name in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_DEV_FB_RESERVED",
                 "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                 "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"):
        assert name in mapped


def test_throttle_bitmask_names() -> None:
    from gpulens.ipc.prom_names import throttle_names

    assert throttle_names(0) == ()
    assert throttle_names(5) == ("gpu_idle", "sw_power_cap")
    assert throttle_names(0x48) == ("hw_slowdown", "hw_thermal_slowdown")
    assert throttle_names(0x1000) == ("bit_0x1000",)
    assert throttle_names(float("nan")) == throttle_names(-1) == throttle_names(2.5) == ()


@pytest.mark.prometheus
def test_dcgm_exporter_with_its_default_counters(fixture_prometheus: str) -> None:
    """A T4 as dcgm-exporter exports it by default (SM_ACTIVE off): utilization from
    GR_ENGINE_ACTIVE, said so where SM activity is n/a; tensor activity; memory total with
    the reserved part; NVLink and energy from their counters; throttle bits; ECC."""
    from gpulens.sources.prometheus.assemble import NVLINK_TOTAL_ONLY, SM_FROM_GR

    src = PrometheusSource(fixture_prometheus, step_s=1, rate_window_s=5, backfill=False)
    try:
        g = src.fetch_latest()["t4-node"].gpus[0]
    finally:
        src.stop()
    assert g.utilization_percent == pytest.approx(42.0)  # GR_ENGINE_ACTIVE 0.42, not GPU_UTIL's 0
    assert g.sm_activity_percent is None and g.unavailable["sm_activity_percent"] == SM_FROM_GR
    assert g.tensor_active_percent == pytest.approx(17.0)
    assert g.mem_total_bytes == (0 + 15109 + 251) * MIB == 15 * 1024**3  # used + free + reserved: a T4's 15 GiB
    assert g.throttle_reasons == ("gpu_idle", "sw_power_cap")  # bitmask 5
    assert (g.ecc_corrected, g.ecc_uncorrected) == (7, 1)
    assert g.nvlink_total_bytes_per_s == pytest.approx(NVLINK_RATE, rel=0.02)  # rate() of its counter
    assert g.nvlink_rx_bytes_per_s is None and g.unavailable["nvlink_rx_bytes_per_s"] == NVLINK_TOTAL_ONLY
    assert g.energy_joules == pytest.approx(60.0 * (time.time() - T0), rel=1e-3)  # mJ -> J
    assert g.pcie_rx_bytes_per_s == 2.5e6 and g.dram_bw_util_percent == pytest.approx(5.0)


@pytest.mark.prometheus
def test_snapshot_lists_every_dcgm_host_once_and_up(fixture_prometheus: str) -> None:
    """Datadog's scrape: hosts whose GPUs report only host-screen details (power limit,
    throttling, DRAM activity) are hosts, not "not reached" then "no longer in Prometheus"."""
    started = time.monotonic()
    # A timeout far over what a loaded machine takes to start and read, so that waiting it out is told
    # apart from being slow.
    out = subprocess.run(
        [sys.executable, "-m", "gpulens", "snapshot", "--prometheus", fixture_prometheus, "--json",
         "--timeout", "60"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "XDG_CONFIG_HOME": "/nonexistent"},
    )
    took = time.monotonic() - started
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    hosts = [h["host"] for h in json.loads(out.stdout)["hosts"]]
    assert sorted(hosts) == sorted(set(hosts)) == ["127.0.0.1", "424773df46e0", "551bdf382151", "ip-11111", "t4-node"]
    assert all(h["up"] for h in json.loads(out.stdout)["hosts"])
    assert took < 30  # it did not wait out the 60 s timeout for hosts that never came
