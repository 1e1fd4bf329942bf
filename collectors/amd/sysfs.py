"""Reading the amdgpu driver's sysfs text files: each value or the reason it is not there.

Every reader returns ``(value, None)`` or ``(None, why)``; nothing here raises
on a missing, unreadable or malformed file. Formats follow the kernel's
amdgpu documentation (Documentation/gpu/amdgpu/thermal.rst, driver-misc.rst,
ras.rst; drivers/gpu/drm/amd/pm/amdgpu_pm.c): plain decimal integers,
``pp_dpm_*`` level tables with ``*`` on the current level, ``ue: N`` /
``ce: M`` RAS counts, ``count0 count1 mps`` in ``pcie_bw``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path

ROOT_ENV = "GPULENS_SYSFS_ROOT"
"""Where ``sys/`` and ``proc/`` are read from (default ``/``): a captured tree in tests."""
MAX_TEXT = 16384
"""Longest sysfs text read (a page is 4 KiB; pp_dpm tables are far shorter)."""
MAX_INT = 1 << 63
_DPM_LINE = re.compile(r"^\s*(\S+):\s*(\d+)\s*mhz\s*(\*)?\s*$", re.IGNORECASE)
_DPM_STAR = re.compile(r"^\s*\S+:\s*(\d+)\s*mhz\s*\*\s*$", re.IGNORECASE | re.MULTILINE)

Value = tuple[int | None, str | None]


def root_from_env() -> Path:
    """``$GPULENS_SYSFS_ROOT`` or ``/``."""
    return Path(os.environ.get(ROOT_ENV) or "/")


def read_text(path: Path) -> tuple[str | None, str | None]:
    """The file's text, stripped; or None and why (absent, unreadable, not text)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TEXT)
    except FileNotFoundError:
        return None, f"{path.name} absent"
    except OSError as err:
        return None, f"{path.name} unreadable: {err.strerror or err}"
    try:
        return raw.decode("ascii").strip(), None
    except UnicodeDecodeError:
        return None, f"{path.name} is not text"


def parse_int(text: str, name: str, *, lo: int = 0, hi: int = MAX_INT, base: int = 10) -> Value:
    """A whole number in [lo, hi]; else None and why."""
    if not text:
        return None, f"{name} is empty"
    try:
        value = int(text, base)
    except ValueError:
        return None, f"{name} is not a number: {text[:40]!r}"
    if not lo <= value <= hi:
        return None, f"{name} out of range: {value}"
    return value, None


def read_int(path: Path, *, lo: int = 0, hi: int = MAX_INT, base: int = 10) -> Value:
    """:func:`read_text` then :func:`parse_int`."""
    text, why = read_text(path)
    if text is None:
        return None, why
    return parse_int(text, path.name, lo=lo, hi=hi, base=base)


def parse_dpm(text: str, name: str) -> Value:
    """The current level's MHz of a ``pp_dpm_sclk``/``pp_dpm_mclk`` table: ``1: 1700Mhz *``.

    The driver prints ``"%d: %uMhz %s\\n"`` per level (``S:`` for a deep-sleep level on
    some parts) and marks the current one with ``*``."""
    fast = _DPM_STAR.findall(text)
    if len(fast) == 1 and len(fast[0]) <= 6:  # the usual case: one starred level
        return int(fast[0]), None
    current: list[int] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _DPM_LINE.match(line)
        if m is None:
            return None, f"{name}: unexpected line {line.strip()[:40]!r}"
        if m.group(3):
            current.append(int(m.group(2)))
    if len(current) != 1:
        return None, f"{name}: {'no' if not current else 'more than one'} level marked current (*)"
    if current[0] > 100_000:
        return None, f"{name} out of range: {current[0]} MHz"
    return current[0], None


def parse_ras(text: str, name: str) -> tuple[tuple[int, int] | None, str | None]:
    """``(uncorrected, corrected)`` from a RAS ``*_err_count`` file: ``ue: N`` and ``ce: M``
    lines (newer kernels add ``de:``, deferred errors, which are left out)."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        key = key.strip().lower()
        if not sep or key not in ("ue", "ce"):
            continue
        value, why = parse_int(rest.strip(), f"{name} {key}")
        if value is None:
            return None, why
        found[key] = value
    if "ue" not in found or "ce" not in found:
        return None, f"{name}: no 'ue:' and 'ce:' lines"
    return (found["ue"], found["ce"]), None


def parse_pcie_bw(text: str, name: str = "pcie_bw") -> tuple[tuple[int, int, int] | None, str | None]:
    """``(received, sent, max payload bytes)`` from ``pcie_bw`` (``"%llu %llu %i"``)."""
    parts = text.split()
    if len(parts) != 3:
        return None, f"{name}: expected 'received sent mps', got {text[:40]!r}"
    out = []
    for part in parts:
        value, why = parse_int(part, name)
        if value is None:
            return None, why
        out.append(value)
    if not 0 < out[2] <= 4096:  # PCIe max payload: 128-4096 bytes
        return None, f"{name}: max payload size {out[2]} out of range"
    return (out[0], out[1], out[2]), None


def key_values(text: str) -> dict[str, str]:
    """``KEY=value`` lines (``uevent``) as a map."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def listdir(path: Path) -> list[str]:
    """Names in ``path``, sorted; [] when it cannot be listed."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def natural(name: str) -> tuple[str, int]:
    """``card10`` after ``card9``: the name's letters, then its number."""
    head = name.rstrip("0123456789")
    tail = name[len(head):]
    return head, int(tail) if tail else -1


def read_bytes(path: Path, limit: int = MAX_TEXT) -> tuple[bytes | None, str | None]:
    """The file's bytes (at most ``limit``), or None and why."""
    try:
        with open(path, "rb") as f:
            return f.read(limit), None
    except FileNotFoundError:
        return None, f"{path.name} absent"
    except OSError as err:
        return None, f"{path.name} unreadable: {err.strerror or err}"


GONE = frozenset({errno.ENODEV, errno.ENOENT})
"""What a kept sysfs file's read fails with once its device is gone (kernfs: ENODEV after removal)."""


class OpenFiles:
    """Files kept open and re-read with ``pread`` at offset 0.

    sysfs and procfs make a file's text anew on every read from offset 0
    (seq_file resets its iterator there), so one ``open`` serves every tick:
    a read costs a system call, not three. A file that fails is closed and
    opened again on the next read. ``device``: the files are one device's, so
    one found gone (ENODEV, ENOENT: the driver removed the device) closes them
    all, and :attr:`generation` counts such closes (what was read once from
    the device must be read again)."""

    def __init__(self, *, device: bool = False) -> None:
        self._fds: dict[str, int] = {}
        self._device = device
        self.generation = 0
        """How many times every file was closed because the device went away (or :meth:`close_all`)."""

    def read(self, path: str, limit: int = MAX_TEXT) -> tuple[bytes | None, str | None]:
        """The file's bytes now, or None and why (``path``: a string, as the hot path keeps them)."""
        fd = self._fds.get(path)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return None, f"{os.path.basename(path)} absent"
            except OSError as err:
                return None, f"{os.path.basename(path)} unreadable: {err.strerror or err}"
            self._fds[path] = fd
        try:
            return os.pread(fd, limit, 0), None
        except OSError as err:
            if self._device and err.errno in GONE:
                self.close_all()
            else:
                self.forget(path)
            return None, f"{os.path.basename(path)} unreadable: {err.strerror or err}"

    def text(self, path: str) -> tuple[str | None, str | None]:
        """:meth:`read` as stripped ASCII text."""
        raw, why = self.read(path)
        if raw is None:
            return None, why
        try:
            return raw.decode("ascii").strip(), None
        except UnicodeDecodeError:
            return None, f"{os.path.basename(path)} is not text"

    def integer(self, path: str, *, lo: int = 0, hi: int = MAX_INT) -> Value:
        """:meth:`text` then :func:`parse_int` (the file's name is looked up only for a reason)."""
        raw, why = self.read(path)
        if raw is None:
            return None, why
        digits = raw.strip()
        if digits.isdigit() and len(digits) < 19:  # the usual case: ASCII digits, no text made, no reason built
            value = int(digits)
            if lo <= value <= hi:
                return value, None
        try:
            text = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            return None, f"{os.path.basename(path)} is not text"
        return parse_int(text, os.path.basename(path), lo=lo, hi=hi)

    def forget(self, path: str) -> None:
        """Close ``path`` (the next read opens it again)."""
        fd = self._fds.pop(path, None)
        if fd is not None:
            with contextlib.suppress(OSError):  # closing: nothing to report
                os.close(fd)

    def close_all(self) -> None:
        """Close every file (the next reads open them again) and count a new :attr:`generation`."""
        for path in list(self._fds):
            self.forget(path)
        self.generation += 1

    def close(self) -> None:
        """Close every file."""
        self.close_all()

    def __len__(self) -> int:
        return len(self._fds)
