"""A writable copy of an amdgpu fixture tree (tests/data/amdgpu/) with a fake /proc of DRM clients.

The sysfs part is copied from the committed fixtures; the ``proc/PID/fd/N``
links (to ``/dev/dri/renderD128`` and the like: only the link text is read,
never followed) and ``proc/PID/fdinfo/N`` files are written here, so tests can
change them between two reads.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.paths import DATA

AMD_DATA = DATA / "amdgpu"


def fdinfo(client_id: int, *, vram_kib: int | None = 1024, gfx_ns: int | None = 0, compute_ns: int | None = None,
           pdev: str = "0000:03:00.0", driver: str = "amdgpu", capacity: dict[str, int] | None = None) -> str:
    """An amdgpu fdinfo as Linux 6.x prints it (drm-usage-stats.rst keys; amdgpu_fdinfo.c order)."""
    lines = ["pos:\t0", "flags:\t02100002", "mnt_id:\t24", "ino:\t1030", f"drm-driver:\t{driver}",
             f"drm-pdev:\t{pdev}", f"drm-client-id:\t{client_id}"]
    if vram_kib is not None:
        lines.append(f"drm-memory-vram:\t{vram_kib} KiB")
    lines += ["drm-memory-gtt: \t2048 KiB", "drm-memory-cpu: \t0 KiB", "amd-memory-visible-vram:\t0 KiB"]
    if gfx_ns is not None:
        lines.append(f"drm-engine-gfx:\t{gfx_ns} ns")
    if compute_ns is not None:
        lines.append(f"drm-engine-compute:\t{compute_ns} ns")
    for engine, n in (capacity or {}).items():
        lines.append(f"drm-engine-capacity-{engine}:\t{n}")
    return "\n".join(lines) + "\n"


class AmdTree:
    """``root`` holds ``sys/`` (a copy of one fixture tree, or several merged) and ``proc/``."""

    def __init__(self, root: Path, *trees: str) -> None:
        self.root = root
        for tree in trees:
            shutil.copytree(AMD_DATA / tree, root, dirs_exist_ok=True)
        (root / "proc").mkdir(parents=True, exist_ok=True)

    def device(self, card: str) -> Path:
        """``sys/class/drm/<card>/device``."""
        return self.root / "sys" / "class" / "drm" / card / "device"

    def set(self, card: str, rel: str, text: str | bytes) -> None:
        """Write one sysfs file of ``card`` (relative to its device directory)."""
        path = self.device(card) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)

    def kfd_process(self, pid: int) -> None:
        """``pid`` is a KFD (ROCm compute) process: ``sys/class/kfd/kfd/proc/PID/pasid``, as kfd_process.c makes it."""
        base = self.root / "sys" / "class" / "kfd" / "kfd" / "proc" / str(pid)
        base.mkdir(parents=True, exist_ok=True)
        (base / "pasid").write_text("32769\n")

    def open_fd(self, pid: int, fd: int, node: str, info: str) -> None:
        """Process ``pid`` holds descriptor ``fd`` on ``/dev/dri/<node>`` with fdinfo ``info``."""
        base = self.root / "proc" / str(pid)
        (base / "fd").mkdir(parents=True, exist_ok=True)
        (base / "fdinfo").mkdir(parents=True, exist_ok=True)
        link = base / "fd" / str(fd)
        if link.is_symlink():
            link.unlink()
        os.symlink(f"/dev/dri/{node}", link)
        (base / "fdinfo" / str(fd)).write_text(info)

    def other_fd(self, pid: int, fd: int, target: str = "/dev/null") -> None:
        """A descriptor that is no GPU's."""
        base = self.root / "proc" / str(pid) / "fd"
        base.mkdir(parents=True, exist_ok=True)
        os.symlink(target, base / str(fd))


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt
