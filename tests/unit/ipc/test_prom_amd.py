"""AMD's device-metrics-exporter names through the Prometheus source's table and assembler (offline:
the PromQL's label_replace and scale are applied here to the documented exposition)."""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpulens.ipc.prom_names import MIB, TABLE, MetricMap
from gpulens.sources.prometheus.assemble import assemble
from gpulens.sources.prometheus.source import PrometheusSource
from tests.fakes.prom_fixtures import MISSING_REASON, prometheus_binary, start_prometheus
from tests.paths import DATA

EXPOSITION = DATA / "amdgpu" / "device-metrics-exporter.txt"


def _answer(row: MetricMap, series: dict[str, list[tuple[dict[str, str], float]]]) -> list[tuple[dict[str, str], float]]:
    """What Prometheus would answer for ``row``: its matcher, the label copies, the scale, max by its keep."""
    match = re.search(r'clock_type=~"([^"]*)"', row.expr)
    out: dict[tuple[str, ...], float] = {}
    for labels, value in series.get(row.metrics[0], []):
        if match and not re.fullmatch(match.group(1), labels.get("clock_type", "")):
            continue
        lab = {**labels, "gpu": labels["gpu_id"], "uuid": labels["serial_number"], "name": labels["card_model"]}
        key = tuple(lab.get(k, "") for k in row.keep)
        out[key] = max(out.get(key, float("-inf")), value * (row.scale or 1.0))
    return [({k: v for k, v in zip(row.keep, key, strict=True) if v}, value) for key, value in out.items()]


def test_amd_exporter_gpus_assemble_with_vendor_and_units() -> None:
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(EXPOSITION.read_text()):
        for s in fam.samples:
            series.setdefault(s.name, []).append((dict(s.labels), s.value))
    rows = [r for r in TABLE if r.family == "amd"]
    answers = [(r, _answer(r, series)) for r in rows]
    samples = assemble(answers, 1700000000.0)
    g0, g1 = samples["mi300-node"].gpus
    assert (g0.vendor, g0.name, g0.uuid, g1.index) == ("amd", "MI300X", "692251001124", 1)
    assert g0.utilization_percent == 87 and g0.memory_utilization_percent == 41
    assert g0.mem_used_bytes == 98304 * MIB and g0.mem_total_bytes == 196592 * MIB
    assert g0.power_w == 548 and g0.temperature_c == 61
    assert g0.sm_clock_mhz == 1420 and g0.mem_clock_mhz == 1300  # the highest XCD's system clock
    assert g0.energy_joules == pytest.approx(1.883801e6)
    assert (g0.ecc_corrected, g0.ecc_uncorrected) == (2, 0)
    assert g0.sm_activity_percent is None and g0.unavailable["sm_activity_percent"]


def test_gpulens_own_series_keep_the_vendor_label() -> None:
    (info,) = [r for r in TABLE if r.family == "gpulens" and r.field == "gpu.info"]
    assert "vendor" in info.keep
    answer = [({"host": "h", "gpu": "3", "uuid": "AMD-1", "name": "AMD Instinct MI300X", "vendor": "amd"}, 1.0),
              ({"host": "h", "gpu": "0", "uuid": "GPU-1", "name": "H100"}, 1.0)]
    gpus = assemble([(info, answer)], 1700000000.0)["h"].gpus
    assert [(g.index, g.vendor) for g in gpus] == [(0, "nvidia"), (3, "amd")]


class _Exposition(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(EXPOSITION.read_bytes())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def amd_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if prometheus_binary() is None:
        pytest.skip(MISSING_REASON)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Exposition)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    prom = start_prometheus(tmp_path_factory.mktemp("prom"), {"amd": [f"127.0.0.1:{httpd.server_address[1]}"]})
    try:
        prom.wait_targets_up(1)
        prom.wait_query("gpu_clock", 6)
        yield prom.url
    finally:
        prom.close()
        httpd.shutdown()


@pytest.mark.prometheus
def test_real_prometheus_runs_the_amd_queries(amd_prometheus: str) -> None:
    """The label_replace and clock_type matchers are PromQL a real Prometheus accepts and answers."""
    src = PrometheusSource(amd_prometheus, step_s=1, rate_window_s=5, backfill=False)
    try:
        hosts = src.fetch_latest()
    finally:
        src.stop()
    g0, g1 = hosts["mi300-node"].gpus
    assert (g0.vendor, g0.uuid, g0.name) == ("amd", "692251001124", "MI300X")
    assert (g0.sm_clock_mhz, g0.mem_clock_mhz, g1.sm_clock_mhz) == (1420, 1300, 132)
    assert g0.mem_total_bytes == 196592 * MIB and g0.power_w == 548 and g0.temperature_c == 61
