"""The AMD collector's kept descriptors (closed on close(), when a card goes away or is replaced), what it
reads once, and its fast parsers against the plain ones they stand in for."""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpulens.collectors.amd.collector import AmdCollector
from gpulens.collectors.amd.fdinfo import ENGINES, Client, parse_fdinfo
from gpulens.collectors.amd.reader import DPM_MEMO, RAS_EVERY_S
from gpulens.collectors.amd.sysfs import OpenFiles, read_int
from tests.fakes.amd_tree import AMD_DATA, AmdTree, Clock, fdinfo


def fds_into(where: Path) -> list[str]:
    """What this process's open descriptors under ``where`` point to ("... (deleted)" once unlinked)."""
    prefix = str(where.resolve())
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(prefix):
            out.append(target)
    return out


def opened(t: AmdTree, clock: Clock) -> AmdCollector:
    return AmdCollector(t.root, use_amdsmi=False, pcie_background=False, rescan_s=0.0, clock=clock)


def test_close_leaves_no_descriptor_open(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi210")
    t.open_fd(55, 5, "renderD128", fdinfo(1))
    with opened(t, Clock()) as c:
        assert [p.pid for p in c.read().gpus[0].processes] == [55]
        kept = fds_into(tmp_path)
        assert any(p.endswith("/device/gpu_busy_percent") for p in kept)
        assert any(p.endswith("/hwmon3/power1_average") for p in kept)
        assert any(p.endswith("/proc/55/fdinfo/5") for p in kept)
    assert fds_into(tmp_path) == []
    c.close()  # twice: nothing left to close, nothing raised
    assert c.read().unavailable["gpus"] == "AMD collector closed"


def test_the_vram_size_is_read_once_and_not_kept_open(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi210")
    with opened(t, Clock()) as c:
        assert c.read().gpus[0].mem_total_bytes == 68702699520
        assert c.read().gpus[0].mem_total_bytes == 68702699520
        kept = fds_into(tmp_path)
    assert not any(p.endswith("/mem_info_vram_total") for p in kept)
    assert any(p.endswith("/mem_info_vram_used") for p in kept)


def test_an_unreadable_vram_size_is_read_again_until_it_reads(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi210")
    t.set("card0", "mem_info_vram_total", "abc\n")
    with opened(t, Clock()) as c:
        g = c.read().gpus[0]
        assert g.mem_total_bytes is None and "not a number" in g.unavailable["mem_total_bytes"]
        t.set("card0", "mem_info_vram_total", "0\n")
        g = c.read().gpus[0]
        assert g.mem_total_bytes is None and "out of range" in g.unavailable["mem_total_bytes"]
        t.set("card0", "mem_info_vram_total", "1024\n")
        g = c.read().gpus[0]
    assert g.mem_total_bytes == 1024 and "mem_total_bytes" not in g.unavailable


def test_a_card_gone_closes_its_descriptors(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi210")
    card = t.device("card0").parent
    clock = Clock()
    with opened(t, clock) as c:
        assert c.read().gpus[0].utilization_percent is not None
        assert fds_into(card)
        shutil.rmtree(card)  # a fixture's unlinked files stay readable through kept descriptors ...
        clock.advance(RAS_EVERY_S)  # ... until the card's directory is looked up again
        g = c.read().gpus[0]
        assert fds_into(card) == []
        c.read()
        assert fds_into(card) == []  # nothing to open while it is gone
    for name in ("utilization_percent", "mem_used_bytes", "mem_total_bytes", "power_w", "temperature_c"):
        assert getattr(g, name) is None and "absent" in g.unavailable[name], name
    assert g.sm_clock_mhz is None and "pp_dpm_sclk absent" in g.unavailable["sm_clock_mhz"]
    assert g.ecc_corrected is None and g.unavailable["ecc_corrected"]


def test_a_replaced_card_is_read_anew(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi210")
    card = t.device("card0").parent
    clock = Clock()
    with opened(t, clock) as c:
        assert c.read().gpus[0].mem_total_bytes == 68702699520
        shutil.rmtree(card)
        shutil.copytree(AMD_DATA / "mi210" / "sys" / "class" / "drm" / "card0", card)  # the driver reloaded
        t.set("card0", "mem_info_vram_total", "34351349760\n")
        t.set("card0", "gpu_busy_percent", "12\n")
        clock.advance(RAS_EVERY_S)
        g = c.read().gpus[0]
        assert not any(p.endswith(" (deleted)") for p in fds_into(card))
    assert g.mem_total_bytes == 34351349760 and g.utilization_percent == 12.0


def test_a_read_finding_the_device_gone_closes_all_its_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real sysfs: a kept file of a removed device fails with ENODEV (kernfs) on the next read."""
    t = AmdTree(tmp_path, "mi210")
    card = t.device("card0").parent
    with opened(t, Clock()) as c:
        assert c.read().gpus[0].mem_total_bytes == 68702699520

        def gone(fd: int, n: int, offset: int) -> bytes:
            raise OSError(errno.ENODEV, "No such device")

        with monkeypatch.context() as m:
            m.setattr(os, "pread", gone)
            g = c.read().gpus[0]
            assert fds_into(card) == []
        assert g.utilization_percent is None and "No such device" in g.unavailable["utilization_percent"]
        assert g.mem_total_bytes is None and "No such device" in g.unavailable["mem_total_bytes"]
        back = c.read().gpus[0]  # the files open again
    assert back.utilization_percent is not None and back.mem_total_bytes == 68702699520


def test_another_read_error_closes_only_that_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = AmdTree(tmp_path, "mi210")
    with opened(t, Clock()) as c:
        c.read()
        busy = next(p for p in fds_into(tmp_path) if p.endswith("/gpu_busy_percent"))
        real = os.pread

        def busy_fails(fd: int, n: int, offset: int) -> bytes:
            if os.readlink(f"/proc/self/fd/{fd}") == busy:
                raise OSError(errno.EIO, "Input/output error")  # the SMU did not answer: not a gone device
            return real(fd, n, offset)

        with monkeypatch.context() as m:
            m.setattr(os, "pread", busy_fails)
            g = c.read().gpus[0]
            kept = fds_into(tmp_path)
    assert g.utilization_percent is None and "Input/output error" in g.unavailable["utilization_percent"]
    assert g.mem_used_bytes is not None and any(p.endswith("/mem_info_vram_used") for p in kept)


def test_clocks_follow_the_starred_level_and_the_memo_is_bounded(tmp_path: Path) -> None:
    t = AmdTree(tmp_path, "mi210")
    with opened(t, Clock()) as c:
        for star, mhz in ((2, 1700), (0, 500), (1, 1650), (2, 1700)):
            t.set("card0", "pp_dpm_sclk", "".join(f"{i}: {f}Mhz {'*' if i == star else ''}\n"
                                                  for i, f in enumerate((500, 1650, 1700))))
            assert c.read().gpus[0].sm_clock_mhz == mhz
        for mhz in range(100, 100 + 3 * DPM_MEMO):  # a part that prints the live clock as its level
            t.set("card0", "pp_dpm_sclk", f"0: 100Mhz \n1: {mhz}Mhz *\n")
            assert c.read().gpus[0].sm_clock_mhz == mhz
        t.set("card0", "pp_dpm_sclk", "0: 500Mhz *\n1: 1650Mhz *\n")
        t.set("card0", "hwmon/hwmon3/freq1_input", "1234000000\n")
        assert c.read().gpus[0].sm_clock_mhz == 1234  # the table names two levels current: hwmon's clock
        t.set("card0", "hwmon/hwmon3/freq1_input", "x\n")
        g = c.read().gpus[0]
        memo = c._readers[0]._dpm_memo["pp_dpm_sclk"]
    assert len(memo) <= DPM_MEMO
    assert g.sm_clock_mhz is None and "more than one level" in g.unavailable["sm_clock_mhz"]


_NUMBERISH = st.one_of(
    st.binary(max_size=24),
    st.integers(-10, 10**21).map(lambda n: str(n).encode()),
    st.tuples(st.sampled_from([b"", b" ", b"\t", b"\n", b"\x0c", b"\x1c", b"\xa0"]), st.integers(0, 10**20),
              st.sampled_from([b"", b"\n", b" \n", b"\x1f", b"_1", b"\x00"])).map(
        lambda p: p[0] + str(p[1]).encode() + p[2]),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_NUMBERISH, st.sampled_from([(0, 100), (0, 1 << 50), (1, 1 << 50), (-273_000, 250_000), (0, 1 << 63)]))
def test_kept_file_integers_read_as_plain_reads_do(tmp_path_factory: Any, raw: bytes, bounds: tuple[int, int]) -> None:
    path = tmp_path_factory.mktemp("int") / "gpu_busy_percent"
    path.write_bytes(raw)
    files = OpenFiles()
    try:
        lo, hi = bounds
        assert files.integer(str(path), lo=lo, hi=hi) == read_int(path, lo=lo, hi=hi)
        path.write_bytes(raw[::-1])  # re-read through the kept descriptor
        assert files.integer(str(path), lo=lo, hi=hi) == read_int(path, lo=lo, hi=hi)
    finally:
        files.close()
    assert len(files) == 0


_KEY = re.compile(r"^(drm-[\w-]+):[ \t]*(.*?)[ \t]*$", re.MULTILINE)
_UNITS = {"": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}


def reference_parse(text: str) -> Client | None:
    """parse_fdinfo as it was: every ``drm-`` key into a map (regex), then the same rules."""
    keys = dict(_KEY.findall(text))
    if keys.get("drm-driver") != "amdgpu" or not keys.get("drm-client-id"):
        return None
    vram = None
    for k in ("drm-memory-vram", "drm-resident-vram", "drm-total-vram"):
        if k in keys:
            number, _, unit = keys[k].strip().partition(" ")
            scale = _UNITS.get(unit.strip())
            if scale is not None and number.isdigit() and len(number) <= 19:
                vram = int(number) * scale
                break
    busy: float | None = None
    for engine in ENGINES:
        raw = keys.get(f"drm-engine-{engine}")
        if raw is None:
            continue
        number, _, unit = raw.partition(" ")
        capacity = keys.get(f"drm-engine-capacity-{engine}", "1")
        if unit.strip() != "ns" or not number.isdigit() or not capacity.isdigit() or int(capacity) < 1:
            continue
        busy = (busy or 0.0) + int(number) / int(capacity)
    return Client(keys["drm-client-id"], vram, busy)


_LINE = st.tuples(
    st.sampled_from(["drm-driver", "drm-client-id", "drm-memory-vram", "drm-resident-vram", "drm-total-vram",
                     "drm-engine-gfx", "drm-engine-compute", "drm-engine-capacity-gfx", "drm-engine-capacity-compute",
                     "drm-engine-dma", "drm-pdev", "pos", "drm-client-id-x", " drm-driver", "drm-engine-gfx-2"]),
    st.sampled_from([":", ": ", ":\t", " :", ":  \t", ""]),
    st.one_of(st.sampled_from(["amdgpu", "i915", "", "7", "0", "5 KiB", "12 MiB", "3 GiB", "4 TiB", "100 ns",
                               "100 ns ", "100  ns", "-1 ns", "2", "x", "99999999999999999999 KiB"]),
              st.text(max_size=8)),
    st.sampled_from(["", " ", "\t", " \t", "\r", "\x1c"]),
)


_GOOD = st.sampled_from([("drm-driver", ":\t", "amdgpu", ""), ("drm-client-id", ":\t", "7", ""),
                         ("drm-engine-gfx", ":\t", "100 ns", ""), ("drm-engine-compute", ": ", "40 ns", ""),
                         ("drm-memory-vram", ":\t", "5 KiB", ""), ("drm-engine-capacity-gfx", ":\t", "4", "")])
_EMPTY_CAPACITY = [("drm-driver", ":", "amdgpu", ""), ("drm-client-id", ":", "1", ""),
                   ("drm-engine-gfx", ":", "8 ns", ""), ("drm-engine-capacity-gfx", ":", "", "")]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(_LINE, _GOOD), max_size=14), st.sampled_from(["\n", "\r\n"]), st.booleans())
@example(_EMPTY_CAPACITY, "\n", False)
def test_parse_fdinfo_agrees_with_the_regex_parse(lines: list[tuple[str, str, str, str]], newline: str,
                                                  final: bool) -> None:
    text = newline.join(k + sep + v + end for k, sep, v, end in lines) + (newline if final else "")
    text = text.encode("utf-8", "surrogatepass").decode("ascii", errors="replace")  # as the collector decodes
    assert parse_fdinfo(text) == reference_parse(text)


def test_parse_fdinfo_takes_only_ascii_digits() -> None:
    head = "drm-driver:\tamdgpu\ndrm-client-id:\t1\n"
    assert parse_fdinfo(head + "drm-memory-vram:\t\u00b2 KiB\ndrm-engine-gfx:\t\u00b2 ns\n") == Client("1", None, None)
    assert parse_fdinfo(head + "drm-engine-gfx:\t6 ns\ndrm-engine-capacity-gfx:\t\u00b3\n") == Client("1", None, None)


def test_parse_fdinfo_agrees_on_real_kernels_text() -> None:
    for text in (fdinfo(3, vram_kib=10 << 20, gfx_ns=5, compute_ns=7, capacity={"gfx": 2}),
                 fdinfo(3, vram_kib=None, gfx_ns=None), fdinfo(3, driver="xe"),
                 fdinfo(4) + "drm-client-id:\t9\n", "drm-driver: amdgpu\ndrm-client-id: 1"):
        assert parse_fdinfo(text) == reference_parse(text)
