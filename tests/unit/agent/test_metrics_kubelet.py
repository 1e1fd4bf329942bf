"""The kubelet's GPU allocation (``GpuSample.allocated``) labels the GPU's series, as dcgm-exporter's do;
the first job process holding memory on it labels them only where the allocation is not known."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.core import Metric

from gpulens.agent.metrics_families import families
from gpulens.core.model import JobInfo, Workload
from tests.unit.store.test_store import T0, sample

GIVEN = Workload(namespace="ml", pod="train-0", container="trainer", found_by="kubelet")
OTHER = Workload(pod_uid="5e1f0000-0000-4000-8000-000000000001", namespace="llm-serving", pod="vllm-0",
                 found_by="cgroup")


def _gpu_labels(metrics: list[Metric]) -> dict[str, dict[str, str]]:
    return {s.labels["gpu"]: s.labels for m in metrics for s in m.samples if s.name == "gpulens_gpu_power_watts"}


def test_the_allocation_labels_the_gpu_before_the_processes_on_it() -> None:
    holder = JobInfo(pid=7, tree_id="t", cmdline="serve", user="erin", start_time=T0 - 5,
                     gpu_mem_bytes={"0": 1 << 30}, workload=OTHER)
    s = sample(T0, host="n1", jobs=(holder,))
    given = replace(s, gpus=(replace(s.gpus[0], allocated=GIVEN), *s.gpus[1:]))
    gpu = _gpu_labels(families(given))["0"]
    assert (gpu["pod"], gpu["namespace"], gpu["container"]) == ("train-0", "ml", "trainer")
    assert "pod_uid" not in gpu  # the kubelet sends no UID; none is made up
    gpu = _gpu_labels(families(s))["0"]  # not allocated (no kubelet): the holder's, as before
    assert (gpu["pod"], gpu["namespace"]) == ("vllm-0", "llm-serving") and "container" not in gpu
