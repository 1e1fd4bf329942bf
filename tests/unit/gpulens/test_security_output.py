"""No process's, peer's or file's text reaches a terminal as control (issue 27 items 5 and 11).

Another user names a process ``ESC ] 52 ; c ; … BEL`` (tmux puts the text in
root's clipboard) or starts it with ``SLURM_JOB_ID=ESC ] 0 ; …`` (an
unterminated OSC retitles root's pane). Each string is cleaned once, where it
enters: the job scan where it reads ``/proc``, the local sampler's output
through ``check_sample`` (as a peer's sample arrives), the agent's trace
answer per item, flame frames once decoded. Here every output path is fed
OSC 52, an unterminated OSC 0, CSI and C1 controls and must print none of
them, and no line break inside a field: ``gpulens jobs`` (text and
``--json``), ``gpulens sample`` (text and ``--json``), the TUI's tables, job
screen and notifications, the log file, ``gpulens trace``'s progress lines,
and the real ``gpulens jobs`` beside a real process of another user.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import secrets
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from gpulens.collectors import jobs as jobs_mod
from gpulens.collectors import sampler as sampler_mod
from gpulens.collectors.jobs import JobScanner
from gpulens.collectors.sampler import Sampler
from gpulens.core.config import Config
from gpulens.core.model import GpuProcess, GpuSample
from gpulens.ipc.request_schema import ProgressEvent, TraceAnswer, TraceStatusAnswer
from tests.fakes.request_source import Answered, FakeAgent
from tests.fakes.security_helpers import User, call_as, two_users

__all__ = ["two_users"]  # the fixture, used by name

OSC52 = "\x1b]52;c;cm0K\x07"  # "rm\n" into tmux's clipboard
OSC0 = "\x1b]0;pwned"  # unterminated: everything after it is the title
CSI = "\x1b[2J"
C1_CSI = "\x9b2J"
C1_OSC = "\x9d0;x\x9c"
PATTERN = r"slurm/python/train$"
TREE = "systemd/slurm/python/train"
"""The tree ID the hostile names below come to once cleaned."""
CMDLINE = f"python -c print(1) rm -rf ~{OSC52}"


def assert_clean(text: str) -> None:
    """No ESC, BEL or C1 control anywhere in ``text``."""
    bad = sorted({f"U+{ord(c):04X}" for c in text if c in "\x1b\x07" or 0x80 <= ord(c) <= 0x9F})
    assert not bad, f"terminal control {bad} in {text!r}"


def write_proc(proc: Path) -> None:
    """systemd -> slurm -> python -> train (pid 103), each name laden with controls."""
    procs = {100: (0, "systemd"), 101: (100, f"sl{CSI}urm{C1_CSI}"), 102: (101, f"py{OSC52}thon{C1_OSC}"),
             103: (102, f"train{OSC0}")}
    proc.mkdir()
    (proc / "loadavg").write_text("0.00 0.00 0.00 1/1 103\n")
    for pid, (ppid, comm) in procs.items():
        d = proc / str(pid)
        d.mkdir()
        (d / "stat").write_bytes(f"{pid} ({comm}) S {ppid} 0 0 0 0 0 0 0 0 0 3 4 0 0 20 0 1 0 1 0 250 0\n".encode())
        (d / "status").write_text(f"Name:\t{comm}\nUid:\t0\t0\t0\t0\n")
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in ("python", "-c", "print(1)\nrm -rf ~" + OSC52)))
        (d / "environ").write_bytes(f"HOME=/\0SLURM_JOB_ID=42{OSC0}\0".encode())


@pytest.fixture
def fake_proc(tmp_path: Path) -> str:
    write_proc(tmp_path / "proc")
    return str(tmp_path / "proc")


def test_the_job_scan_cleans_what_it_reads(fake_proc: str) -> None:
    (job,) = JobScanner(PATTERN, ("SLURM_JOB_ID",), fake_proc).scan()
    assert (job.pid, job.tree_id, job.job_key, job.cmdline) == (103, TREE, "SLURM_JOB_ID=42", CMDLINE.replace(OSC52, ""))
    assert_clean(repr(job))


def _jobs_args(as_json: bool) -> argparse.Namespace:
    return argparse.Namespace(cfg=Config(job_pattern=PATTERN, job_key_env=("SLURM_JOB_ID",)), json=as_json)


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_gpulens_jobs_prints_no_control(as_json: bool, fake_proc: str, monkeypatch: pytest.MonkeyPatch,
                                        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    from gpulens.commands import jobs as cmd

    monkeypatch.setattr(jobs_mod, "JobScanner", functools.partial(JobScanner, proc=fake_proc))
    monkeypatch.setattr(cmd, "_gpu_memory", dict)
    monkeypatch.setattr(time, "sleep", lambda s: None)  # the time module jobs uses
    assert cmd.run(_jobs_args(as_json)) == 0
    out = capsysbinary.readouterr().out.decode()
    assert_clean(out)
    if as_json:
        (job,) = json.loads(out)
        assert (job["tree_id"], job["job_key"]) == (TREE, "SLURM_JOB_ID=42")
        assert_clean(json.dumps(job, ensure_ascii=False))  # the values, not only their \u escapes
    else:
        _header, row, cmdline = out.splitlines()  # no field broke a line
        assert row.split()[-2:] == ["SLURM_JOB_ID=42", TREE] and cmdline.strip() == CMDLINE.replace(OSC52, "")


class HostileGpus:
    """An NVML reader whose GPU name and reason carry controls (a driver string is a file's text too)."""

    def read(self) -> Any:
        gpu = GpuSample(index=0, name=f"H100{OSC52}", uuid=f"GPU-1{C1_OSC}", throttle_reasons=(f"hw{CSI}",),
                        processes=(GpuProcess(pid=103, used_memory_bytes=1 << 30),))
        return argparse.Namespace(gpus=[gpu], unavailable={f"gpu0.ecc{C1_CSI}": f"not supported{OSC0}"})

    def close(self) -> None:
        pass


def _sampler(proc: str, hostname: str = "node-1") -> sampler_mod.Sampler:
    return Sampler(hostname=hostname, job_pattern=PATTERN, job_key_env=("SLURM_JOB_ID",),
                               nvml=HostileGpus(), proc=proc)


def test_the_local_sampler_passes_the_peers_check(fake_proc: str) -> None:
    sample = _sampler(fake_proc, hostname=f"node-1{CSI}").sample()
    assert sample.host == "node-1" and sample.gpus[0].name == "H100" and sample.jobs[0].tree_id == TREE
    assert_clean(repr(sample))


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_gpulens_sample_prints_no_control(as_json: bool, fake_proc: str, monkeypatch: pytest.MonkeyPatch,
                                          capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    from gpulens.commands import sample as cmd

    monkeypatch.setattr(sampler_mod, "Sampler", lambda **kw: _sampler(fake_proc))
    args = argparse.Namespace(cfg=Config(interval_s=0.01), json=as_json, count=1, interval=None)
    assert cmd.run(args) == 0
    out = capsysbinary.readouterr().out.decode()
    assert_clean(out)
    if as_json:
        doc = json.loads(out)
        assert doc["jobs"][0]["tree_id"] == TREE
        assert_clean(json.dumps(doc, ensure_ascii=False))
    else:
        assert "H100" in out and "python -c print(1) rm -rf ~" in out


# ---- the TUI: tables, the job screen, notifications


def _tui_text(app: Any) -> str:
    """Every character the compositor puts on the terminal now (styles aside)."""
    return "\n".join("".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips())


def test_the_tui_draws_no_control(fake_proc: str) -> None:
    from gpulens.core.events import SampleEvent
    from gpulens.tui.app import GpulensApp
    from tests.fakes.tui_fakes import StaticSource, settle, sync

    sample = _sampler(fake_proc).sample()

    @sync
    async def drive() -> None:
        app = GpulensApp(source=StaticSource([SampleEvent(sample)]))
        async with app.run_test(size=(220, 50), notifications=True) as pilot:
            await settle(app, pilot)
            overview = _tui_text(app)
            assert "SLURM_JOB_ID=42" in overview
            app.open_host("node-1")
            await settle(app, pilot)
            host = _tui_text(app)
            assert TREE in host and "H100" in host
            app.open_job("SLURM_JOB_ID=42")
            await settle(app, pilot)
            job = _tui_text(app)
            assert TREE in job and "python -c print(1) rm -rf ~" in job
            # A notification is never markup: an action in a process's text stays text, and a
            # link's markup error (which ended the app) is not made.
            app.notify(f"job {sample.jobs[0].job_key}: [link=http://e.vil]click[/] [@click=app.quit]q[/]")
            deadline = time.monotonic() + 10  # the toast is drawn when the app gets to it (later when loaded)
            while "[@click=app.quit]q[/]" not in (told := _tui_text(app)) and time.monotonic() < deadline:
                await pilot.pause(0.05)
            assert "[@click=app.quit]q[/]" in told and app.is_running
            for text in (overview, host, job, told):
                assert_clean(text)

    drive()


# ---- the log file


def test_the_log_file_holds_no_control(tmp_path: Path) -> None:
    log = tmp_path / "gpulens.log"
    who, where, shown = f"{OSC52}x{C1_OSC}", f"a{CSI}{C1_CSI}b{OSC0}", f"line\nforged{OSC52}"
    code = textwrap.dedent(f"""
        import logging
        from pathlib import Path
        from gpulens.core import logbook
        logbook.install(Path({str(log)!r}))
        logging.getLogger("gpulens.test").warning("job %s on %s", {who!r}, {where!r})
        logbook.note({shown!r})
        print(repr([e.message for e in logbook.entries()]))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    text = log.read_bytes().decode()
    assert_clean(text)
    assert_clean(done.stdout)
    assert len(text.splitlines()) == 2 and "job x on ab" in text and "line forged" in text


# ---- gpulens trace: an agent's missing and notes, one line per item


def _hostile_agent(tmp: Path) -> FakeAgent:
    """Answers ``trace`` with a file for pid 7 and forged lines in ``missing`` and ``notes``."""
    (tmp / "7-t.json").write_text('{"traceEvents": []}')
    trace = TraceAnswer(files={"7": "7-t.json"},
                        missing={"9\ngpulens trace: done": f"gone{OSC52}\n8 /tmp/forged.json",
                                 "10": f"{CSI}no poll{C1_OSC}"},
                        notes={"7": f"a duration trace\ngpulens trace: done{OSC0}"})
    status = TraceStatusAnswer(state="tracing", first=0,
                               events=(ProgressEvent(state="tracing", detail=f"500 ms\nforged{C1_CSI}"),))
    return FakeAgent({"trace": Answered(trace, {"7-t.json": tmp / "7-t.json"}), "trace_status": status})


def test_gpulens_trace_prints_one_line_per_item(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpulens.commands.trace_agent import trace_via
    from gpulens.ipc.kineto.requests import TraceRequest

    assert trace_via(_hostile_agent(tmp_path), "box", TraceRequest(pids=(7,)), None) == 1
    out, err = capsys.readouterr()
    assert out == f"7 {tmp_path / '7-t.json'}\n"
    assert_clean(err)
    lines = err.splitlines()
    assert all(line.startswith("gpulens trace: ") for line in lines), lines
    assert lines.count("gpulens trace: done") == 0 and lines[-1] == "gpulens trace: done, with processes missing"
    assert "gpulens trace: process 9 gpulens trace: done: gone 8 /tmp/forged.json" in lines
    assert "gpulens trace: process 10: no poll" in lines
    assert "gpulens trace: process 7: a duration trace gpulens trace: done" in lines


def test_the_local_trace_lines_are_cleaned_too(capsys: pytest.CaptureFixture[str]) -> None:
    from gpulens.commands.trace_common import say

    say(f"process 7: {OSC52}gone\ngpulens trace: done{C1_CSI}{OSC0}")
    err = capsys.readouterr().err
    assert err == "gpulens trace: process 7: gone gpulens trace: done\n"


# ---- flame graphs: a profiled process names its own functions and threads


def test_flame_frames_are_cleaned_once_decoded() -> None:
    from gpulens.analysis.flame.model import build_from_stacks

    profile = build_from_stacks([([f"main (/home/u/{OSC52}a.py:1)", f"step{C1_OSC} (/x.py:2)"], 3.0)], "samples")
    assert_clean(repr(profile.frames))
    assert_clean(" ".join(profile.label(n) for n in range(profile.n_nodes)))


# ---- the real program beside a real process of another user

HOLD = """
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(15, ctypes.c_char_p(bytes.fromhex(sys.argv[1])), 0, 0, 0)
os.write(int(sys.argv[2]), b"r")
time.sleep(120)
"""


def _start(name: bytes, env: dict[str, str]) -> int:
    """Start a python that renames itself ``name`` (PR_SET_NAME); its pid once renamed."""
    r, w = os.pipe()
    child = subprocess.Popen(["/usr/bin/python3", "-c", HOLD, name.hex(), str(w), "x" + OSC52], env=env,
                             pass_fds=(w,), cwd="/", start_new_session=True)
    os.close(w)
    with os.fdopen(r, "rb") as ready:
        if ready.read(1) != b"r":
            raise RuntimeError("the renamed process never started")
    return child.pid


@pytest.fixture
def attacker(request: pytest.FixtureRequest) -> User | None:
    """Another user where one can be made (as root), else this one."""
    if os.geteuid() != 0:
        return None
    users: tuple[User, User] = request.getfixturevalue("two_users")
    return users[1]


@pytest.mark.skipif(not os.path.exists("/usr/bin/python3") or sys.platform != "linux", reason="needs Linux and /usr/bin/python3")
def test_the_real_gpulens_jobs_beside_a_hostile_process(gpulens_exe: str, attacker: User | None,
                                                        tmp_path: Path) -> None:
    tag = "q" + secrets.token_hex(1)  # three letters: the name's printable part
    names = (f"{tag}{OSC52}".encode(), f"{tag[:2]}{CSI}{C1_CSI}{C1_OSC[:3]}".encode())
    assert all(len(n) <= 15 for n in names), "a comm holds 15 bytes"
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": f"42{OSC0}"}
    pids = [call_as(attacker, _start, n, env, timeout=60) if attacker else _start(n, env) for n in names]
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(
                Path(f"/proc/{p}/comm").read_bytes().startswith(tag[:2].encode()) for p in pids):
            time.sleep(0.05)
        for p in pids:  # the input is hostile indeed, and another user's where one could be made
            assert b"\x1b" in Path(f"/proc/{p}/comm").read_bytes()
            assert f"SLURM_JOB_ID=42{OSC0}".encode() in Path(f"/proc/{p}/environ").read_bytes()
            assert attacker is None or os.stat(f"/proc/{p}").st_uid == attacker.uid
        outs = []
        for extra in ([], ["--json"]):
            done = subprocess.run([gpulens_exe, "jobs", "--pattern", f"(^|/){tag[:2]}", *extra],
                                  capture_output=True, timeout=60, check=False,
                                  env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path)})
            assert done.returncode == 0, done.stderr
            outs.append(done.stdout.decode())
        text, doc = outs[0], json.loads(outs[1])
        for out in outs:
            assert_clean(out)
        assert {j["pid"] for j in doc} >= set(pids)
        mine = [j for j in doc if j["pid"] in pids]
        assert {j["job_key"] for j in mine} == {"SLURM_JOB_ID=42"}
        assert {j["tree_id"].rsplit("/", 1)[-1] for j in mine} == {tag, tag[:2]}
        assert all(str(p) in text for p in pids)
        assert_clean(json.dumps(doc, ensure_ascii=False))
    finally:
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, 9)
