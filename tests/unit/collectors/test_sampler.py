"""The sampler: every collector in one HostSample, GPUs from the fake NVML
test double (tests/fakes/fake_nvml.py), GPU memory joined onto jobs by pid."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from gpulens.collectors.host import MIN_INTERVAL_S, HostCollector
from gpulens.collectors.procstat import OncePerTick, ProcFile
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


class _Counted:
    """A ProcFile stand-in that counts its reads (the real file read through it)."""

    def __init__(self, real: ProcFile) -> None:
        self.real, self.path, self.reads = real, real.path, 0

    def read(self) -> bytes:
        self.reads += 1
        return self.real.read()

    def close(self) -> None:
        self.real.close()


def test_loadavg_is_read_once_a_tick_for_the_load_and_the_last_pid() -> None:
    with Sampler(job_pattern=own_tree_pattern(), nvml=None, amd=None, kubelet=None) as sampler:
        shared = sampler._loadavg
        assert shared is not None and sampler._jobs._loadavg is None  # the scan reads the sampler's
        counted = _Counted(shared.file)
        shared.file = counted  # type: ignore[assignment]
        sample = sampler.sample()
        assert counted.reads == 1
        load = sample.cpu.load_avg_1m
        assert load is not None and abs(load - os.getloadavg()[0]) < 0.5  # /proc/loadavg's two decimals
        sampler.sample()
        assert counted.reads == 2


def test_once_per_tick_reads_again_only_after_fresh_and_keeps_no_failure(tmp_path: Path) -> None:
    path = tmp_path / "loadavg"
    path.write_text("0.50 0.40 0.30 2/109 8547\n")
    once = OncePerTick(ProcFile(str(path), 256))
    assert once.read() == once.read() == b"0.50 0.40 0.30 2/109 8547\n"
    path.write_text("1.25 0.40 0.30 2/109 9000\n")
    assert once.read().startswith(b"0.50")  # the same tick
    once.fresh()
    assert once.read().startswith(b"1.25")
    once.file.close()
    path.unlink()
    once.fresh()
    with pytest.raises(OSError):
        once.read()
    path.write_text("2.00 0.40 0.30 2/109 9001\n")
    assert once.read().startswith(b"2.00")  # the failure was not kept


def test_a_shared_loadavg_gives_the_host_its_load_or_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "loadavg"
    path.write_text("0.75 0.40 0.30 2/109 8547\n")
    once = OncePerTick(ProcFile(str(path), 256))
    host = HostCollector(loadavg=once)
    time.sleep(MIN_INTERVAL_S)
    once.fresh()
    assert host.sample().cpu.load_avg_1m == 0.75
    path.write_text("garbage\n")
    once.fresh()
    reading = host.sample()
    assert reading.cpu.load_avg_1m is None and "loadavg failed" in reading.unavailable["cpu.load_avg_1m"]
    host.close()
    once.file.close()
