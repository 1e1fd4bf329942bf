"""The sampler: every collector in one HostSample, GPUs from the fake NVML
test double (tests/fakes/fake_nvml.py), GPU memory joined onto jobs by pid."""

from __future__ import annotations

import os
import re

from gpulens.collectors.sampler import Sampler, gpu_memory_by_pid
from gpulens.core.model import GpuProcess, GpuSample
from gpulens.ipc.serialize import sample_from_dict, sample_to_dict
from tests.fakes.fake_nvml import make_fake_nvml
from tests.fakes.own_tree import own_tree_pattern


def test_sample_with_fake_gpus_joins_gpu_memory_to_jobs() -> None:
    fake = make_fake_nvml(gpus=2)
    fake.add_process(1, os.getpid(), 3 << 30)
    with Sampler(hostname="node01", job_pattern=own_tree_pattern(), nvml=fake) as sampler:
        sample = sampler.sample()
    assert sample.host == "node01"
    assert [g.index for g in sample.gpus] == [0, 1]
    (me,) = [j for j in sample.jobs if j.pid == os.getpid()]
    assert me.gpu_mem_bytes == {"1": 3 << 30}
    assert "gpus" not in sample.unavailable
    assert sample.cpu.total_percent is not None
    # every None in the cache figures has its reason
    for name in ("l2_hit_ratio", "l3_hit_ratio", "mem_bandwidth_bytes_per_s"):
        if getattr(sample.cache, name) is None:
            assert sample.unavailable[f"cache.{name}"]
    assert sample_from_dict(sample_to_dict(sample)) == sample


def test_no_gpus_gives_reasons_not_a_crash() -> None:
    with Sampler(nvml=None, amd=None) as sampler:
        sample = sampler.sample()
    assert sample.gpus == () and sample.unavailable["gpus"] == "GPU collection disabled"
    fake = make_fake_nvml(gpus=1, init_error=make_fake_nvml().NVMLError_LibraryNotFound)
    with Sampler(nvml=fake) as sampler:
        sample = sampler.sample()
    assert sample.gpus == () and sample.unavailable["gpus"]


def test_gpu_memory_by_pid_sums_per_gpu() -> None:
    gpus = [
        GpuSample(0, "g", "u0", processes=(GpuProcess(7, 100), GpuProcess(8, None))),
        GpuSample(1, "g", "u1", processes=(GpuProcess(7, 50),)),
    ]
    assert gpu_memory_by_pid(gpus) == {7: {"0": 100, "1": 50}}


def _proc_files_open() -> set[str]:
    """The /proc files this process holds open (the listing's own descriptor aside)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/proc/") and not target.startswith("/proc/self/fd"):
            out.add(re.sub(r"^/proc/\d+/net/", "/proc/net/", target))  # /proc/net is /proc/self/net
    return out


def test_close_gives_back_the_kept_proc_files() -> None:
    before = _proc_files_open()
    me = str(os.getpid())
    with Sampler(job_pattern=own_tree_pattern(), nvml=None, amd=None, kubelet=None) as sampler:
        sampler.sample()
        sampler.sample()
        kept = _proc_files_open() - before
        assert {"/proc/stat", "/proc/meminfo", "/proc/net/dev", "/proc/diskstats", "/proc/loadavg"} <= kept
        assert f"/proc/{me}/stat" in kept  # this process is a job: its stat is read every tick
    assert _proc_files_open() - before == set()
