"""``--ssh`` with a stand-in ssh command: the agent runs locally through ``sh -c``.

No remote host exists here, so ``--ssh-command`` runs ``gpulens agent --stdio``
on this machine with ``{host}`` as its reported name: the same pipes, the
same protocol and the same reconnect path as a real ssh.
"""

from __future__ import annotations

import io
import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpulens.core.events import HostStatusEvent
from gpulens.ipc.channels import CommandChannel
from gpulens.ipc.request_schema import HistoryParams
from gpulens.sources.stream.source import StreamFlags, stream_source_from_flags
from tests.fakes.agent_helpers import WAIT_S, EventLog, count_samples

pytestmark = pytest.mark.slow


def _ssh_command(exe: str, extra: str = "") -> str:
    inner = f"exec {shlex.quote(exe)} agent --stdio --no-trace --quiet --hostname {{host}} --interval 0.1 --simulated-gpus 1 {extra}"
    return f"sh -c {shlex.quote(inner)}"


def test_ssh_hostlist_streams_every_host(gpulens_exe: str) -> None:
    flags = StreamFlags(ssh="node[1-3]", ssh_command=_ssh_command(gpulens_exe))
    src = stream_source_from_flags(flags)
    assert src.expected_hosts() == ["node1", "node2", "node3"]
    log = EventLog()
    src.start(log)
    try:
        for h in ("node1", "node2", "node3"):
            def enough(evs: list[Any], h: str = h) -> bool:
                return count_samples(h)(evs) >= 3

            log.wait_for(enough, what=f"samples from {h}")
        up = [e for e in log.snapshot() if isinstance(e, HostStatusEvent) and e.up]
        assert {(e.host, e.address) for e in up} == {("node1", "node1"), ("node2", "node2"), ("node3", "node3")}
        res = src.request("node2", HistoryParams(since=0), 30).result(timeout=WAIT_S)
        assert res.samples and {s.host for s in res.samples} == {"node2"}
        procs = [link._chan.proc for link in src._links if isinstance(link._chan, CommandChannel)]
        assert len(procs) == 3
    finally:
        src.stop()
    for p in procs:
        assert p.poll() is not None, "the ssh child ends with the viewer"


def test_ssh_failure_reports_the_commands_stderr() -> None:
    cmd = "sh -c 'echo \"ssh: Could not resolve hostname {host}: Name or service not known\" >&2; exit 255'"
    flags = StreamFlags(ssh="ghost1", ssh_command=cmd)
    src = stream_source_from_flags(flags)
    log = EventLog()
    src.start(log)
    try:
        log.wait_for(lambda evs: any(isinstance(e, HostStatusEvent) for e in evs), what="down event")
        ev = next(e for e in log.snapshot() if isinstance(e, HostStatusEvent))
        assert ev.host == "ghost1" and not ev.up
        assert "status 255" in ev.reason and "Could not resolve hostname ghost1" in ev.reason
    finally:
        src.stop()


def test_stdio_agent_keeps_stdout_for_the_protocol_and_exits_with_the_viewer(gpulens_exe: str) -> None:
    from gpulens.ipc import stream
    from gpulens.ipc.stream_decode import FrameDecoder

    p = subprocess.Popen(
        [gpulens_exe, "agent", "--stdio", "--no-trace", "--hostname", "s1", "--interval", "0.1", "--simulated-gpus", "1"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert p.stdin is not None and p.stdout is not None
    dec = FrameDecoder()
    msgs: list[stream.Message] = []
    while not msgs:
        assert isinstance(p.stdout, io.BufferedReader)  # Popen's default buffering
        msgs.extend(dec.feed(p.stdout.read1(65536)))
    assert isinstance(msgs[0], stream.Hello) and msgs[0].host == "s1"  # first bytes are a frame, no banner
    p.stdin.close()  # the viewer leaves
    assert p.wait(timeout=WAIT_S) == 0


def test_snapshot_over_ssh_lists_up_and_down_hosts(gpulens_exe: str, tmp_path: Path) -> None:
    # node9 fails like an unreachable ssh host would.
    wrapper = tmp_path / "fake-ssh"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = node9 ]; then echo "ssh: connect to host node9 port 22: No route to host" >&2; exit 255; fi\n'
        f'exec {shlex.quote(gpulens_exe)} agent --stdio --no-trace --quiet --hostname "$1" '
        "--interval 0.1 --simulated-gpus 1\n"
    )
    wrapper.chmod(0o755)
    out = subprocess.run(
        [gpulens_exe, "snapshot", "--ssh", "node[8-9]", "--ssh-command", f"{wrapper} {{host}}", "--timeout", "30", "--json"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 1, out.stderr
    hosts = {h["host"]: h for h in json.loads(out.stdout)["hosts"]}
    assert hosts["node8"]["up"] and hosts["node8"]["sample"]["host"] == "node8"
    assert not hosts["node9"]["up"] and "No route to host" in hosts["node9"]["reason"]
    assert hosts["node9"]["sample"] is None


def test_login_banner_on_stdout_is_explained() -> None:
    flags = StreamFlags(ssh="chatty", ssh_command="sh -c 'echo Welcome to {host}; sleep 5'")
    src = stream_source_from_flags(flags)
    log = EventLog()
    src.start(log)
    try:
        log.wait_for(lambda evs: any(isinstance(e, HostStatusEvent) for e in evs), what="down event")
        ev = next(e for e in log.snapshot() if isinstance(e, HostStatusEvent))
        assert not ev.up and "b'Welcome to chatty" in ev.reason and "printing to stdout" in ev.reason
    finally:
        src.stop()
