"""One AMD card read into a :class:`~gpulens.core.model.GpuSample`, every None with its reason.

Sources per field (the card's ``device/`` directory):

* utilization_percent: ``gpu_busy_percent``; memory_utilization_percent: ``mem_busy_percent``;
* mem_used_bytes / mem_total_bytes: ``mem_info_vram_used`` / ``mem_info_vram_total``;
* power_w: hwmon ``power1_average``, else ``power1_input`` (µW), else gpu_metrics v1.4+
  ``curr_socket_power``; power_limit_w: hwmon ``power1_cap``;
* temperature_c: hwmon junction (hotspot, ``temp2``: every SOC15 dGPU has it, MI300 has no edge
  sensor), else edge (``temp1``); m°C; else gpu_metrics v1.4+ ``temperature_hotspot``;
* sm_clock_mhz / mem_clock_mhz: the ``*`` level of ``pp_dpm_sclk`` / ``pp_dpm_mclk``, else hwmon
  ``freq1_input`` / ``freq2_input`` (Hz);
* pcie rx/tx: ``pcie_bw`` (see :mod:`.pcie`);
* ecc_uncorrected / ecc_corrected: the ``ue`` / ``ce`` sums of ``ras/*_err_count``, else amdsmi;
  re-read every :data:`RAS_EVERY_S` (a read makes the driver query the hardware's error registers);
* energy_joules: gpu_metrics v1.4-v1.6 ``energy_accumulator`` (2^-16 J units);
* nvlink rx/tx: XGMI, AMD's GPU-to-GPU link: gpu_metrics v1.4-v1.6 ``xgmi_read/write_data_acc``
  (KB, summed over links), else amdsmi; a rate between reads;
* throttle_reasons: gpu_metrics v1.3 ``indep_throttle_status`` (SMU_THROTTLER bits), else amdsmi.

Which files exist (power average or input, which temperature channel is the
junction, the RAS files) is settled when the reader opens; the files read
every tick stay open and are re-read from offset 0 (:class:`~.sysfs.OpenFiles`);
``mem_info_vram_total`` (the driver's fixed VRAM size) is read until it gives a
value, then again only after the card's files were closed. Every
:data:`RAS_EVERY_S` the card's directory is looked up: gone or replaced, its
kept files are closed (as on the first read that finds the device gone).
A ``pp_dpm_*`` table is parsed once per distinct text (a GPU has a few levels).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from gpulens.collectors.amd.amdsmi_backend import SmiFigures
from gpulens.collectors.amd.cards import Card, hwmon_dir
from gpulens.collectors.amd.fdinfo import CardProcesses
from gpulens.collectors.amd.gpu_metrics import (
    ENERGY_UNIT_J,
    XGMI_UNIT_BYTES,
    GpuMetrics,
    decode,
    throttle_names,
    version_text,
)
from gpulens.collectors.amd.names import PRIMARY_DIE_POWER, uuid_of
from gpulens.collectors.amd.pcie import PcieBw
from gpulens.collectors.amd.sysfs import (
    OpenFiles,
    listdir,
    parse_dpm,
    parse_ras,
    read_text,
)
from gpulens.core.model import GpuProcess, GpuSample

NO_EQUIVALENT = "not on AMD GPUs (no equivalent counter)"
NO_XGMI = ("XGMI (AMD's GPU link) is counted only in gpu_metrics v1.4+ (MI300-class) or through amdsmi; "
           "neither gives it here")
DEVICE_FIELDS = (
    "utilization_percent", "memory_utilization_percent", "mem_used_bytes", "mem_total_bytes", "power_w",
    "power_limit_w", "temperature_c", "sm_clock_mhz", "mem_clock_mhz", "pcie_rx_bytes_per_s",
    "pcie_tx_bytes_per_s", "ecc_corrected", "ecc_uncorrected", "energy_joules", "nvlink_rx_bytes_per_s",
    "nvlink_tx_bytes_per_s", "throttle_reasons",
)
"""Fields the driver exposes per physical GPU only (a partition card has none of them)."""
_STATIC_NOTES = {
    "sm_activity_percent": NO_EQUIVALENT, "sm_occupancy_percent": NO_EQUIVALENT,
    "tensor_active_percent": NO_EQUIVALENT,
    "dram_bw_util_percent": f"{NO_EQUIVALENT}; mem_busy_percent is given as memory utilization",
    "xid_events": "XID errors are NVIDIA's; AMD's hardware errors are the RAS (ECC) counts",
}
RAS_EVERY_S = 10.0
"""Seconds between reads of the RAS error counts (cumulative counters: a few seconds late at most)."""
MAX_BYTES = 1 << 50
MAX_UW = 10_000 * 10**6
"""10 kW in µW: more than any accelerator draws."""
NO_UNIQUE_ID = "unique_id absent or malformed (the driver gives it on MI100 and later parts)"
DPM_MEMO = 64
"""Distinct ``pp_dpm_*`` texts remembered per file (a table has 2-16 levels; more: parsed again)."""


class CardReader:
    """Reads one :class:`Card`; keeps its files open, and the XGMI counters between reads for rates."""

    def __init__(self, card: Card, *, pcie_background: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.card = card
        self._clock = clock
        self._files = OpenFiles(device=True)
        self._uuid = uuid_of(card.unique_id, card.partition)
        self._total: tuple[int | None, str | None] = (None, "mem_info_vram_total not read yet")
        self._total_generation = -1
        """The :attr:`OpenFiles.generation` ``_total`` was read in (-1: not read)."""
        self._dpm_memo: dict[str, dict[bytes, tuple[int | None, str | None]]] = {"pp_dpm_sclk": {}, "pp_dpm_mclk": {}}
        self._device_id = _identity(card.device)
        dev = str(card.device)
        self._dev = {name: os.path.join(dev, name) for name in (
            "gpu_busy_percent", "mem_busy_percent", "mem_info_vram_used", "mem_info_vram_total",
            "pp_dpm_sclk", "pp_dpm_mclk", "gpu_metrics")}
        hw = hwmon_dir(card.device) if card.partition == 0 else None
        self._hwmon = None if hw is None else str(hw)
        self._hw: dict[str, str] = {}
        self._temp_files: tuple[tuple[str, str], ...] = ()
        if hw is not None:
            self._hw = {name: str(hw / name) for name in ("power1_cap", "freq1_input", "freq2_input")}
            power = next((n for n in ("power1_average", "power1_input") if (hw / n).exists()), None)
            if power is not None:
                self._hw["power"] = str(hw / power)
            labels = {1: "edge", 2: "junction", 3: "mem"}
            for i in (1, 2, 3):
                text, _ = read_text(hw / f"temp{i}_label")
                if text:
                    labels[i] = text.lower()
            by_label = {label: i for i, label in sorted(labels.items(), reverse=True)}
            self._temp_files = tuple((label, str(hw / f"temp{by_label[label]}_input"))
                                     for label in ("junction", "edge") if label in by_label)
        self._ras = tuple(str(card.device / "ras" / n) for n in listdir(card.device / "ras")
                          if n.endswith("_err_count"))
        self._ras_read: tuple[tuple[int, int] | None, str, float] = (None, "", -1e18)
        """The RAS counts (or None and why) and when they (and the card's directory) were last looked at."""
        self._pcie: PcieBw | None = None
        if card.partition == 0 and (card.device / "pcie_bw").exists():
            self._pcie = PcieBw(card.device / "pcie_bw", background=pcie_background, clock=clock)
        self._xgmi: tuple[int, int, float] | None = None
        if card.partition == 0:
            self._xgmi_rates(self._metrics()[0], None, {}, clock())  # the first counters: the first read has a rate

    def read(self, index: int, procs: CardProcesses | None, smi: SmiFigures | None,
             parent_index: int | None = None, notes: Mapping[str, str] | None = None) -> GpuSample:
        """This card now, as GPU ``index``; ``parent_index``: the index of a partition's GPU;
        ``notes``: reasons the caller adds (amdsmi's, the process scan's)."""
        card = self.card
        why = dict(_STATIC_NOTES)
        if notes:
            why.update(notes)
        processes: tuple[GpuProcess, ...] = ()
        if procs:
            processes = procs.processes if len(procs.processes) < 2 else tuple(sorted(procs.processes, key=_pid))
            why.update(procs.reasons)
        if card.unique_id is None:
            why["uuid"] = NO_UNIQUE_ID
        uuid = self._uuid
        if card.partition:
            per_gpu = (f"the driver exposes it per physical GPU only: see partition 0 ({card.parent}"
                       + (f", GPU {parent_index})" if parent_index is not None else ")"))
            why.update(dict.fromkeys(DEVICE_FIELDS, per_gpu))
            return GpuSample(index, card.label, uuid, processes=processes, unavailable=why, vendor="amd")
        return self._read_device(index, uuid, processes, why, smi)

    def _read_device(self, index: int, uuid: str, processes: tuple[GpuProcess, ...], notes: dict[str, str],
                     smi: SmiFigures | None) -> GpuSample:
        now = self._clock()
        ras_counts, ras_why, ras_at = self._ras_read
        if now - ras_at >= RAS_EVERY_S or now < ras_at:
            self._check_device()
            ras_counts, ras_why = self._read_ras()
            self._ras_read = (ras_counts, ras_why, now)
        dev, files = self._dev, self._files
        integer = files.integer
        metrics, metrics_why = self._metrics()
        util, why = integer(dev["gpu_busy_percent"], hi=100)
        if util is None:
            notes["utilization_percent"] = why or "unreadable"
        mem_util, why = integer(dev["mem_busy_percent"], hi=100)
        if mem_util is None:
            notes["memory_utilization_percent"] = why or "unreadable"
        used, why = integer(dev["mem_info_vram_used"], hi=MAX_BYTES)
        if used is None:
            notes["mem_used_bytes"] = why or "unreadable"
        if self._total_generation != files.generation:
            self._total = integer(dev["mem_info_vram_total"], lo=1, hi=MAX_BYTES)
            if self._total[0] is not None:  # the VRAM size is fixed: kept until the card's files are closed
                files.forget(dev["mem_info_vram_total"])
                self._total_generation = files.generation
        total, why = self._total
        if total is None:
            notes["mem_total_bytes"] = why or "unreadable"
        power, limit = self._power(notes, metrics)
        rx = tx = None
        if self._pcie is None:
            notes["pcie_rx_bytes_per_s"] = notes["pcie_tx_bytes_per_s"] = (
                "pcie_bw absent: the driver gives no PCIe usage for this GPU (APUs, MI300-class, others)")
        else:
            rates, why = self._pcie.get()
            if rates is None:
                notes["pcie_rx_bytes_per_s"] = notes["pcie_tx_bytes_per_s"] = why or "unreadable"
            else:
                rx, tx = rates
        ecc = self._ecc(notes, smi, ras_counts, ras_why)
        nv_rx, nv_tx = self._xgmi_rates(metrics, smi, notes, now)
        return GpuSample(
            index, self.card.label, uuid,
            utilization_percent=None if util is None else float(util),
            memory_utilization_percent=None if mem_util is None else float(mem_util),
            mem_used_bytes=used, mem_total_bytes=total, power_w=power, power_limit_w=limit,
            temperature_c=self._temperature(notes, metrics),
            sm_clock_mhz=self._clock_mhz("sm_clock_mhz", "pp_dpm_sclk", "freq1_input", notes),
            mem_clock_mhz=self._clock_mhz("mem_clock_mhz", "pp_dpm_mclk", "freq2_input", notes),
            pcie_rx_bytes_per_s=rx, pcie_tx_bytes_per_s=tx,
            ecc_uncorrected=None if ecc is None else ecc[0], ecc_corrected=None if ecc is None else ecc[1],
            energy_joules=self._energy(metrics, metrics_why, notes),
            nvlink_rx_bytes_per_s=nv_rx, nvlink_tx_bytes_per_s=nv_tx,
            throttle_reasons=self._throttle(metrics, metrics_why, smi, notes),
            processes=processes, unavailable=notes, vendor="amd",
        )

    def _metrics(self) -> tuple[GpuMetrics | None, str | None]:
        blob, why = self._files.read(self._dev["gpu_metrics"], 4096)
        if blob is None:
            return None, why
        return decode(blob)

    @staticmethod
    def _energy(metrics: GpuMetrics | None, metrics_why: str | None, notes: dict[str, str]) -> float | None:
        if metrics is None:
            notes["energy_joules"] = metrics_why or "gpu_metrics unreadable"
            return None
        if metrics.version < (1, 4):
            notes["energy_joules"] = (f"gpu_metrics {version_text(metrics.version)}: no energy_accumulator "
                                      "with a documented unit (v1.4+ give 15.259 uJ units)")
            return None
        acc = metrics.get("energy_accumulator")
        if acc is None:
            notes["energy_joules"] = "energy_accumulator not provided by the firmware"
            return None
        return acc * ENERGY_UNIT_J

    def _power(self, notes: dict[str, str], metrics: GpuMetrics | None) -> tuple[float | None, float | None]:
        power = limit = None
        if self._hwmon is None:
            notes["power_w"] = notes["power_limit_w"] = "no hwmon directory under device/hwmon"
        else:
            path = self._hw.get("power")
            if path is None:
                notes["power_w"] = f"neither power1_average nor power1_input in {os.path.basename(self._hwmon)}"
            else:
                uw, why = self._files.integer(path, hi=MAX_UW)
                if uw is None:
                    notes["power_w"] = why or "unreadable"
                else:
                    power = uw / 1e6
            cap, why = self._files.integer(self._hw["power1_cap"], hi=MAX_UW)
            if cap is None:
                notes["power_limit_w"] = why or "unreadable"
            limit = None if cap is None else cap / 1e6
        if power is None and metrics is not None and metrics.version >= (1, 4):
            w = metrics.get("curr_socket_power")
            if w is not None:
                power = float(w)
                notes.pop("power_w", None)
        if power == 0 and self.card.device_id in PRIMARY_DIE_POWER:
            notes["power_w"] = ("MI250/MI250X: the driver reports the package's power on the first die only; "
                                "this die reads 0")
            power = None
        return power, limit

    def _temperature(self, notes: dict[str, str], metrics: GpuMetrics | None) -> float | None:
        whys = []
        for label, path in self._temp_files:
            mc, why = self._files.integer(path, lo=-273_000, hi=250_000)
            if mc is not None:
                return mc / 1000.0
            whys.append(f"{label}: {why}")
        if self._hwmon is None:
            notes["temperature_c"] = "no hwmon directory under device/hwmon"
        else:
            notes["temperature_c"] = "; ".join(whys) or "no junction or edge sensor"
        if metrics is not None and metrics.version >= (1, 4) and (c := metrics.get("temperature_hotspot")) is not None:
            notes.pop("temperature_c", None)
            return float(c)
        return None

    def _clock_mhz(self, field: str, dpm: str, freq: str, notes: dict[str, str]) -> int | None:
        raw, why = self._files.read(self._dev[dpm])
        if raw is not None:
            memo = self._dpm_memo[dpm]
            parsed = memo.get(raw)
            if parsed is None:
                parsed = _parse_dpm_bytes(raw, dpm)
                if len(raw) <= 1024:
                    if len(memo) >= DPM_MEMO:
                        memo.clear()
                    memo[raw] = parsed
            mhz, why = parsed
            if mhz is not None:
                return mhz
        if self._hwmon is not None:
            hz, hz_why = self._files.integer(self._hw[freq], hi=10**11)
            if hz is not None:
                return round(hz / 1e6)
            why = f"{why}; {hz_why}"
        notes[field] = why or "unreadable"
        return None

    @staticmethod
    def _ecc(notes: dict[str, str], smi: SmiFigures | None, counts: tuple[int, int] | None,
             why: str) -> tuple[int, int] | None:
        if counts is not None:
            return counts
        if smi is not None and smi.ecc is not None:
            return smi.ecc
        notes["ecc_corrected"] = notes["ecc_uncorrected"] = why
        return None

    def _read_ras(self) -> tuple[tuple[int, int] | None, str]:
        if not self._ras:
            return None, "no RAS error counters (device/ras/*_err_count): RAS is off or not on this GPU"
        ue = ce = 0
        for path in self._ras:
            text, why = self._files.text(path)  # kept open too: cheap when re-read
            name = os.path.basename(path)
            counts, why_parse = parse_ras(text, name) if text is not None else (None, why)
            if counts is None:
                return None, why_parse or "unreadable"
            ue, ce = ue + counts[0], ce + counts[1]
        return (ue, ce), ""

    def _xgmi_rates(self, metrics: GpuMetrics | None, smi: SmiFigures | None,
                    notes: dict[str, str], now: float) -> tuple[float | None, float | None]:
        read_kb = write_kb = None
        if metrics is not None and metrics.version >= (1, 4):
            read_kb, write_kb = metrics.total("xgmi_read_data_acc"), metrics.total("xgmi_write_data_acc")
        if (read_kb is None or write_kb is None) and smi is not None:
            read_kb, write_kb = smi.xgmi_read_kb, smi.xgmi_write_kb
        if read_kb is None or write_kb is None:
            self._xgmi = None
            notes["nvlink_rx_bytes_per_s"] = notes["nvlink_tx_bytes_per_s"] = NO_XGMI
            return None, None
        prev, self._xgmi = self._xgmi, (read_kb, write_kb, now)
        why = None
        if prev is None:
            why = "XGMI counters read for the first time: the rate needs a second read"
        elif read_kb < prev[0] or write_kb < prev[1]:
            why = "XGMI counters went back (driver reloaded)"
        elif now <= prev[2]:
            why = "no time passed since the last read"
        if why is not None or prev is None:
            notes["nvlink_rx_bytes_per_s"] = notes["nvlink_tx_bytes_per_s"] = why or "no previous read"
            return None, None
        dt = now - prev[2]
        return (read_kb - prev[0]) * XGMI_UNIT_BYTES / dt, (write_kb - prev[1]) * XGMI_UNIT_BYTES / dt

    def _throttle(self, metrics: GpuMetrics | None, metrics_why: str | None, smi: SmiFigures | None,
                  notes: dict[str, str]) -> tuple[str, ...]:
        mask = metrics.get("indep_throttle_status") if metrics is not None else None
        if mask is None and smi is not None:
            mask = smi.indep_throttle
        if mask is not None:
            return throttle_names(mask)
        if metrics is None:
            notes["throttle_reasons"] = metrics_why or "gpu_metrics unreadable"
        else:
            notes["throttle_reasons"] = (f"gpu_metrics {version_text(metrics.version)}: no ASIC-independent "
                                         "throttle status (its throttle_status bits are ASIC-specific)")
        return ()

    def _check_device(self) -> None:
        """Close the card's kept files if its directory is gone or is another one now."""
        now = _identity(self.card.device)
        if now != self._device_id:
            self._device_id = now
            self._files.close_all()

    def close(self) -> None:
        """Stop the PCIe reader thread and close the files kept open."""
        if self._pcie is not None:
            self._pcie.close()
        self._files.close()


def _pid(p: GpuProcess) -> int:
    return p.pid


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path``, None when it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _parse_dpm_bytes(raw: bytes, name: str) -> tuple[int | None, str | None]:
    try:
        text = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        return None, f"{name} is not text"
    return parse_dpm(text, name)
