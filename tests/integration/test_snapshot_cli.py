"""``gpulens snapshot``: real agents, an unreachable address, and any Source."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gpulens.collectors.synthetic import SyntheticSampler
from gpulens.commands.snapshot import collect
from gpulens.core.errors import ConfigProblem
from gpulens.core.events import Emit, HostStatusEvent, SampleEvent, SourceStatusEvent
from tests.fakes.agent_helpers import AgentProc
from tests.fakes.cli_helpers import refusal


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_snapshot_json_lists_up_host_and_unreachable_address(gpulens_exe: str, tmp_path: Path) -> None:
    agent = AgentProc(gpulens_exe, tmp_path, "snap1", extra=["--interval", "0.2", "--quiet", "--simulated-gpus", "4"])
    dead = f"127.0.0.1:{_free_port()}"
    try:
        out = subprocess.run(
            [gpulens_exe, "snapshot", "--connect", f"{agent.address},{dead}", "--timeout", "30", "--json"],
            capture_output=True, text=True, timeout=120,
        )
    finally:
        agent.stop()
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    up, down = doc["hosts"]
    assert (up["host"], up["up"], up["reason"], up["address"]) == ("snap1", True, "", agent.address)
    assert up["sample"]["host"] == "snap1" and len(up["sample"]["gpus"]) == 4
    assert set(up["sample"]) >= {"time", "cpu", "memory", "network", "storage", "gpus", "jobs", "unavailable"}
    assert (down["host"], down["up"], down["sample"]) == (dead, False, None)
    assert "refused" in down["reason"].lower()


@pytest.mark.slow
def test_snapshot_text_and_exit_code_zero_when_all_up(gpulens_exe: str, tmp_path: Path) -> None:
    agent = AgentProc(gpulens_exe, tmp_path, "snap2", extra=["--interval", "0.2", "--quiet", "--simulated-gpus", "1"])
    try:
        out = subprocess.run(
            [gpulens_exe, "snapshot", "--connect", agent.address, "--timeout", "30"],
            capture_output=True, text=True, timeout=120,
        )
    finally:
        agent.stop()
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("snap2") and " up " in out.stdout and "gpus 1" in out.stdout


def test_snapshot_bad_timeout_is_a_clear_error() -> None:
    err = refusal("snapshot", "--connect", "127.0.0.1:1", "--timeout", "0")  # exit 2, one line, before connecting
    assert (err.where, err.got, err.problem) == ("--timeout", 0.0, ConfigProblem.OUT_OF_RANGE)


class FakeSource:
    """Any Source without expected_hosts(): two hosts, one of which goes down."""

    name = "fake"
    simulated = True

    def __init__(self) -> None:
        self._t: threading.Thread | None = None

    def start(self, emit: Emit) -> None:
        def run() -> None:
            emit(SourceStatusEvent(message="slow", ok=False, time=time.time()))
            for host in ("p1", "p2"):
                emit(SampleEvent(SyntheticSampler(hostname=host, gpus=1).sample()))
            emit(HostStatusEvent(host="p2", up=False, reason="scrape failed", time=time.time()))

        self._t = threading.Thread(target=run)
        self._t.start()

    def stop(self) -> None:
        if self._t is not None:
            self._t.join()


def test_collect_works_for_any_source_without_expected_hosts() -> None:
    hosts, errors = collect(FakeSource(), timeout_s=30)
    by = {h["host"]: h for h in hosts}
    assert by["p1"]["up"] and by["p1"]["sample"]["host"] == "p1"
    assert not by["p2"]["up"] and by["p2"]["reason"] == "scrape failed" and by["p2"]["sample"]["host"] == "p2"
    assert errors == ["slow"]


class SilentSource(FakeSource):
    def expected_hosts(self) -> list[str]:
        return ["h:1"]

    def start(self, emit: Emit) -> None:
        pass


def test_collect_lists_expected_address_never_reached() -> None:
    hosts: list[dict[str, Any]]
    hosts, _ = collect(SilentSource(), timeout_s=0.3)
    assert hosts == [{"host": "h:1", "address": "h:1", "up": False, "reason": "not reached within 0.3 s", "sample": None}]


class HiddenStreamSource(FakeSource):
    """Like a StreamSource wrapped where expected_hosts() is not visible."""

    def start(self, emit: Emit) -> None:
        emit(SampleEvent(SyntheticSampler(hostname="ok1", gpus=1).sample()))
        emit(HostStatusEvent(host="10.9.9.9:7789", up=False, reason="Connection refused", time=1.0,
                             address="10.9.9.9:7789"))


def test_never_reached_address_is_listed_without_expected_hosts() -> None:
    hosts, _ = collect(HiddenStreamSource(), timeout_s=30)
    by = {h["host"]: h for h in hosts}
    assert by["ok1"]["up"]
    assert by["10.9.9.9:7789"] == {"host": "10.9.9.9:7789", "address": "10.9.9.9:7789", "up": False,
                                   "reason": "Connection refused", "sample": None}
