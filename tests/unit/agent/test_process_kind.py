"""Issue 31 item 7, the agent's half: ``processes`` lists every process of the host, as ``ps`` shows them.

Against this machine's real /proc: a child started here must be listed with
its user, command line and parent; the GPU memory of a process comes from
the newest sample's GPU process lists; ``hidepid`` limits a non-root asker
to the processes it may act for; bad params are refused; one listing serves
every asker for a second.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpulens.agent.process_kind import processes
from gpulens.agent.requests import RequestRunner
from gpulens.collectors.processes import ProcessLister, proc_hides_pids
from gpulens.core.model import GpuProcess, GpuSample, JobInfo
from gpulens.core.processes import MAX_ROWS, order
from gpulens.ipc.errors import ProtocolError, ProtocolProblem
from gpulens.ipc.principal import SAMPLES_ONLY, Principal, peer
from gpulens.ipc.request_schema import ProcessesParams, answer_to_wire, decode_params
from gpulens.ipc.serialize import from_dict
from tests.unit.store.test_store import T0, sample

ME = os.geteuid()


class Conn:
    def __init__(self, principal: Principal) -> None:
        self.principal = principal

    def put(self, frame: bytes, timeout_s: float | None = None) -> bool:
        return True


def _ask(principal: Principal, params: dict[str, Any], lister: ProcessLister, latest: Any = None,
         hides: bool = False) -> dict[str, Any]:
    asked = decode_params("processes", params)
    assert isinstance(asked, ProcessesParams)
    return answer_to_wire(processes(Conn(principal), 1, asked, lister, lambda: latest, lambda: hides))


@pytest.fixture
def child() -> Any:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "gpulens-marker"])
    yield p
    p.kill()
    p.wait()


def test_a_process_no_job_pattern_matches_is_listed_with_who_runs_it(child: subprocess.Popen[bytes]) -> None:
    got = _ask(peer(ME), {"limit": MAX_ROWS}, ProcessLister())
    rows = {r.pid: r for r in (from_dict(JobInfo, d) for d in got["processes"])}
    assert got["total"] >= len(rows) and got["hidden"] == 0
    row = rows[child.pid]
    assert row.user == pwd.getpwuid(ME).pw_name
    assert row.cmdline.endswith("gpulens-marker")
    assert row.ancestors[-1] == os.getpid()  # its parent, nearest last
    assert row.tree_id.endswith("/" + Path(f"/proc/{child.pid}/comm").read_text().strip())
    assert row.job_key is None and row.gpu_mem_bytes == {}
    me = rows[os.getpid()]
    assert me.rss_bytes is not None and me.rss_bytes > 0 and me.cpu_percent is not None


def test_gpu_processes_come_first_with_their_memory(child: subprocess.Popen[bytes]) -> None:
    gpu = GpuSample(index=3, name="G", uuid="u", processes=(GpuProcess(pid=child.pid, used_memory_bytes=7 << 30),))
    latest = sample(T0)
    from dataclasses import replace

    got = _ask(peer(ME), {"limit": 5}, ProcessLister(), replace(latest, gpus=(gpu,)))
    first = from_dict(JobInfo, got["processes"][0])
    assert first.pid == child.pid and first.gpu_mem_bytes == {"3": 7 << 30}
    assert len(got["processes"]) == 5


def test_only_some_pids_can_be_asked_for(child: subprocess.Popen[bytes]) -> None:
    got = _ask(peer(ME), {"pids": [child.pid, 2**22 + 5]}, ProcessLister())
    assert [d["pid"] for d in got["processes"]] == [child.pid]


def test_with_hidepid_a_user_sees_only_what_it_may_act_for(child: subprocess.Popen[bytes]) -> None:
    lister = ProcessLister()
    everyone = _ask(peer(ME), {"limit": MAX_ROWS}, lister, hides=True)
    if ME == 0:  # root sees all, hidepid or not
        assert everyone["hidden"] == 0
    nobody = pwd.getpwnam("nobody").pw_uid
    theirs = _ask(peer(nobody), {"limit": MAX_ROWS}, lister, hides=True)
    assert theirs["hidden"] > 0
    assert child.pid not in {d["pid"] for d in theirs["processes"]}
    shown = _ask(peer(nobody), {"limit": MAX_ROWS}, lister, hides=False)  # no hidepid: as ps shows it
    assert child.pid in {d["pid"] for d in shown["processes"]} and shown["hidden"] == 0


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": MAX_ROWS + 1}, {"limit": "9"}, {"limit": True},
                                    {"pids": []}, {"pids": list(range(1, 100))}, {"pids": [-1]}, {"pids": "1"}])
def test_bad_params_are_refused(params: dict[str, Any]) -> None:
    """Refused where the frame is decoded, with the field's own sentence (what the viewer is sent)."""
    why = f"limit must be an integer in 1..{MAX_ROWS}" if "limit" in params else (
        "pids must be a list of 1..64 positive process ids")
    with pytest.raises(ProtocolError) as err:
        _ask(peer(ME), params, ProcessLister())
    assert err.value.problem is ProtocolProblem.BAD_PARAMS
    assert str(err.value) == why  # the refusal the viewer is sent (the schema's ``why``), word for word


def test_one_listing_serves_every_asker_for_a_second() -> None:
    now = [100.0]
    lister = ProcessLister(clock=lambda: now[0])
    reads: list[float] = []
    real = lister._read

    def counted(now: float) -> tuple[tuple[JobInfo, ...], int]:
        reads.append(now)
        return real(now)

    lister._read = counted  # type: ignore[method-assign]
    for _ in range(50):
        lister.listing()
    assert len(reads) == 1
    now[0] += 1.5
    lister.listing()
    assert len(reads) == 2


def test_samples_only_peers_are_not_offered_it() -> None:
    runner = RequestRunner(history=lambda a, b: [], hostname="h")
    assert "processes" not in runner.served_kinds()  # no lister: not served
    runner.lister = ProcessLister()
    assert "processes" in runner.capabilities(peer(ME))
    assert runner.capabilities(SAMPLES_ONLY) == ("history",)


@pytest.mark.parametrize(("options", "hidden"), [("rw,nosuid,nodev,noexec,relatime", False),
                                                  ("rw,relatime,hidepid=2", True),
                                                  ("rw,relatime,hidepid=invisible", True),
                                                  ("rw,relatime,hidepid=0", False)])
def test_hidepid_is_read_from_mountinfo(tmp_path: Path, options: str, hidden: bool) -> None:
    info = tmp_path / "mountinfo"
    info.write_text("22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw\n"
                    f"23 1 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:13 - proc proc {options}\n")
    assert proc_hides_pids(str(info)) is hidden
    assert proc_hides_pids(str(tmp_path / "absent")) is True  # unknown: show less


def test_order_is_gpu_memory_then_cpu() -> None:
    rows = (JobInfo(1, "a", "a", "u", 0.0, cpu_percent=90.0), JobInfo(2, "b", "b", "u", 0.0, cpu_percent=1.0,
            gpu_mem_bytes={"0": 5}), JobInfo(3, "c", "c", "u", 0.0, cpu_percent=None))
    assert [r.pid for r in order(rows)] == [2, 1, 3]
