"""Thresholds and alert codes (pure), the time axis, and who may be sent a signal."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpulens.core.config import Thresholds, parse_config
from gpulens.core.model import GpuSample, JobInfo
from gpulens.sources.signals import NO_REMOTE, NoSignal, NoSignalKind, refusal, send, start_time
from gpulens.tui.screens.process import ancestry
from gpulens.tui.widgets._braille import time_axis
from gpulens.tui.widgets.gpu_table import GpuTable
from gpulens.tui.widgets.process_table import ProcessTable
from gpulens.tui.widgets.thresholds import (
    ALERT_HELP,
    CRIT,
    LOW,
    MARKS,
    OK,
    WARN,
    alert_level,
    alert_text,
    explain,
    gpu_levels,
    level,
)


def test_levels_follow_the_configured_thresholds() -> None:
    t = parse_config({"thresholds": {"temp_warn_c": 70, "temp_crit_c": 85}}, "cfg").thresholds
    assert [level("temp", v, t) for v in (69.4, 70, 84.4, 85)] == [OK, WARN, WARN, CRIT]
    assert level("temp", 80) == WARN and level("temp", 89.4) == WARN and level("temp", 90) == CRIT  # defaults
    # Judged as printed: 89.6 reads "90C" (critical from 90), 9.6 % reads "10%" (not under 10).
    assert level("temp", 89.6) == CRIT and level("util", 9.6, held=True) == OK and level("util", 9.4, held=True) == LOW
    assert level("power", 300, limit=300) == CRIT and level("power", 280, limit=300) == WARN
    assert level("power", 280, limit=None) == OK  # no limit known: no judgement
    assert level("util", 2, held=True) == LOW and level("util", 2, held=False) == OK
    assert level("temp", float("nan")) == OK and level("mem", None) == OK  # n/a is not an alarm


def test_gpu_levels_of_a_hot_throttled_gpu() -> None:
    g = GpuSample(index=2, name="H100", uuid="u", temperature_c=89.0, mem_used_bytes=79, mem_total_bytes=80,
                  power_w=700.0, power_limit_w=700.0, throttle_reasons=("sw_thermal_slowdown", "hw_thermal_slowdown"),
                  xid_events=(79,))
    lv = gpu_levels(g, Thresholds())
    assert lv == {"util": OK, "temp": WARN, "mem": CRIT, "power": CRIT, "throttle": CRIT, "xid": CRIT}
    cells = dict(zip([c[0] for c in GpuTable.COLUMNS], GpuTable.cells(g), strict=True))
    assert cells["temp"] == "89C" + MARKS[WARN] and cells["throttle"].endswith(MARKS[CRIT])
    assert cells["xid"] == "79" + MARKS[CRIT]


def test_a_gpu_that_reported_an_xid_once_keeps_it_in_its_row_while_the_window_holds_it() -> None:
    """A GPU that falls off the bus reports XID 79 once, then nothing: its row says 79, as the alert does."""
    from dataclasses import replace

    from gpulens.core.events import SampleEvent
    from gpulens.store.store import Store
    from tests.unit.store.test_store import T0, sample

    store = Store()
    lost = GpuSample(index=0, name="H100", uuid="u", utilization_percent=None, xid_events=(79,))
    store.apply(SampleEvent(replace(sample(T0), gpus=(lost,))))
    for i in range(1, 90):
        store.apply(SampleEvent(replace(sample(T0 + i), gpus=(replace(lost, xid_events=()),))))
    assert store.recent_xids("h1", 300) == {0: 79} and store.recent_xids("h1", 60) == {}
    column = [c[0] for c in GpuTable.COLUMNS].index("xid")
    quiet = replace(lost, xid_events=())
    assert GpuTable.cells(quiet, Thresholds(), store.recent_xids("h1", 300).get(0))[column] == "79" + MARKS[CRIT]
    assert GpuTable.cells(quiet, Thresholds(), store.recent_xids("h1", 60).get(0))[column] == "-"


def test_every_alert_code_has_a_level_marker_and_an_explanation() -> None:
    assert alert_level("XID 79") == CRIT and alert_level("DOWN") == CRIT
    assert alert_level("THROTTLE") == WARN and alert_level("IDLE-HELD 4") == LOW
    assert alert_text("XID 79") == "! XID 79" and alert_text("IDLE-HELD 4").startswith(MARKS[LOW])
    assert "4 GPUs hold" in explain("IDLE-HELD 4") and explain("XID 79").startswith("XID 79: ")
    assert all(info.meaning for info in ALERT_HELP.values())


def test_sorted_headers_fit_their_columns() -> None:
    for table in (GpuTable, ProcessTable):
        for key, label, _, width in table.COLUMNS:
            assert width > len(label), (table.__name__, key)  # label + sort arrow fit
    assert [c[1] for c in ProcessTable.COLUMNS if c[0] == "gpus"] == ["GPU#"]


def test_time_axis_labels_run_from_the_window_to_now() -> None:
    axis = time_axis(300, 60)
    assert axis.startswith("-5m") and axis.endswith("now") and len(axis) == 60
    assert "-2m30s" in axis and axis.index("-3m45s") < axis.index("-2m30s") < axis.index("-1m15s")
    assert time_axis(3600, 30).split() == ["-1h", "-30m", "now"]
    assert time_axis(300, 4) == ""


def test_ancestry_names_and_pids() -> None:
    job = JobInfo(pid=30, tree_id="systemd/bash/python3", cmdline="python3 x", user="u", start_time=0,
                  ancestors=(1, 20))
    assert ancestry(job) == "systemd(1) › bash(20) › python3(30)"


def test_signals_only_to_own_live_local_processes(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.05)
        started = start_time(child.pid)
        assert started is not None and abs(started - time.time()) < 60
        job = JobInfo(pid=child.pid, tree_id="t", cmdline="sleep", user="me", start_time=started)
        readonly = refusal(job, local=True, readonly=True)
        assert readonly == NoSignal(NoSignalKind.READONLY)
        assert str(readonly) == "read-only (--readonly): no actions"  # pinned on purpose: the one signal refusal in words
        assert refusal(job, local=False, readonly=False) == NoSignal(NoSignalKind.REMOTE, detail=NO_REMOTE)  # no ssh here
        assert refusal(job, local=False, readonly=False, remote_why=None) is None  # checked on that host
        assert refusal(job, local=False, readonly=True, remote_why=None) == readonly
        other = os.getuid() + 1
        assert refusal(job, local=True, readonly=False, uid=other) == NoSignal(
            NoSignalKind.OTHER_USER, child.pid, uid=os.getuid(), me=other)
        reused = JobInfo(pid=child.pid, tree_id="t", cmdline="old", user="me", start_time=started - 3600)
        assert refusal(reused, local=True, readonly=False) == NoSignal(NoSignalKind.REUSED, child.pid)
        assert send(reused, "SIGKILL").startswith("not sent")
        assert child.poll() is None  # the refused signal never went out
        assert send(job, "SIGTERM") == f"SIGTERM sent to pid {child.pid}"
        assert child.wait(5) == -15
        assert refusal(job, local=True, readonly=False) == NoSignal(NoSignalKind.EXITED, child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_thermal_throttle_is_critical_and_alerts_sort_loudest_first() -> None:
    """The host table's THROTTLE HW is as loud as the GPU table's thermal throttle, and A sorts by level."""
    from gpulens.tui.widgets.host_table import HostTable
    from gpulens.tui.widgets.thresholds import CRIT, alert_level, explain

    assert alert_level("THROTTLE HW") == CRIT and alert_level("THROTTLE") == WARN
    from gpulens.store.gpu_events import BENIGN_THROTTLE
    from gpulens.tui.widgets.thresholds import OK, throttle_level

    # The host alert and the GPU table agree on what is no slowdown at all.
    assert all(throttle_level((r,)) == OK for r in BENIGN_THROTTLE) and "display_clock_setting" in BENIGN_THROTTLE
    assert explain("THROTTLE HW").startswith("THROTTLE HW: a GPU's clocks are cut now by heat")
    assert explain("XID 79").startswith("XID 79: a GPU reported NVIDIA XID error 79")

    def key(alerts: tuple[str, ...]) -> Any:
        row = type("Row", (), {"host": "h", "gpus": 8, "util_percent": 1.0, "sm_percent": 1.0,
                               "gpu_mem_percent": 1.0, "power_w": 1.0, "cpu_percent": 1.0,
                               "net_bytes_per_s": 1.0, "alerts": alerts})()
        return HostTable.sort_value(row, 8)

    order = sorted([("THROTTLE",), ("IDLE-HELD 4", "THROTTLE"), ("XID 79",), ()], key=key, reverse=True)
    assert order == [("XID 79",), ("IDLE-HELD 4", "THROTTLE"), ("THROTTLE",), ()]
