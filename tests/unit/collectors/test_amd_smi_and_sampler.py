"""The optional amdsmi backend (a test double, and an amdsmi whose import raises KeyError as it does
without ROCm), and AMD GPUs in the sampler beside NVIDIA's: indices, reasons, NVML missing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpulens.collectors.amd.amdsmi_backend import AmdSmi
from gpulens.collectors.amd.collector import AmdCollector
from gpulens.collectors.sampler import Sampler
from tests.fakes.amd_tree import AmdTree, Clock
from tests.fakes.fake_amdsmi import BROKEN_INIT, AmdSmiException, make_fake_amdsmi
from tests.fakes.fake_nvml import make_fake_nvml


def test_fake_amdsmi_fills_what_sysfs_lacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = AmdTree(tmp_path, "radeon")  # no RAS, gpu_metrics v1.3: no XGMI
    t.set("card0", "gpu_metrics", b"")  # and no throttle status either
    fake = make_fake_amdsmi({"0000:0b:00.0": {
        "ecc": {"correctable_count": 5, "uncorrectable_count": 0, "deferred_count": 0},
        "metrics": {"xgmi_read_data_acc": [10, "N/A"], "xgmi_write_data_acc": [20, 0],
                    "indep_throttle_status": 1 << 35},
    }})
    monkeypatch.setitem(sys.modules, "amdsmi", fake)  # imported by name, as the real one would be
    clock = Clock()
    with AmdCollector(t.root, pcie_background=False, clock=clock) as c:
        reading = c.read()
        (g,) = reading.gpus
        assert (g.ecc_corrected, g.ecc_uncorrected) == (5, 0)
        assert g.throttle_reasons == ("temp_edge",)
        assert "first time" in g.unavailable["nvlink_rx_bytes_per_s"]  # XGMI counters found: a rate next read
        fake.state["gpus"]["0000:0b:00.0"]["metrics"]["xgmi_read_data_acc"] = [12, "N/A"]
        clock.advance(2.0)
        g = c.read().gpus[0]
    assert g.nvlink_rx_bytes_per_s == 2 * 1024 / 2.0 and g.nvlink_tx_bytes_per_s == 0.0
    assert "amdsmi" not in reading.unavailable
    assert fake.state["shut"] == 1


def test_amdsmi_errors_are_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    smi = AmdSmi(make_fake_amdsmi({"0000:01:00.0": {"metrics": {}}}))
    fig = smi.read("0000:01:00.0")
    assert fig.ecc is None and "NOT_SUPPORTED" in fig.unavailable["ecc"]
    assert "does not list" in smi.read("0000:99:00.0").unavailable["amdsmi"]
    broken = AmdSmi(make_fake_amdsmi(init_error=AmdSmiException("AMDSMI_STATUS_DRIVER_NOT_LOADED")))
    assert broken.why is not None and "amdsmi_init failed" in broken.why


def test_amdsmi_import_raising_keyerror_is_handled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "site" / "amdsmi"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(BROKEN_INIT)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    smi = AmdSmi()
    assert smi.why is not None and "KeyError" in smi.why
    t = AmdTree(tmp_path / "root", "mi210")
    with AmdCollector(t.root, pcie_background=False) as c:  # the collector still reads every sysfs field
        reading = c.read()
    assert reading.gpus[0].utilization_percent == 87.0
    assert "KeyError" in reading.unavailable["amdsmi"]


def test_mixed_node_amd_indices_follow_nvidia(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi250x")
    amd = AmdCollector(t.root, use_amdsmi=False, pcie_background=False)
    with Sampler(hostname="mixed", nvml=make_fake_nvml(gpus=2), amd=amd, kubelet=None) as s:
        sample = s.sample()
    assert [(g.index, g.vendor) for g in sample.gpus] == [(0, "nvidia"), (1, "nvidia"), (2, "amd"), (3, "amd")]
    assert "gpus" not in sample.unavailable


def test_nvml_missing_does_not_hide_amd(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "radeon")
    fake = make_fake_nvml(gpus=1, init_error=make_fake_nvml().NVMLError_LibraryNotFound)
    amd = AmdCollector(t.root, use_amdsmi=False, pcie_background=False)
    with Sampler(nvml=fake, amd=amd, kubelet=None) as s:
        sample = s.sample()
    assert [(g.index, g.vendor) for g in sample.gpus] == [(0, "amd")]
    assert "gpus" not in sample.unavailable  # NVIDIA's absence is no reason when AMD GPUs are here


def test_no_gpu_reason_names_both_vendors(tmp_path: Path) -> None:
    fake = make_fake_nvml(gpus=1, init_error=make_fake_nvml().NVMLError_LibraryNotFound)
    with Sampler(nvml=fake, amd=AmdCollector(tmp_path), kubelet=None) as s:
        why = s.sample().unavailable["gpus"]
    assert "NVML init failed" in why and "AMD: no DRM cards" in why
    with Sampler(nvml=None, amd=None, kubelet=None) as s:
        assert s.sample().unavailable["gpus"] == "GPU collection disabled"


def test_nvidia_only_node_has_no_amd_note() -> None:
    with Sampler(nvml=make_fake_nvml(gpus=1), amd="auto", kubelet=None) as s:
        sample = s.sample()
    assert [g.vendor for g in sample.gpus] == ["nvidia"]
    assert not [k for k in sample.unavailable if k.startswith("gpus")]
