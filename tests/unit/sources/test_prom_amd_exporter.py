"""AMD's ROCm device-metrics-exporter read by the Prometheus source: XGMI per link summed per
GPU into the ``nvlink_*`` fields (KB -> bytes), PCIe byte counters, the fields the exporter
never exports n/a with the reason, and every metric it defines mapped or listed with why.

Offline: the fixture scrape (tests/data/prometheus/amd-device-metrics-exporter-mi300x.txt,
written from the exporter's metric definitions) is turned into what Prometheus answers for
each row; tests/integration/test_prom_source.py runs the same rows through a real Prometheus.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpulens.collectors.amd.gpu_metrics import XGMI_UNIT_BYTES
from gpulens.ipc.prom_names import AMD_NOT_EXPORTED, KIB, MIB, TABLE, MetricMap
from gpulens.sources.prometheus.assemble import MISSING, assemble
from gpulens.sources.prometheus.tally import Answer
from tests.paths import DATA

SCRAPE = DATA / "prometheus" / "amd-device-metrics-exporter-mi300x.txt"
METRICS = DATA / "prometheus" / "amd-device-metrics-exporter-metrics.tsv"
HOST = "mi300x-node"
AMD_ROWS = tuple(r for r in TABLE if r.family == "amd")
Series = list[tuple[dict[str, str], float]]


def scrape(text: str) -> dict[str, Series]:
    out: dict[str, Series] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def grown(series: dict[str, Series], rate: Mapping[str, float], dt: float) -> dict[str, Series]:
    """The scrape ``dt`` seconds later: each counter in ``rate`` (name -> units/s per link and
    GPU index, see :func:`link_rate`) grown by its rate."""
    out = dict(series)
    for name, per_s in rate.items():
        out[name] = [(lab, v + link_rate(per_s, lab) * dt) for lab, v in series[name]]
    return out


def link_rate(per_s: float, labels: Mapping[str, str]) -> float:
    """Made-up growth of one series: ``per_s`` x (GPU index + 1) x (link index, or 1 without links)."""
    return per_s * (int(labels["gpu_id"]) + 1) * int(labels.get("link_index", "1"))


def answer(row: MetricMap, before: dict[str, Series], after: dict[str, Series], dt: float) -> Answer:
    """What Prometheus answers for one AMD row's three shapes (gauge x scale with an optional
    ``clock_type`` match; ``rate()``; ``rate()`` summed over ``link_index``), then ``max by`` its
    kept labels. The real PromQL runs in tests/integration/test_prom_source.py."""
    (metric,) = row.metrics
    if row.windowed:
        old = {tuple(sorted(lab.items())): v for lab, v in before[metric]}
        values = [(lab, (v - old[tuple(sorted(lab.items()))]) / dt) for lab, v in after[metric]]
        scale = float(row.expr.rsplit(" * ", 1)[1]) if re.search(r"\* [0-9.e+-]+$", row.expr) else 1.0
    else:
        values, scale = list(after.get(metric, [])), row.scale or 1.0
    match = re.search(r'clock_type=~"([^"]*)"', row.expr)
    if match:
        values = [(lab, v) for lab, v in values if re.fullmatch(match.group(1), lab["clock_type"])]
    if "sum without (link_index)" in row.expr:
        sums: dict[tuple[tuple[str, str], ...], float] = {}
        for lab, v in values:
            labels = tuple(sorted((k, x) for k, x in lab.items() if k != "link_index"))
            sums[labels] = sums.get(labels, 0.0) + v
        values = [(dict(k), v) for k, v in sums.items()]
    best: dict[tuple[str, ...], tuple[dict[str, str], float]] = {}
    for lab, v in values:
        kept = {**lab, "gpu": lab["gpu_id"], "uuid": lab["serial_number"], "name": lab["card_model"]}
        kept = {k: x for k, x in kept.items() if k in row.keep}
        key = tuple(kept.get(k, "") for k in row.keep)
        if key not in best or v * scale > best[key][1]:
            best[key] = (kept, v * scale)
    return list(best.values())


XGMI_KB_PER_S = {"gpu_xgmi_link_rx": 1000.0, "gpu_xgmi_link_tx": 2500.0}
PCIE_B_PER_S = {"pcie_rx": 4.0e8, "pcie_tx": 1.5e8}
DT = 10.0


@pytest.fixture(scope="module")
def gpus() -> dict[int, object]:
    before = scrape(SCRAPE.read_text())
    after = grown(before, {**XGMI_KB_PER_S, **PCIE_B_PER_S}, DT)
    answers = [(row, answer(row, before, after, DT)) for row in AMD_ROWS if row.metrics[0] in before]
    hosts = assemble(answers, 1_700_000_000.0)
    assert set(hosts) == {HOST}
    return {g.index: g for g in hosts[HOST].gpus}


def test_xgmi_links_summed_per_gpu_kb_to_bytes(gpus: dict[int, object]) -> None:
    from gpulens.core.model import GpuSample

    for index in (0, 1):
        g = gpus[index]
        assert isinstance(g, GpuSample)
        links = sum(range(8))  # link l grows at l x the GPU's rate (link 0: its own slot, 0)
        assert g.nvlink_rx_bytes_per_s == pytest.approx(1000.0 * (index + 1) * links * 1024)
        assert g.nvlink_tx_bytes_per_s == pytest.approx(2500.0 * (index + 1) * links * 1024)
        # rx and tx are known: the total is theirs (the GPU screen adds them), not DCGM's sum-only field
        assert g.nvlink_total_bytes_per_s is None
        assert "nvlink_rx_bytes_per_s" not in g.unavailable
        assert g.pcie_rx_bytes_per_s == pytest.approx(4.0e8 * (index + 1))
        assert g.pcie_tx_bytes_per_s == pytest.approx(1.5e8 * (index + 1))


def test_instant_fields_ids_and_units(gpus: dict[int, object]) -> None:
    from gpulens.core.model import GpuSample

    g0, g1 = gpus[0], gpus[1]
    assert isinstance(g0, GpuSample) and isinstance(g1, GpuSample)
    assert (g0.vendor, g0.uuid, g0.name) == ("amd", "FPL25180020", "AMD Instinct MI300X")
    assert g1.uuid == "FPL25180021"
    assert (g0.utilization_percent, g0.memory_utilization_percent) == (87, 41)
    assert (g0.mem_used_bytes, g0.mem_total_bytes) == (98304 * MIB, 196592 * MIB)  # MB read as MiB
    assert g0.power_w == 548  # gpu_power_usage first, before gpu_package_power's 550
    assert g0.temperature_c == 61  # junction
    assert (g0.sm_clock_mhz, g0.mem_clock_mhz) == (1420, 1300)  # the highest system clock
    assert (g1.sm_clock_mhz, g1.mem_clock_mhz) == (132, 900)
    assert g0.energy_joules == pytest.approx(1_883_801.0)  # uJ -> J
    assert (g0.ecc_corrected, g0.ecc_uncorrected) == (2, 0)


def test_fields_the_exporter_never_exports_say_so(gpus: dict[int, object]) -> None:
    from gpulens.core.model import GpuSample

    g = gpus[0]
    assert isinstance(g, GpuSample)
    assert g.power_limit_w is None
    assert g.unavailable["power_limit_w"] == AMD_NOT_EXPORTED["power_limit_w"]
    assert "power cap" in g.unavailable["power_limit_w"]
    for name in ("sm_activity_percent", "sm_occupancy_percent", "dram_bw_util_percent", "tensor_active_percent"):
        assert getattr(g, name) is None
        assert g.unavailable[name] == AMD_NOT_EXPORTED[name] and "GPU_PROF_" in g.unavailable[name]


def test_the_reason_wins_over_detail_pending_but_not_for_gpulens_amd_gpus() -> None:
    util = next(r for r in AMD_ROWS if r.field == "gpu.utilization_percent")
    lab = {"hostname": "n", "gpu": "0", "uuid": "S", "name": "MI300X"}
    pending = {"gpu.power_limit_w": "loading"}
    (g,) = assemble([(util, [(lab, 50.0)])], 1.0, skipped=pending)["n"].gpus
    assert g.unavailable["power_limit_w"] == AMD_NOT_EXPORTED["power_limit_w"]
    assert g.unavailable["pcie_rx_bytes_per_s"] == MISSING  # mapped, only absent here
    # an AMD GPU of gpulens' own agent (vendor label) may have a power cap: no AMD-exporter reason
    info = next(r for r in TABLE if r.field == "gpu.info")
    (own,) = assemble([(info, [({"host": "n", "gpu": "0", "uuid": "AMD-1", "name": "MI300X",
                                 "vendor": "amd"}, 1.0)])], 1.0)["n"].gpus
    assert own.vendor == "amd" and own.unavailable["power_limit_w"] == MISSING


def test_queries_sum_links_after_rate_and_convert_kb() -> None:
    rx = next(r for r in AMD_ROWS if r.metrics == ("gpu_xgmi_link_rx",))
    assert rx.field == "gpu.nvlink_rx_bytes_per_s" and rx.windowed and rx.tier == "detail"
    q = rx.query('cluster="a",', 30)
    assert 'sum without (link_index) (rate(gpu_xgmi_link_rx{cluster="a",}[30s]))' in q
    assert q.endswith(" * 1024)") and '"gpu", "$1", "gpu_id"' in q
    assert KIB == XGMI_UNIT_BYTES  # the same KB as gpulens' own AMD reader, read or scraped
    pcie = next(r for r in AMD_ROWS if r.metrics == ("pcie_rx",))
    assert "rate(pcie_rx{$SEL}[$RATE])" in pcie.expr and "sum without" not in pcie.expr


def test_every_mapped_series_is_in_the_scrape_with_its_labels() -> None:
    series = scrape(SCRAPE.read_text())
    for row in AMD_ROWS:
        if row.metrics[0] in ("gpu_average_package_power", "gpu_edge_temperature"):
            continue  # MI2xx fallbacks: an MI300X has neither
        samples = series[row.metrics[0]]
        assert samples and all(all(k in lab for k in (*row.labels, "hostname")) for lab, _ in samples), row


# Metrics the exporter defines (on by default) that gpulens does not read, each with why (docs/amd.md).
UNMAPPED = (
    (r"gpu_nodes_total", "a node count: gpulens counts the GPUs it places"),
    (r"gpu_(memory|hbm)_temperature", "no memory-temperature field"),
    (r"gpu_(mma|vcn|jpeg)_activity|gpu_(gfx|vcn|jpeg)_busy_instantaneous",
     "media engines / per-XCC busy: no field (utilization is gpu_gfx_activity)"),
    (r"gpu_(gfx_|memory_)?voltage", "no voltage field"),
    (r"pcie_(max_)?speed", "link speed (GT/s): no field"),
    (r"pcie_bandwidth", "one direction-less figure; its HELP says Mb/s and gpuagent's proto MB/s: unit unsettled"),
    (r"pcie_bidirectional_bandwidth", "'accumulated bandwidth in GB/sec': neither a byte counter nor a rate"),
    (r"pcie_(replay|recovery|replay_rollover|nack_sent|nack_received)_count", "no PCIe-retry field"),
    (r"gpu_(min|max)_clock", "clock range: no field"),
    (r"gpu_vram_max_bandwidth", "a peak figure: no field"),
    (r"gpu_free_vram|gpu_(total|used|free)_visible_vram|gpu_(total|used|free)_gtt",
     "total and used VRAM are read; no visible-VRAM or GTT field"),
    (r"gpu_ecc_(correct|uncorrect|deferred)_(?!total$)\w+|gpu_ecc_deferred_total",
     "per-block and deferred ECC: gpulens has the corrected/uncorrected totals"),
    (r"gpu_xgmi_nbr_\d_(nop|req|resp|beats)_tx|gpu_xgmi_nbr_\d_tx_thrput",
     "neighbours 0-1 or 0-5, transmit only; tx_thrput's unit differs between proto (B/s) and docs "
     "(beats); gpu_xgmi_link_rx/tx cover every link both ways"),
    (r"gpu_health", "no health field"),
    (r"gpu_violation_\w+", "throttle residencies (counters and %): not the named reasons gpulens shows"),
    (r"gpu_afid_errors", "RAS event ids: no field"),
    (r"gpu_process_cu_occupancy", "per-process CU occupancy: no such per-process field"),
)


def _why(name: str) -> str | None:
    return next((why for pattern, why in UNMAPPED if re.fullmatch(pattern, name)), None)


def test_every_default_exporter_metric_is_mapped_or_said_why() -> None:
    rows = [line.split("\t") for line in METRICS.read_text().splitlines() if not line.startswith("#")]
    assert len(rows) == 194 and all(len(r) == 2 for r in rows)
    names = [n for n, _ in rows if not n.startswith("gpu_prof_")]  # profiler fields: off by default
    assert len(names) == 142
    mapped = {m for r in AMD_ROWS for m in r.metrics}
    assert mapped <= set(names)  # every mapped name is one the exporter defines
    for name in names:
        assert (name in mapped) != (_why(name) is not None), name  # mapped, or unmapped with why
    helps = dict((n, h) for n, h in rows)
    assert helps["gpu_xgmi_link_rx"] == "Accumulated XGMI Link Data Read in KB"
    assert helps["pcie_rx"] == "Accumulated bytes received from the PCIe link"
    # no power cap or power limit among them (host-limit violation counters are throttle residencies)
    assert not [n for n, h in rows if re.search(r"power[ _](cap|limit)", f"{n} {h}", re.IGNORECASE)]
