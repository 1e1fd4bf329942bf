"""/metrics names AMD GPUs with a ``vendor`` label; NVIDIA series keep exactly the labels they had."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.core import Metric

from gpulens.agent.metrics_counters import Counters
from gpulens.agent.metrics_families import families
from tests.unit.store.test_store import T0, sample


def _series(metrics: list[Metric], name: str) -> list[dict[str, str]]:
    return [s.labels for m in metrics for s in m.samples if s.name == name]


def test_vendor_label_only_on_amd_gpus() -> None:
    nv = sample(T0, host="mixed")
    amd_gpu = replace(nv.gpus[0], index=1, uuid="AMD-7c3dbc1c3b2d2a56", name="AMD Instinct MI210", vendor="amd")
    s = replace(nv, gpus=(nv.gpus[0], amd_gpu))
    counters = Counters()
    counters.observe(s)
    counters.observe(replace(s, time=T0 + 1))
    metrics = families(replace(s, time=T0 + 1), counters)
    power = {lab["gpu"]: lab for lab in _series(metrics, "gpulens_gpu_power_watts")}
    assert set(power["0"]) == {"host", "gpu", "uuid"}
    assert power["1"]["vendor"] == "amd" and power["1"]["uuid"] == "AMD-7c3dbc1c3b2d2a56"
    energy = {lab["gpu"]: lab for lab in _series(metrics, "gpulens_gpu_energy_joules_total")}
    assert "vendor" not in energy["0"] and energy["1"]["vendor"] == "amd"
    (info,) = [lab for lab in _series(metrics, "gpulens_gpu_info") if lab["gpu"] == "1"]
    assert (info["name"], info["vendor"]) == ("AMD Instinct MI210", "amd")
