"""Signals to another host's processes, sent through the user's own ssh, never through an agent.

A root agent cannot tell who a remote viewer is (its stream carries no
identity), so no agent is ever asked to signal anything. Instead the viewer
runs ``ssh HOST <check and signal>`` as the user: sshd authenticates her,
and HOST's kernel decides what she may signal. The command (:data:`SCRIPT`,
POSIX sh, one line so that any login shell passes it on) checks on HOST,
right before ``kill``, that the pid is still the process shown (its start
time, computed as the job collector computes it) and that it belongs to the
user ssh logged in as; its exit status says which check failed.

The host name comes from the stream, so it is checked (:data:`HOST_NAME`)
before it reaches ssh's command line: never an option, never a shell word.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable, Sequence

from gpulens.core.model import JobInfo
from gpulens.core.sanitize import clean_text

HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,252}")
"""What may be handed to ssh as a destination (full match): a host name or address, no user@, no option."""

TIMEOUT_S = 20.0
"""The longest a remote signal may take, ssh's connection included."""

SCRIPT = (
    'p=$1; want=$2; sig=$3; '
    's=$(cat /proc/$p/stat 2>/dev/null) || { echo gone; exit 3; }; '
    'set -- ${s##*) }; t=${20}; '
    'b=$(sed -n "s/^btime //p" /proc/stat); hz=$(getconf CLK_TCK); '
    'd=$((b + t / hz - want)); [ ${d#-} -le 2 ] || { echo changed; exit 4; }; '
    'u=$(stat -c %u /proc/$p); me=$(id -u); [ "$u" = "$me" ] || { echo "owner $u $me"; exit 5; }; '
    'kill -s $sig $p || exit 6; echo sent'
)
"""Run by ``sh -c SCRIPT gpulens-signal PID START SIGNAL`` on the remote host.

Exit 3: no such pid; 4: its start time is not ``START`` (within 2 s): another
process now; 5: not the user's (prints ``owner UID MYUID``); 6: ``kill``
failed. No ``!``, backslash, quote or newline, which csh- or fish-family login shells would
read differently.
"""

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def ssh_refusal(host: str, ssh: Sequence[str]) -> str | None:
    """Why no signal can go to ``host`` through ssh (None: it can)."""
    if not ssh:
        return "signals to other hosts are off (config: signal_ssh = [])"
    if not HOST_NAME.fullmatch(host):
        return f"the host name {clean_text(host[:60])!r} is not one ssh may be given"
    return None


def ssh_argv(ssh: Sequence[str], host: str, job: JobInfo, signal: str) -> list[str]:
    """The command that checks ``job``'s process on ``host`` and sends it ``signal`` (``SIGTERM``)."""
    if ssh_refusal(host, ssh) is not None:
        raise ValueError(f"no ssh to {host!r}")
    remote = shlex.join(["sh", "-c", SCRIPT, "gpulens-signal", str(int(job.pid)), str(int(job.start_time)),
                         signal.removeprefix("SIG")])
    return [*ssh, "--", host, remote]


def send_over_ssh(ssh: Sequence[str], host: str, job: JobInfo, signal: str,
                  run: Runner = subprocess.run) -> str:
    """Send ``signal`` to ``job``'s process on ``host`` through ssh; what happened, in words."""
    why = ssh_refusal(host, ssh)
    if why is not None:
        return f"not sent: {why}"
    argv = ssh_argv(ssh, host, job, signal)
    where = f"{host} pid {job.pid}"
    try:
        done = run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT_S,
                   errors="replace")
    except FileNotFoundError:
        return f"not sent: {ssh[0]!r} not found (config: signal_ssh)"
    except subprocess.TimeoutExpired:
        return f"not known whether sent: no answer from {host} in {TIMEOUT_S:g} s"
    except OSError as failed:
        return f"not sent: {ssh[0]}: {failed.strerror}"
    out = done.stdout.strip().splitlines()[-1:] if done.stdout else []
    said = out[0] if out else ""
    code = done.returncode
    if code == 0 and said == "sent":
        return f"{signal} sent to {where}"
    if code == 3:
        return f"not sent: {where} has exited"
    if code == 4:
        return f"not sent: {where} is now another process (its start time changed)"
    if code == 5:
        parts = said.split()
        owner, me = (parts[1], parts[2]) if len(parts) == 3 else ("?", "?")
        return (f"not sent: {where} belongs to uid {clean_text(owner)}, not to you (uid {clean_text(me)} "
                f"on {host}): gpulens signals only your own")
    err = (done.stderr or "").strip().splitlines()
    detail = clean_text(err[-1][:200]) if err else f"exit status {code}"
    if code == 6:
        return f"not sent: kill on {host} failed: {detail}"
    return f"not sent: ssh {host}: {detail}"
