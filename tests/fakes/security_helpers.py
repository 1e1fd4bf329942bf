"""Throwaway local users for the attack tests (issue 14).

The attacks in tests/**/test_security_*.py are made by *another user of the
node*: a process with a different, unprivileged uid. When the suite runs as
root (as CI does) the ``two_users`` fixture creates two fresh accounts with
``useradd`` and removes them afterwards; otherwise the tests that need them
skip and say why. ``call_as(user, fn, *args)`` runs a Python function as such
a user in a forked child (``setgid``/``setuid`` first) and returns its result:
forking needs no interpreter the user can read (the venv's Python may live
under root's 0700 home). ``popen_as`` starts a program (``sleep``) as the user.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest


@dataclass(frozen=True, slots=True)
class User:
    """A throwaway local account."""

    name: str
    uid: int
    gid: int


def _why_no_users() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create throwaway users (CI runs as root)"
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        return "needs useradd/userdel (Debian package passwd)"
    return None


def _make_user() -> User:
    name = f"gl_atk_{secrets.token_hex(4)}"
    subprocess.run(
        ["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", name],
        check=True, capture_output=True, timeout=30,
    )
    import pwd

    pw = pwd.getpwnam(name)
    return User(name, pw.pw_uid, pw.pw_gid)


def _remove_user(user: User) -> None:
    subprocess.run(["pkill", "-9", "-u", str(user.uid)], capture_output=True, timeout=30)
    subprocess.run(["userdel", "-f", user.name], capture_output=True, timeout=30)


@pytest.fixture
def two_users() -> Iterator[tuple[User, User]]:
    """Two fresh unprivileged users (victim, attacker); skips when they cannot be made."""
    why = _why_no_users()
    if why is not None:
        pytest.skip(why)
    made: list[User] = []
    try:
        made.append(_make_user())
        made.append(_make_user())
        yield made[0], made[1]
    finally:
        for u in made:
            _remove_user(u)


def demote(user: User) -> None:
    """Become ``user`` (for ``preexec_fn``)."""
    os.setgroups([])
    os.setgid(user.gid)
    os.setuid(user.uid)


def popen_as(user: User, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` as ``user`` (cwd /, no inherited fds; ``env`` None: this process's)."""
    return subprocess.Popen(argv, preexec_fn=lambda: demote(user), cwd="/", close_fds=True, env=env)


def call_as(user: User, fn: Callable[..., Any], *args: Any, timeout: float = 60.0) -> Any:
    """Run ``fn(*args)`` as ``user`` in a forked child; returns its (picklable) result.

    An exception in the child is re-raised here as ``RuntimeError`` carrying its repr.
    """
    import pickle
    import select

    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        code = 0
        try:
            os.close(rfd)
            demote(user)
            try:
                payload = pickle.dumps(("ok", fn(*args)))
            except BaseException as err:
                payload = pickle.dumps(("err", repr(err)))
            with os.fdopen(wfd, "wb") as f:
                f.write(payload)
        except BaseException:
            code = 1
        os._exit(code)
    os.close(wfd)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, 9)
                raise TimeoutError(f"call_as({getattr(fn, '__name__', fn)}) still running after {timeout:g} s")
            ready, _, _ = select.select([rfd], [], [], left)
            if not ready:
                continue
            data = os.read(rfd, 1 << 16)
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(rfd)
        os.waitpid(pid, 0)
    if not chunks:
        raise RuntimeError("the child died before answering")
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "err":
        raise RuntimeError(f"as {user.name}: {value}")
    return value


def run_as(user: User, code: str, *, timeout: float = 60.0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run Python ``code`` as ``user`` in a new interpreter (only where ``sys.executable`` is
    readable by that user; prefer :func:`call_as`)."""
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/"}
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=lambda: demote(user),
        cwd="/",
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        check=False,
    )
