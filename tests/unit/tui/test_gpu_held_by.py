"""The GPU screen's "held by": the pod and container the kubelet gave the GPU first, then other holders."""

from __future__ import annotations

from gpulens.core.model import GpuSample, JobInfo, Workload
from gpulens.tui.screens.gpu import held_by
from tests.unit.store.test_store import T0, sample

GIVEN = Workload(namespace="ml", pod="train-0", container="trainer", found_by="kubelet")
SAME_POD = Workload(pod_uid="5e1f0000-0000-4000-8000-00000000000a", namespace="ml", pod="train-0", ns_pid=1,
                    found_by="cgroup")
SLURM = Workload(slurm_job="4242", slurm_step="0", slurm_task="3", found_by="cgroup")


def _job(pid: int, w: Workload) -> JobInfo:
    return JobInfo(pid=pid, tree_id="t", cmdline="x", user="u", start_time=T0 - 5, gpu_mem_bytes={"0": 1},
                   workload=w)


def test_the_allocation_comes_first_and_its_own_processes_are_not_repeated() -> None:
    s = sample(T0, host="n1", jobs=(_job(7, SAME_POD), _job(8, SLURM)))
    g = GpuSample(0, "g", "GPU-0", allocated=GIVEN)
    assert held_by(s, g) == "pod ml/train-0 container trainer, slurm 4242.0"
    assert held_by(s, GpuSample(0, "g", "GPU-0")) == "pod ml/train-0, slurm 4242.0"  # no allocation: as before
    assert held_by(sample(T0, host="n1"), g) == "pod ml/train-0 container trainer"  # given, no process yet
    assert held_by(None, g) == ""


def test_the_process_table_title_says_why_sm_util_is_na() -> None:
    from gpulens.core.model import GpuProcess
    from gpulens.tui.screens.gpu import procs_title

    with_util = GpuSample(0, "g", "GPU-0", processes=(GpuProcess(pid=1, used_memory_bytes=5, sm_util_percent=3.0),))
    assert "n/a" not in procs_title(with_util)
    unsupported = GpuSample(0, "g", "GPU-0", processes=(GpuProcess(pid=1, used_memory_bytes=5),),
                            unavailable={"processes.sm_util_percent": "NVML: not supported on this GPU"})
    assert procs_title(unsupported).endswith("SM util n/a: NVML: not supported on this GPU")
    no_sample = GpuSample(0, "g", "GPU-0", processes=(GpuProcess(pid=1, used_memory_bytes=5),))
    assert "no utilization sample" in procs_title(no_sample)
