"""Signals to another host's processes, sent through the user's own ssh, never through an agent.

A root agent cannot tell who a remote viewer is (its stream carries no
identity), so no agent is ever asked to signal anything. Instead the viewer
runs ``ssh HOST <check>`` as the user: sshd authenticates her, and HOST's
kernel decides what she may signal. The command (:data:`SCRIPT`, POSIX sh,
one line so that any login shell passes it on) checks on HOST that the pid
is still the process shown (its start time, computed as the job collector
computes it) and that it belongs to the user ssh logged in as; its exit
status and last line say which check failed.

It runs twice: first to ``look`` (the command line HOST itself reports,
shown in the confirmation instead of the stream's, which an impostor agent
could have made up), then, once confirmed, to ``send`` (the same checks
again, then ``kill``).

The host name comes from the stream, so it is checked (:data:`HOST_NAME`)
before it reaches ssh's command line: never an option, never a shell word.
To ssh itself gpulens adds :data:`GUARDS` after the configured command, so
a user's ssh config cannot make a stream-named host get her agent or a
host key trusted on first use (options given first win; her own explicit
``signal_ssh`` options come first).
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import shlex
import signal as signals
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from gpulens.core.model import JobInfo
from gpulens.core.reasons import Reason, ReasonText
from gpulens.core.sanitize import clean_text

HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,252}")
"""What may be handed to ssh as a destination (full match): a host name or address, no user@, no option."""

TIMEOUT_S = 20.0
"""The longest one ssh run may take, its connection included."""

GUARDS = ("-T", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ForwardAgent=no",
          "-o", "ForwardX11=no", "-o", "ClearAllForwardings=yes", "-o", "PermitLocalCommand=no",
          "-o", "ControlMaster=no")
"""Added to an ``ssh`` command: no prompt, no unknown host key accepted, nothing forwarded."""

SCRIPT = (
    'p=$1; want=$2; sig=$3; mode=$4; '
    's=$(cat /proc/$p/stat 2>/dev/null) || { echo gone; exit 3; }; '
    'set -- ${s##*) }; t=${20}; '
    'b=$(sed -n "s/^btime //p" /proc/stat); hz=$(getconf CLK_TCK); '
    'd=$((b + t / hz - want)); [ ${d#-} -le 2 ] || { echo changed; exit 4; }; '
    'u=$(stat -c %u /proc/$p); me=$(id -u); [ "$u" = "$me" ] || { echo "owner $u $me"; exit 5; }; '
    'if [ "$mode" = look ]; then echo "ok $(tr -s "[:cntrl:]" " " < /proc/$p/cmdline | head -c 300)"; exit 0; fi; '
    'kill -s $sig $p || exit 6; echo sent'
)
"""Run by ``sh -c SCRIPT gpulens-signal PID START SIGNAL MODE`` on the remote host.

Exit 3 (``gone``): no such pid; 4 (``changed``): its start time is not
``START`` (within 2 s): another process now; 5 (``owner UID MYUID``): not
the user's; 6: ``kill`` failed. MODE ``look`` prints ``ok CMDLINE`` instead
of sending. No ``!``, backslash, quote or newline, which csh- or fish-family
login shells would read differently.
"""

_MARKS = {3: "gone", 4: "changed", 5: "owner "}
"""The last line each failing check prints: an exit status without it is ssh's or a login script's."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What one run of the check said: ``ok`` and its text (the command line, or ``SIGTERM sent to ...``),
    or not ``ok`` and why, in words."""

    ok: bool
    text: str


class NoSshKind(enum.Enum):
    """Why ssh is not asked; the comment says which fields of :class:`NoSsh` it fills."""

    OFF = "off"  # the config's signal_ssh is empty
    BAD_HOST = "bad-host"  # host: a name ssh may not be given (not a HOST_NAME)


@dataclass(frozen=True, slots=True)
class NoSsh(Reason):
    """Why no signal can go to a host through ssh: ``kind`` and the host; ``str()`` is the sentence shown."""

    kind: NoSshKind
    host: str = ""

    TEXT: ClassVar[ReasonText] = {
        NoSshKind.OFF: "signals to other hosts are off (config: signal_ssh = [])",
        NoSshKind.BAD_HOST: lambda v: f"the host name {clean_text(v.host[:60])!r} is not one ssh may be given",
    }


def no_ssh(host: str, ssh: Sequence[str]) -> NoSsh | None:
    """Why no signal can go to ``host`` through ssh (None: it can)."""
    if not ssh:
        return NoSsh(NoSshKind.OFF)
    if not HOST_NAME.fullmatch(host):
        return NoSsh(NoSshKind.BAD_HOST, host)
    return None


def ssh_argv(ssh: Sequence[str], host: str, job: JobInfo, signal: str, mode: str = "send") -> list[str]:
    """The command that checks ``job``'s process on ``host`` and sends it ``signal`` (or, ``look``, shows it)."""
    if no_ssh(host, ssh) is not None:
        raise ValueError(f"no ssh to {clean_text(host[:60])!r}")  # a host name from the stream
    remote = shlex.join(["sh", "-c", SCRIPT, "gpulens-signal", str(int(job.pid)), str(int(job.start_time)),
                         signal.removeprefix("SIG"), mode])
    guards = GUARDS if Path(ssh[0]).name == "ssh" else ()
    return [*ssh, *guards, "--", host, remote]


def look_over_ssh(ssh: Sequence[str], host: str, job: JobInfo) -> Answer:
    """Check ``job``'s process on ``host`` without signalling it; ``ok``: its command line as HOST reports it."""
    return _run(ssh, host, job, "SIGTERM", "look")


def send_over_ssh(ssh: Sequence[str], host: str, job: JobInfo, signal: str) -> str:
    """Send ``signal`` to ``job``'s process on ``host`` through ssh; what happened, in words."""
    answer = _run(ssh, host, job, signal, "send")
    return answer.text if answer.ok else f"not sent: {answer.text}"


def _run(ssh: Sequence[str], host: str, job: JobInfo, signal: str, mode: str) -> Answer:
    why = no_ssh(host, ssh)
    if why is not None:
        return Answer(False, str(why))
    try:
        # A session of its own: ssh (and a ProxyCommand) can never read or write the TUI's terminal.
        child = subprocess.Popen(ssh_argv(ssh, host, job, signal, mode), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                 start_new_session=True)
    except FileNotFoundError:
        return Answer(False, f"{ssh[0]!r} not found (config: signal_ssh)")
    except OSError as failed:
        return Answer(False, f"{ssh[0]}: {failed.strerror}")
    try:
        out, err = child.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signals.SIGKILL)
        child.communicate()
        return Answer(False, f"no answer from {host} in {TIMEOUT_S:g} s" +
                      (" (it may have been sent)" if mode == "send" else ""))
    return _answer(host, job, signal, mode, child.returncode, out, err)


def _answer(host: str, job: JobInfo, signal: str, mode: str, code: int, out: str, err: str) -> Answer:
    lines = out.strip().splitlines()
    said = lines[-1] if lines else ""
    where = f"{host} pid {job.pid}"
    if code == 0 and mode == "send" and said == "sent":
        return Answer(True, f"{signal} sent to {where}")
    if code == 0 and mode == "look" and said.startswith("ok"):
        return Answer(True, clean_text(said[3:].strip()) or "(no command line: a kernel thread or a zombie)")
    mark = _MARKS.get(code)
    if mark is not None and said.startswith(mark):
        if code == 3:
            return Answer(False, f"{where} has exited")
        if code == 4:
            return Answer(False, f"{where} is now another process (its start time changed)")
        parts = said.split()
        owner, me = (parts[1], parts[2]) if len(parts) == 3 else ("?", "?")
        return Answer(False, f"{where} belongs to uid {clean_text(owner)}, not to you (uid {clean_text(me)} "
                             f"on {host}): gpulens signals only your own")
    errs = err.strip().splitlines()
    detail = clean_text(errs[-1][:200]) if errs else f"exit status {code}"
    if code == 6:
        return Answer(False, f"kill on {host} failed: {detail}")
    return Answer(False, f"ssh {host}: {detail}")
