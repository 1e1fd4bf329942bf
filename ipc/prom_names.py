"""The one table from gpulens sample fields to PromQL, per exporter family.

Four naming families are understood:

* ``gpulens`` - our own exporter (agent/metrics.py, docs/metrics.md);
* ``dcgm`` - NVIDIA dcgm-exporter (``DCGM_FI_DEV_*`` in their units: %, MiB,
  W, C, MHz, mJ; ``DCGM_FI_PROF_*`` as 0-1 ratios), every field of its
  default counters file;
* ``amd`` - AMD's ROCm device-metrics-exporter (``gpu_gfx_activity``, ``gpu_used_vram`` in MB,
  ``gpu_energy_consumed`` in uJ, ``gpu_xgmi_link_rx/tx`` in KB per ``link_index``, ...; labels
  ``gpu_id``, ``serial_number``, ``card_model``, ``hostname``), renamed by ``label_replace`` to
  ``gpu``, ``uuid`` and ``name`` (docs/amd.md lists its fields left unmapped, and why);
* ``node`` - Prometheus node_exporter.

Throughput is always ``rate()`` over a counter (gpulens', node_exporter's,
dcgm-exporter's), never a gauge of the last interval, so what a window
shows is the true amount whatever the scrape interval.

Every expression returns the value already converted to the gpulens unit of
the field (percent, bytes, bytes/s, W, C, MHz) and keeps the labels that name
the host (``host``, ``Hostname``/``hostname`` or ``instance``; see :func:`host_of`) and,
for GPU rows, the GPU (``gpu``, ``uuid``/``UUID``). ``$SEL`` is replaced by the
user's label matchers (may be empty; PromQL accepts a trailing comma) and
``$RATE`` by the rate window. For one field and one host the first family in
:data:`FAMILIES` order that has data wins.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

FAMILIES: tuple[str, ...] = ("gpulens", "dcgm", "amd", "node")

DEFAULT_METRICS_PORT = 7790
"""``gpulens agent --metrics-port`` without a number: the agent's stream port (7789) + 1.
Prometheus' default port allocations (9100-9999, node_exporter 9100, dcgm-exporter
9400, ...) are all taken, so gpulens stays out of that range rather than collide."""

MIB = 1024 * 1024
KIB = 1024
"""AMD's "KB" of XGMI data (``gpu_xgmi_link_rx/tx``), read as KiB as gpulens' own AMD reader reads
the same amdsmi/gpu_metrics counters (collectors/amd/gpu_metrics.py ``XGMI_UNIT_BYTES``), so one
GPU shows the same rate read locally or through Prometheus (AMD does not say which kilo)."""
PARTITIONS = r"(.*[0-9]p[0-9]+|[hsv]d[a-z]+[0-9]+|xvd[a-z]+[0-9]+|dm-.*|loop.*|ram.*|sr[0-9]+|md[0-9]+p[0-9]+)"
"""Block devices that are partitions or virtual: excluded so totals do not count bytes twice."""


@dataclass(frozen=True, slots=True)
class MetricMap:
    """One field as read from one family."""

    field: str
    """Dotted gpulens field: ``cpu.total_percent``, ``gpu.mem_used_bytes``, ``job.rss_bytes``."""
    family: str
    metrics: tuple[str, ...]
    """Raw metric names the expression reads (the first one is used to detect the family)."""
    expr: str
    """PromQL template with ``$SEL`` and ``$RATE``."""
    scale: float | None = 1.0
    """gpulens value = raw value x scale, for single-gauge rows; None when derived (rate, sum)."""
    labels: tuple[str, ...] = ()
    """Labels each raw sample must carry for the row to work (besides the host label)."""

    @property
    def scope(self) -> str:
        """``host``, ``gpu`` or ``job``: which object the field belongs to."""
        head = self.field.split(".", 1)[0]
        return head if head in ("gpu", "job") else "host"

    @property
    def keep(self) -> tuple[str, ...]:
        """Labels the answer keeps; the rest (driver versions, pod names, ...) is
        aggregated away by ``max by``, which shrinks answers several times."""
        if self.family == "gpulens":  # gpu_info also keeps ``vendor``, which only AMD GPUs' series carry
            return ("host", *self.labels, *(("vendor",) if self.field == "gpu.info" else ()))
        if self.family == "dcgm":
            return (*HOST_LABELS, "gpu", "UUID", "modelName")
        if self.family == "amd":
            return (*HOST_LABELS, "gpu", "uuid", "name")
        return HOST_LABELS

    @property
    def windowed(self) -> bool:
        """True when the expression reads a range (``rate()``, ``increase()``): it still
        answers for a window after a target is gone, so it never makes a host on its own."""
        return "[$RATE]" in self.expr

    @property
    def tier(self) -> str:
        """How often the source re-reads it: ``core`` every poll (what the overview
        draws), ``detail`` every few polls (clocks, PCIe, ECC...: host screen only),
        ``static`` every minute (sizes, names)."""
        if self.field in STATIC_FIELDS:
            return "static"
        return "detail" if self.field in DETAIL_FIELDS else "core"

    def query(self, selector: str = "", rate_window_s: float = 60.0) -> str:
        """The PromQL text with the selector matchers and rate window filled in."""
        expr = self.expr.replace("$SEL", selector).replace("$RATE", f"{max(1, round(rate_window_s))}s")
        return f"max by ({', '.join(self.keep)}) ({expr})"


def _g(field: str, metric: str, scale: float = 1.0, labels: tuple[str, ...] = ()) -> MetricMap:
    """A plain gauge of gpulens' own names: value x scale."""
    expr = f"{metric}{{$SEL}}" if scale == 1.0 else f"{metric}{{$SEL}} * {scale!r}"
    return MetricMap(field, "gpulens", (metric,), expr, scale, labels)


def _d(field: str, metric: str, scale: float = 1.0) -> MetricMap:
    """A dcgm-exporter gauge, per GPU."""
    expr = f"{metric}{{$SEL}}" if scale == 1.0 else f"{metric}{{$SEL}} * {scale!r}"
    return MetricMap(field, "dcgm", (metric,), expr, scale, ("gpu", "UUID"))


def _amd_ids(expr: str) -> str:
    """AMD device-metrics-exporter's ``gpu_id``, ``serial_number`` and ``card_model`` labels
    copied to ``gpu``, ``uuid`` and ``name`` (the labels gpulens places GPUs by)."""
    for new, old in (("gpu", "gpu_id"), ("uuid", "serial_number"), ("name", "card_model")):
        expr = f'label_replace({expr}, "{new}", "$1", "{old}", "(.*)")'
    return expr


def _a(field: str, metric: str, scale: float = 1.0, match: str = "") -> MetricMap:
    """An AMD device-metrics-exporter gauge, per GPU."""
    expr = _amd_ids(f"{metric}{{{match}$SEL}}")
    if scale != 1.0:
        expr = f"{expr} * {scale!r}"
    return MetricMap(field, "amd", (metric,), expr, scale, ("gpu_id",))


def _a_rate(field: str, metric: str, scale: float = 1.0, links: str = "") -> MetricMap:
    """``rate()`` of an AMD device-metrics-exporter byte counter (exported as a gauge that only
    grows) x scale, per GPU; with ``links``, one series per link (that label) summed per GPU."""
    expr = f"rate({metric}{{$SEL}}[$RATE])"
    if links:
        expr = f"sum without ({links}) ({expr})"
    expr = _amd_ids(expr)
    if scale != 1.0:
        expr = f"{expr} * {scale!r}"
    return MetricMap(field, "amd", (metric,), expr, None, ("gpu_id", *((links,) if links else ())))


# dcgm-exporter's main branch renamed its ``Hostname`` label ``hostname``; releases still say ``Hostname``
HOST_LABELS = ("host", "Hostname", "hostname", "instance")
STATIC_FIELDS = frozenset({
    "host.simulated", "host.unavailable", "cpu.count", "memory.total_bytes",
    "gpu.info", "gpu.mem_total_bytes",
})
DETAIL_FIELDS = frozenset({
    "cpu.load_avg_1m", "memory.swap_used_bytes", "cache.l2_hit_ratio", "cache.l3_hit_ratio",
    "gpu.power_limit_w", "gpu.sm_clock_mhz", "gpu.mem_clock_mhz", "gpu.pcie_rx_bytes_per_s",
    "gpu.pcie_tx_bytes_per_s", "gpu.nvlink_rx_bytes_per_s", "gpu.nvlink_tx_bytes_per_s",
    "gpu.nvlink_total_bytes_per_s", "gpu.ecc_corrected", "gpu.ecc_uncorrected", "gpu.xid_last",
    "gpu.xid_events", "gpu.sm_occupancy_percent", "gpu.throttle_reasons", "gpu.throttle_mask",
    "gpu.processes", "gpu.dram_bw_util_percent", "gpu.memory_utilization_percent",
    "gpu.tensor_active_percent", "gpu.energy_joules",
})
GPU = ("gpu",)
JOB = ("pid",)  # jobs are keyed by host and pid (the job name is the gpulens_job label)


def _rate(field: str, metric: str, labels: tuple[str, ...] = (), summed: str = "") -> MetricMap:
    """``rate()`` of one of gpulens' counters, summed over ``summed`` (e.g. every device)."""
    expr = f"rate({metric}{{$SEL}}[$RATE])"
    if summed:
        expr = f"sum without ({summed}) ({expr})"
    return MetricMap(field, "gpulens", (metric,), expr, None, labels)


def _mib_sum(*metrics: str) -> MetricMap:
    """dcgm-exporter's GPU memory size: the sum of its parts, in MiB."""
    expr = " + ".join(f"{m}{{$SEL}}" for m in metrics)
    return MetricMap("gpu.mem_total_bytes", "dcgm", metrics, f"({expr}) * {MIB}", None, ("gpu", "UUID"))


_BUSY = 'mode!~"idle|iowait"'
TABLE: tuple[MetricMap, ...] = (
    # ---- host: gpulens
    _g("host.simulated", "gpulens_host_simulated"),
    # busy as top counts it: everything but idle and iowait (SIMULATED samplers export busy/idle)
    MetricMap("cpu.total_percent", "gpulens", ("gpulens_cpu_seconds_total",),
              f"100 * sum without (cpu, mode) (rate(gpulens_cpu_seconds_total{{{_BUSY},$SEL}}[$RATE]))"
              " / sum without (cpu, mode) (rate(gpulens_cpu_seconds_total{$SEL}[$RATE]))", None),
    _g("cpu.load_avg_1m", "gpulens_load1"),
    _g("cpu.count", "gpulens_cpus"),
    _g("memory.total_bytes", "gpulens_memory_total_bytes"),
    _g("memory.used_bytes", "gpulens_memory_used_bytes"),
    _g("memory.available_bytes", "gpulens_memory_available_bytes"),
    _g("memory.swap_used_bytes", "gpulens_swap_used_bytes"),
    _rate("network.rx_bytes_per_s", "gpulens_network_receive_bytes_total", summed="device"),
    _rate("network.tx_bytes_per_s", "gpulens_network_transmit_bytes_total", summed="device"),
    _rate("storage.read_bytes_per_s", "gpulens_disk_read_bytes_total", summed="device"),
    _rate("storage.write_bytes_per_s", "gpulens_disk_written_bytes_total", summed="device"),
    _g("cache.l2_hit_ratio", "gpulens_cache_l2_hit_ratio"),
    _g("cache.l3_hit_ratio", "gpulens_cache_l3_hit_ratio"),
    _rate("cache.mem_bandwidth_bytes_per_s", "gpulens_memory_traffic_bytes_total"),
    # ---- host: node_exporter
    MetricMap("cpu.total_percent", "node", ("node_cpu_seconds_total",),
              '100 * (1 - sum without (cpu, mode) (rate(node_cpu_seconds_total{mode="idle",$SEL}[$RATE]))'
              ' / sum without (cpu, mode) (rate(node_cpu_seconds_total{$SEL}[$RATE])))',
              None, ("cpu", "mode")),
    MetricMap("cpu.load_avg_1m", "node", ("node_load1",), "node_load1{$SEL}"),
    MetricMap("cpu.count", "node", ("node_cpu_seconds_total",),
              'count without (cpu, mode) (node_cpu_seconds_total{mode="idle",$SEL})', None, ("cpu", "mode")),
    MetricMap("memory.total_bytes", "node", ("node_memory_MemTotal_bytes",), "node_memory_MemTotal_bytes{$SEL}"),
    MetricMap("memory.available_bytes", "node", ("node_memory_MemAvailable_bytes",),
              "node_memory_MemAvailable_bytes{$SEL}"),
    MetricMap("memory.used_bytes", "node", ("node_memory_MemAvailable_bytes", "node_memory_MemTotal_bytes"),
              "node_memory_MemTotal_bytes{$SEL} - node_memory_MemAvailable_bytes{$SEL}", None),
    MetricMap("memory.swap_used_bytes", "node", ("node_memory_SwapTotal_bytes", "node_memory_SwapFree_bytes"),
              "node_memory_SwapTotal_bytes{$SEL} - node_memory_SwapFree_bytes{$SEL}", None),
    MetricMap("network.rx_bytes_per_s", "node", ("node_network_receive_bytes_total",),
              'sum without (device) (rate(node_network_receive_bytes_total{device!="lo",$SEL}[$RATE]))',
              None, ("device",)),
    MetricMap("network.tx_bytes_per_s", "node", ("node_network_transmit_bytes_total",),
              'sum without (device) (rate(node_network_transmit_bytes_total{device!="lo",$SEL}[$RATE]))',
              None, ("device",)),
    MetricMap("storage.read_bytes_per_s", "node", ("node_disk_read_bytes_total",),
              f'sum without (device) (rate(node_disk_read_bytes_total{{device!~"{PARTITIONS}",$SEL}}[$RATE]))',
              None, ("device",)),
    MetricMap("storage.write_bytes_per_s", "node", ("node_disk_written_bytes_total",),
              f'sum without (device) (rate(node_disk_written_bytes_total{{device!~"{PARTITIONS}",$SEL}}[$RATE]))',
              None, ("device",)),
    # ---- GPU: gpulens
    _g("gpu.utilization_percent", "gpulens_gpu_utilization_ratio", 100, GPU),
    _g("gpu.memory_utilization_percent", "gpulens_gpu_memory_utilization_ratio", 100, GPU),
    _g("gpu.mem_used_bytes", "gpulens_gpu_memory_used_bytes", 1, GPU),
    _g("gpu.mem_total_bytes", "gpulens_gpu_memory_total_bytes", 1, GPU),
    _g("gpu.power_w", "gpulens_gpu_power_watts", 1, GPU),
    _g("gpu.power_limit_w", "gpulens_gpu_power_limit_watts", 1, GPU),
    _g("gpu.temperature_c", "gpulens_gpu_temperature_celsius", 1, GPU),
    _g("gpu.sm_clock_mhz", "gpulens_gpu_sm_clock_hertz", 1e-6, GPU),
    _g("gpu.mem_clock_mhz", "gpulens_gpu_memory_clock_hertz", 1e-6, GPU),
    _rate("gpu.pcie_rx_bytes_per_s", "gpulens_gpu_pcie_receive_bytes_total", GPU),
    _rate("gpu.pcie_tx_bytes_per_s", "gpulens_gpu_pcie_transmit_bytes_total", GPU),
    _rate("gpu.nvlink_rx_bytes_per_s", "gpulens_gpu_nvlink_receive_bytes_total", GPU),
    _rate("gpu.nvlink_tx_bytes_per_s", "gpulens_gpu_nvlink_transmit_bytes_total", GPU),
    _g("gpu.ecc_corrected", "gpulens_gpu_ecc_corrected_errors_total", 1, GPU),
    _g("gpu.ecc_uncorrected", "gpulens_gpu_ecc_uncorrected_errors_total", 1, GPU),
    MetricMap("gpu.xid_events", "gpulens", ("gpulens_gpu_xid_errors_total",),
              "increase(gpulens_gpu_xid_errors_total{$SEL}[$RATE]) > 0", None, (*GPU, "code")),
    _g("gpu.energy_joules", "gpulens_gpu_energy_joules_total", 1, GPU),
    _g("gpu.sm_activity_percent", "gpulens_gpu_sm_active_ratio", 100, GPU),
    _g("gpu.sm_occupancy_percent", "gpulens_gpu_sm_occupancy_ratio", 100, GPU),
    _g("gpu.dram_bw_util_percent", "gpulens_gpu_dram_active_ratio", 100, GPU),
    _g("gpu.tensor_active_percent", "gpulens_gpu_tensor_active_ratio", 100, GPU),
    _g("gpu.info", "gpulens_gpu_info", 1, ("gpu", "uuid", "name")),
    _g("gpu.throttle_reasons", "gpulens_gpu_throttle_reason", 1, (*GPU, "reason")),
    _g("gpu.processes", "gpulens_gpu_process_memory_used_bytes", 1, (*GPU, "pid")),
    # ---- GPU: dcgm-exporter (its default counters, etc/default-counters.csv)
    _d("gpu.utilization_percent", "DCGM_FI_DEV_GPU_UTIL"),
    _d("gpu.gr_engine_active_percent", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", 100),
    _d("gpu.memory_utilization_percent", "DCGM_FI_DEV_MEM_COPY_UTIL"),
    _d("gpu.mem_used_bytes", "DCGM_FI_DEV_FB_USED", MIB),
    # the reserved part counts: without it a T4 shows 14.8 GiB, not its 15 GiB
    _mib_sum("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"),
    _d("gpu.mem_total_bytes", "DCGM_FI_DEV_FB_TOTAL", MIB),
    _mib_sum("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"),
    _d("gpu.power_w", "DCGM_FI_DEV_POWER_USAGE"),
    _d("gpu.power_limit_w", "DCGM_FI_DEV_POWER_MGMT_LIMIT"),
    _d("gpu.energy_joules", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1e-3),
    _d("gpu.temperature_c", "DCGM_FI_DEV_GPU_TEMP"),
    _d("gpu.sm_clock_mhz", "DCGM_FI_DEV_SM_CLOCK"),
    _d("gpu.mem_clock_mhz", "DCGM_FI_DEV_MEM_CLOCK"),
    _d("gpu.pcie_rx_bytes_per_s", "DCGM_FI_PROF_PCIE_RX_BYTES"),
    _d("gpu.pcie_tx_bytes_per_s", "DCGM_FI_PROF_PCIE_TX_BYTES"),
    MetricMap("gpu.nvlink_total_bytes_per_s", "dcgm", ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",),
              "rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{$SEL}[$RATE])", None, ("gpu", "UUID")),
    _d("gpu.ecc_corrected", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"),
    _d("gpu.ecc_uncorrected", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
    _d("gpu.xid_last", "DCGM_FI_DEV_XID_ERRORS"),
    _d("gpu.throttle_mask", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
    _d("gpu.throttle_mask", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"),  # its name since DCGM 3.3
    _d("gpu.sm_activity_percent", "DCGM_FI_PROF_SM_ACTIVE", 100),
    _d("gpu.sm_occupancy_percent", "DCGM_FI_PROF_SM_OCCUPANCY", 100),
    _d("gpu.dram_bw_util_percent", "DCGM_FI_PROF_DRAM_ACTIVE", 100),
    _d("gpu.tensor_active_percent", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 100),
    # ---- GPU: AMD device-metrics-exporter (its metricslist.md, in ROCm/device-metrics-exporter); first row with data wins
    _a("gpu.utilization_percent", "gpu_gfx_activity"),
    _a("gpu.memory_utilization_percent", "gpu_umc_activity"),
    _a("gpu.mem_used_bytes", "gpu_used_vram", MIB),
    _a("gpu.mem_total_bytes", "gpu_total_vram", MIB),
    _a("gpu.power_w", "gpu_power_usage"),
    _a("gpu.power_w", "gpu_package_power"),  # MI3xx
    _a("gpu.power_w", "gpu_average_package_power"),  # MI2xx
    _a("gpu.temperature_c", "gpu_junction_temperature"),  # as gpulens' own AMD reading: junction, else edge
    _a("gpu.temperature_c", "gpu_edge_temperature"),
    _a("gpu.sm_clock_mhz", "gpu_clock", match='clock_type=~"(?i)(GPU_CLOCK_TYPE_)?system",'),
    _a("gpu.mem_clock_mhz", "gpu_clock", match='clock_type=~"(?i)(GPU_CLOCK_TYPE_)?memory",'),
    _a("gpu.energy_joules", "gpu_energy_consumed", 1e-6),
    _a("gpu.ecc_corrected", "gpu_ecc_correct_total"),
    _a("gpu.ecc_uncorrected", "gpu_ecc_uncorrect_total"),
    # XGMI (in the nvlink fields, as gpulens' own AMD reader): "Accumulated XGMI Link Data Read/Write
    # in KB", a series per link_index (device-metrics-exporter afd0fe81, gpuagent_gpu_metrics.go)
    _a_rate("gpu.nvlink_rx_bytes_per_s", "gpu_xgmi_link_rx", KIB, links="link_index"),
    _a_rate("gpu.nvlink_tx_bytes_per_s", "gpu_xgmi_link_tx", KIB, links="link_index"),
    # "Accumulated bytes received from / transmitted to the PCIe link" (listed as upcoming by AMD)
    _a_rate("gpu.pcie_rx_bytes_per_s", "pcie_rx"),
    _a_rate("gpu.pcie_tx_bytes_per_s", "pcie_tx"),
    # ---- jobs: gpulens only (no common exporter knows jobs)
    _g("job.info", "gpulens_job_info", 1, ("pid", "user", "tree_id", "cmdline", "job_key")),
    _g("job.start_time", "gpulens_job_start_time_seconds", 1, JOB),
    _g("job.cpu_percent", "gpulens_job_cpu_cores", 100, JOB),
    _g("job.rss_bytes", "gpulens_job_resident_memory_bytes", 1, JOB),
    _g("job.gpu_mem_bytes", "gpulens_job_gpu_memory_used_bytes", 1, ("pid", "gpu")),
    _g("host.unavailable", "gpulens_metric_unavailable_info", 1, ("gpu", "field", "reason")),
)

_AMD_PROF = ("AMD device-metrics-exporter: no such field by default (its GPU_PROF_* profiler "
             "fields are off by default and count other things)")
AMD_NOT_EXPORTED: Mapping[str, str] = {
    "power_limit_w": "AMD device-metrics-exporter exports no power cap (none of its fields is one)",
    "sm_activity_percent": _AMD_PROF,
    "sm_occupancy_percent": _AMD_PROF,
    "dram_bw_util_percent": _AMD_PROF,
    "tensor_active_percent": _AMD_PROF,
}
"""Why a GPU field is n/a on a GPU that AMD's device-metrics-exporter names: it exports nothing
for it (its GPUMetricField list, exporterconfig.proto at afd0fe81). GpuSample field -> reason."""

THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x001, "gpu_idle"), (0x002, "applications_clocks_setting"), (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"), (0x010, "sync_boost"), (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"), (0x080, "hw_power_brake_slowdown"), (0x100, "display_clock_setting"),
)
"""NVML's clocksThrottleReasons bits (dcgm-exporter's CLOCK_THROTTLE_REASONS value) -> gpulens' names."""


def throttle_names(mask: float) -> tuple[str, ...]:
    """The reasons set in a throttle bitmask; unknown bits as ``bit_0x...``; () for a bad value."""
    if not (mask == mask and 0 <= mask < 2**63) or mask != int(mask):
        return ()
    m = int(mask)
    names = [name for bit, name in THROTTLE_BITS if m & bit]
    known = sum(bit for bit, _ in THROTTLE_BITS)
    names += [f"bit_{1 << i:#x}" for i in range(63) if m & ~known & (1 << i)]
    return tuple(names)


def rows_for(names: set[str] | None = None) -> tuple[MetricMap, ...]:
    """The rows whose raw metrics all exist (``names`` from Prometheus); all rows if None."""
    if names is None:
        return TABLE
    return tuple(r for r in TABLE if all(m in names for m in r.metrics))


_PORT = re.compile(r"^\[?(.*?)\]?:[0-9]+$")


def host_of(labels: Mapping[str, str]) -> str | None:
    """The host a series belongs to: ``host``, else dcgm-exporter's ``Hostname``
    (releases) or ``hostname`` (its main branch), else ``instance`` without its
    port. None when none of them is set."""
    for key in ("host", "Hostname", "hostname"):
        value = labels.get(key)
        if value:
            return value
    inst = labels.get("instance")
    if not inst:
        return None
    m = _PORT.match(inst)
    return m.group(1) if m else inst


def gpu_of(labels: Mapping[str, str]) -> tuple[int, str] | None:
    """(index, uuid) of a GPU series; None without a usable ``gpu`` label."""
    idx = labels.get("gpu", "")
    if not idx.isdigit() or len(idx) > 4:
        return None
    return int(idx), labels.get("uuid") or labels.get("UUID") or ""


_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def parse_selector(selector: str) -> str:
    """``{cluster="a", env!~"dev.*"}`` -> ``cluster="a",env!~"dev.*",`` (ready for ``$SEL``).

    Only label matchers with double-quoted values are accepted, so a selector
    can never inject PromQL beyond the braces.

    Raises:
        ValueError: text that is not a list of label matchers.
    """
    text = selector.strip()
    if not text:
        return ""
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    out: list[str] = []
    pos = 0
    while pos < len(text):
        if not text[pos:].strip():
            break
        m = _MATCHER.match(text, pos)
        if m is None:
            raise ValueError(f"not a label matcher at {text[pos:pos + 30]!r} (expected name=\"value\")")
        out.append(f'{m.group(1)}{m.group(2)}"{m.group(3)}"')
        pos = m.end()
    return "".join(f"{x}," for x in out)


def escape_label_value(value: str) -> str:
    """Escape text for use inside a double-quoted PromQL string (``$host`` / ``$job``)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
