"""Issue 29: /metrics names the pod, namespace and container as dcgm-exporter does, so dashboards join."""

from __future__ import annotations

from prometheus_client.core import Metric

from gpulens.agent.metrics_families import families
from gpulens.core.model import JobInfo, Workload
from tests.unit.store.test_store import T0, sample

POD = Workload(runtime="containerd", container_id="ab" * 32, pod_uid="5e1f0000-0000-4000-8000-000000000001",
               qos="burstable", namespace="llm-serving", pod="vllm-0", container="vllm", found_by="cgroup")
SLURM = Workload(slurm_job="4242", slurm_step="0", slurm_task="1", found_by="cgroup")


def _series(metrics: list[Metric], name: str) -> list[dict[str, str]]:
    return [s.labels for m in metrics for s in m.samples if s.name == name]


def test_gpu_and_job_series_carry_the_pod_labels() -> None:
    served = JobInfo(pid=7, tree_id="t", cmdline="serve", user="erin", start_time=T0 - 5,
                     gpu_mem_bytes={"0": 1 << 30}, workload=POD)
    metrics = families(sample(T0, host="n1", jobs=(served,)))
    (gpu,) = _series(metrics, "gpulens_gpu_power_watts")
    assert (gpu["gpu"], gpu["pod"], gpu["namespace"], gpu["container"]) == ("0", "vllm-0", "llm-serving", "vllm")
    assert gpu["pod_uid"] == POD.pod_uid and "slurm_job" not in gpu
    (info,) = _series(metrics, "gpulens_job_info")
    assert (info["pod"], info["namespace"], info["job_key"]) == ("vllm-0", "llm-serving", "")


def test_series_without_a_workload_keep_their_labels() -> None:
    plain = JobInfo(pid=8, tree_id="t", cmdline="x", user="u", start_time=T0 - 5, gpu_mem_bytes={"0": 1})
    metrics = families(sample(T0, host="n1", jobs=(plain,)))
    (gpu,) = _series(metrics, "gpulens_gpu_power_watts")
    assert set(gpu) == {"host", "gpu", "uuid"}
    slurm = JobInfo(pid=9, tree_id="t", cmdline="x", user="u", start_time=T0 - 5, workload=SLURM,
                    job_key="SLURM_JOB_ID=4242")
    (info,) = _series(families(sample(T0, host="n1", jobs=(slurm,))), "gpulens_job_info")
    assert info["slurm_job"] == "4242" and "pod" not in info
