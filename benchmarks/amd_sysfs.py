"""CPU milliseconds per read of 8 AMD GPUs through sysfs + DRM fdinfo, beside NVML's for 8 GPUs.

No AMD GPU here: the tree is the MI210 fixture (tests/data/amdgpu/mi210) copied
to card0..card7 in a temporary root, with a fake /proc of 8 processes, one per
GPU, each holding two descriptors on its GPU's render node (one DRM client) and
one other file. The AMD collector reads it as it reads /sys and /proc
(``GPULENS_SYSFS_ROOT``), pcie_bw on its reader threads as in production. The
peer is the NVML path measured in the same run: the fake 8-GPU NVML test
double (tests/fakes/fake_nvml.py) behind the real NvmlCollector, one process
per GPU, as benchmarks/collector.py does. CPU time is ``time.thread_time()``
around ``read()`` (the sampling thread's user + sys; the pcie_bw threads are
apart), median over 200 reads.

Fixture files carry no driver work: on a real GPU each sysfs read runs the
driver's show function (SMU queries behind gpu_metrics, pp_dpm_*, hwmon), which
is not in these figures. They never change here either, so the ``pp_dpm_*``
tables, parsed once per distinct text (a GPU has a few levels), are always
known: the read with every table parsed anew is printed too (a part whose
table prints the live clock as its level).

Also printed: what finding new GPU clients costs, not part of a read: the
KFD's compute processes' ``fd`` links listed (every 5 s; the read with that
listing every time is shown), and every process's listed (at open and every
30 s) over this machine's real /proc.

Run: ``.venv/bin/python benchmarks/amd_sysfs.py``
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.fakes

from gpulens.collectors.amd.collector import AmdCollector
from gpulens.collectors.amd.fdinfo import DrmClients
from gpulens.collectors.nvml.collector import NvmlCollector
from tests.fakes.amd_tree import AMD_DATA, fdinfo
from tests.fakes.fake_nvml import make_fake_nvml

GPUS = 8
READS = 200
TARGET_MS = 0.5


def cpu_ms(fn: Callable[[], object]) -> float:
    t0 = time.thread_time()
    fn()
    return (time.thread_time() - t0) * 1000


def median_ms(fn: Callable[[], object], reads: int = READS) -> float:
    fn()
    return statistics.median(cpu_ms(fn) for _ in range(reads))


def dpm_parsed_each_read(amd: AmdCollector) -> Callable[[], object]:
    """``amd.read`` with the remembered pp_dpm tables forgotten first (inside the timing: a few us more)."""
    memos = [memo for reader in amd._readers for memo in reader._dpm_memo.values()]

    def read() -> object:
        for memo in memos:
            memo.clear()
        return amd.read()
    return read


def build(root: Path) -> None:
    """8 MI210 cards and 8 processes on them under ``root``."""
    src = AMD_DATA / "mi210" / "sys" / "class" / "drm" / "card0"
    drm = root / "sys" / "class" / "drm"
    for i in range(GPUS):
        card = drm / f"card{i}"
        shutil.copytree(src, card)
        dev = card / "device"
        shutil.rmtree(dev / "drm")
        (dev / "drm" / f"card{i}").mkdir(parents=True)
        (dev / "drm" / f"renderD{128 + i}").mkdir()
        (dev / "unique_id").write_text(f"{0x7c3dbc1c3b2d2a50 + i:016x}\n")
        (dev / "uevent").write_text((dev / "uevent").read_text().replace("0000:03:00.0", f"0000:{3 + i:02x}:00.0"))
        pid = 1000 + i
        for fd in (5, 6):
            (root / "proc" / str(pid) / "fd").mkdir(parents=True, exist_ok=True)
            (root / "proc" / str(pid) / "fdinfo").mkdir(parents=True, exist_ok=True)
            os.symlink(f"/dev/dri/renderD{128 + i}", root / "proc" / str(pid) / "fd" / str(fd))
            (root / "proc" / str(pid) / "fdinfo" / str(fd)).write_text(
                fdinfo(1 + i, vram_kib=10 << 20, gfx_ns=10**9 * i, compute_ns=10**9))
        os.symlink("/dev/null", root / "proc" / str(pid) / "fd" / "3")
        (root / "sys" / "class" / "kfd" / "kfd" / "proc" / str(pid)).mkdir(parents=True)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root)
        fake = make_fake_nvml(gpus=GPUS)
        for gpu in range(GPUS):
            fake.add_process(gpu, 1000 + gpu, 10 << 30, sm_util=80, mem_util=30)
        nvml = NvmlCollector(fake, clock=fake.clock)
        amd = AmdCollector(root, use_amdsmi=False)
        scan_each = AmdCollector(root, use_amdsmi=False, rescan_s=0.0)
        try:
            found = amd.read()
            assert len(found.gpus) == GPUS and all(len(g.processes) == 1 for g in found.gpus), found
            ours, peer, each, cold = [], [], [], []
            parse_dpm = dpm_parsed_each_read(amd)
            for _ in range(5):  # in turns, so both see the same machine load
                ours.append(median_ms(amd.read, READS // 5))
                peer.append(median_ms(nvml.read, READS // 5))
                each.append(median_ms(scan_each.read, READS // 5))
                cold.append(median_ms(parse_dpm, READS // 5))
        finally:
            amd.close()
            scan_each.close()
            nvml.close()
    real = DrmClients(Path("/proc"), {"renderD128": "card0"}, rescan_s=1e9)
    scan = statistics.median(cpu_ms(lambda: real._scan(time.monotonic())) for _ in range(20))
    procs = sum(1 for n in os.listdir("/proc") if n.isdigit())
    a, n = statistics.median(ours), statistics.median(peer)
    print(f"AMD sysfs + fdinfo, {GPUS} GPUs, 8 processes : median {a:.3f} ms CPU per read "
          f"(medians of 5 rounds: {', '.join(f'{x:.3f}' for x in ours)})")
    print(f"NVML fake, {GPUS} GPUs (same run, peer)      : median {n:.3f} ms CPU per read -> AMD/NVML {a / n:.2f}x")
    print(f"AMD with KFD processes' fds listed every read: median {statistics.median(each):.3f} ms "
          "(fixture; done every 5 s)")
    print(f"AMD with every pp_dpm table parsed anew      : median {statistics.median(cold):.3f} ms "
          "(tables remembered by text: a part printing its live clock)")
    print(f"every process's fds listed, this machine     : {scan:.2f} ms CPU for {procs} processes "
          "(at open, then every 30 s)")
    print(f"target <= {TARGET_MS} ms per tick: {'met' if a <= TARGET_MS else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
