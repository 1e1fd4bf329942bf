"""Write a :class:`~.model.Profile` as folded stacks or speedscope JSON."""

from __future__ import annotations

import json

from .folded import to_folded
from .model import Profile
from .speedscope import to_speedscope


def export_folded(profile: Profile, path: str) -> None:
    """Write ``frame;frame COUNT`` lines (values in the profile's unit). Raises OSError."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(to_folded(profile))


def export_speedscope(profile: Profile, path: str) -> None:
    """Write a speedscope document with one sampled profile. Raises OSError."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(to_speedscope(profile), fh, separators=(",", ":"))
