"""Processes on AMD GPUs from DRM fdinfo: memory, utilization between two reads, one count per client id."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpulens.collectors.amd.collector import AmdCollector
from gpulens.collectors.amd.fdinfo import FIRST_SEEN, Unlisted, UnlistedKind, parse_fdinfo
from tests.fakes.amd_tree import AmdTree, Clock, fdinfo


def collector(t: AmdTree, clock: Clock) -> AmdCollector:
    return AmdCollector(t.root, use_amdsmi=False, pcie_background=False, rescan_s=0.0, clock=clock)


def test_parse_fdinfo_keys_units_and_capacity() -> None:
    c = parse_fdinfo(fdinfo(7, vram_kib=2048, gfx_ns=1000, compute_ns=4000, capacity={"compute": 4}))
    assert c is not None and c.client_id == "7" and c.vram_bytes == 2048 * 1024
    assert c.busy_ns == 1000 + 4000 / 4
    assert parse_fdinfo(fdinfo(7, driver="i915")) is None
    newer = "drm-driver:\tamdgpu\ndrm-client-id:\t3\ndrm-resident-vram:\t5 MiB\ndrm-total-vram:\t9 MiB\n"
    assert (c := parse_fdinfo(newer)) is not None and c.vram_bytes == 5 << 20 and c.busy_ns is None


def test_memory_and_utilization_over_a_tick(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi210")
    t.open_fd(4242, 5, "renderD128", fdinfo(11, vram_kib=4 << 20, gfx_ns=0, compute_ns=1_000_000_000))
    t.other_fd(4242, 3)
    clock = Clock()
    with collector(t, clock) as c:
        clock.advance(1.0)
        (p,) = c.read().gpus[0].processes
        assert p.pid == 4242 and p.used_memory_bytes == 4 << 30
        assert p.sm_util_percent == 0.0  # primed when the collector opened: no busy time since
        clock.advance(2.0)
        t.open_fd(4242, 5, "renderD128", fdinfo(11, vram_kib=4 << 20, gfx_ns=200_000_000,
                                                 compute_ns=2_000_000_000))
        g = c.read().gpus[0]
    (p,) = g.processes
    assert p.sm_util_percent == pytest.approx((0.2 + 1.0) / 2.0 * 100)
    assert p.mem_util_percent is None and g.unavailable["processes.mem_util_percent"]


def test_one_client_on_several_fds_counts_once(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi210")
    for fd in (5, 6, 9):  # dup'ed descriptors of one open: one drm-client-id
        t.open_fd(100, fd, "renderD128", fdinfo(3, vram_kib=1024))
    t.open_fd(100, 7, "card0", fdinfo(4, vram_kib=512))  # a second client of the same process
    with collector(t, Clock()) as c:
        (p,) = c.read().gpus[0].processes
    assert p.used_memory_bytes == (1024 + 512) * 1024


def test_a_new_client_has_no_rate_yet(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi210")
    clock = Clock()
    with collector(t, clock) as c:
        t.open_fd(77, 5, "renderD128", fdinfo(1, gfx_ns=5_000))
        clock.advance(1.0)
        g = c.read().gpus[0]
    (p,) = g.processes
    assert p.sm_util_percent is None and g.unavailable["processes.sm_util_percent"] == FIRST_SEEN


def test_partition_processes_go_to_their_partition(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi300x")
    t.open_fd(10, 4, "renderD128", fdinfo(1, vram_kib=1 << 20, pdev="0000:05:00.0"))
    t.open_fd(20, 4, "renderD130", fdinfo(2, vram_kib=2 << 20, pdev="0000:05:00.0"))  # partition 2
    t.open_fd(30, 4, "renderD132", fdinfo(3, vram_kib=3 << 20, pdev="0000:05:00.0"))  # unused node: ignored
    with collector(t, Clock()) as c:
        gpus = c.read().gpus
    assert [[p.pid for p in g.processes] for g in gpus] == [[10], [], [20], []]


def test_a_closed_fd_drops_the_process(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi210")
    t.open_fd(55, 5, "renderD128", fdinfo(1))
    clock = Clock()
    with collector(t, clock) as c:
        assert [p.pid for p in c.read().gpus[0].processes] == [55]
        (t.root / "proc/55/fdinfo/5").unlink()
        (t.root / "proc/55/fd/5").unlink()
        clock.advance(1.0)
        assert c.read().gpus[0].processes == ()


def test_descriptors_are_listed_again_only_every_rescan(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi210")
    clock = Clock()
    with AmdCollector(t.root, use_amdsmi=False, pcie_background=False, rescan_s=5.0, clock=clock) as c:
        t.open_fd(88, 5, "renderD128", fdinfo(1))
        clock.advance(1.0)
        assert c.read().gpus[0].processes == ()  # opened after the last scan
        clock.advance(5.0)
        assert [p.pid for p in c.read().gpus[0].processes] == [88]


def test_kfd_processes_are_found_between_full_scans(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi210")
    t.kfd_process(1)  # the KFD directory exists: partial scans use it
    clock = Clock()
    with AmdCollector(t.root, use_amdsmi=False, pcie_background=False, rescan_s=5.0, clock=clock) as c:
        t.kfd_process(300)
        t.open_fd(300, 5, "renderD128", fdinfo(1))  # a ROCm process: in the KFD's list
        t.open_fd(400, 5, "renderD128", fdinfo(2))  # a graphics client: never opened /dev/kfd
        clock.advance(6.0)
        assert [p.pid for p in c.read().gpus[0].processes] == [300]
        clock.advance(30.0)  # the full listing of every process
        assert [p.pid for p in c.read().gpus[0].processes] == [300, 400]


def test_processes_whose_descriptors_cannot_be_listed_are_counted(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    t = AmdTree(tmp_path, "mi210")
    t.other_fd(99, 3)  # another user's process: its fd directory cannot be listed without root
    listdir = os.listdir

    def not_root(path: str | Path) -> list[str]:
        if str(path).endswith("/99/fd"):
            raise PermissionError(13, "Permission denied")
        return listdir(path)

    monkeypatch.setattr(os, "listdir", not_root)
    with collector(t, Clock()) as c:
        g = c.read().gpus[0]
        assert c._clients is not None and c._clients.unlisted() == Unlisted(UnlistedKind.FDS_HIDDEN, hidden=1)
    assert g.processes == () and g.unavailable["processes"] == str(Unlisted(UnlistedKind.FDS_HIDDEN, hidden=1))
