"""Files that hold several profiles (one per thread): pick one, or merge them all.

A speedscope file from py-spy has one profile per thread; a Chrome trace
(py-spy's ``--format chrometrace``) has one event stream per thread. A
:class:`ProfileGroup` names the parts and builds the one asked for: an index,
or :data:`ALL` for every part merged, each under a frame named after its part
(as py-spy's ``--threads`` puts a ``thread (0x...)`` frame at the root).
Every other format is a group of one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpulens.analysis.flame.errors import FlameError
from gpulens.analysis.flame.model import Profile, build_from_stacks

ALL = "all"
"""Pick every part, merged (``--profile all``, the picker's first entry)."""


@dataclass(frozen=True, slots=True)
class Part:
    """One profile of a group: its name, unit and how to build it."""

    name: str
    unit: str
    build: Callable[[], Profile] = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class ProfileGroup:
    """The profiles of one file; ``active`` is the one its producer marked (else 0), or :data:`ALL`."""

    title: str
    parts: tuple[Part, ...]
    active: int | str = 0
    _built: dict[int | str, Profile] = field(default_factory=dict, repr=False, compare=False)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parts)

    def __len__(self) -> int:
        return len(self.parts)

    def pick(self, which: int | str | None = None) -> Profile:
        """Part ``which`` (0-based), :data:`ALL` merged, or None for :attr:`active`.

        Raises FlameError for an index out of range, or for merging parts in
        different units (seconds and bytes cannot share a graph).
        """
        key: int | str = self.active if which is None else which
        got = self._built.get(key)
        if got is not None:
            return got
        if key == ALL:
            got = self._merge() if len(self.parts) > 1 else self.pick(0)
        elif isinstance(key, int) and 0 <= key < len(self.parts):
            got = self.parts[key].build()
        else:
            raise FlameError(f"{self.title or 'profile'}: no profile {key!r}; this file has "
                             f"{len(self.parts)} (0..{len(self.parts) - 1}, or {ALL})")
        self._built[key] = got
        return got

    def label(self, which: int | str | None) -> str:
        """What the picker and the title call ``which``."""
        key = self.active if which is None else which
        if key == ALL:
            return f"all {len(self.parts)} threads/profiles merged" if len(self.parts) > 1 else self.parts[0].name
        return self.parts[int(key)].name

    def _merge(self) -> Profile:
        units = {p.unit for p in self.parts}
        if len(units) > 1:
            raise FlameError(f"{self.title}: cannot merge profiles in different units ({', '.join(sorted(units))}); "
                             "pick one")
        stacks: list[tuple[list[str], float]] = []
        for i, part in enumerate(self.parts):
            prof = self.pick(i)
            stacks.extend(([part.name, *frames], value) for frames, value in prof.stacks())
            if prof.node_self[0]:
                stacks.append(([part.name], prof.node_self[0]))
        return build_from_stacks(stacks, units.pop(), f"{self.title}: {self.label(ALL)}")


def single(profile: Profile) -> ProfileGroup:
    """A group of one (every format without parts)."""
    return ProfileGroup(profile.title, (Part(profile.title or "profile", profile.unit, lambda: profile),), 0)


def parse_choice(text: str | None, n: int) -> int | str | None:
    """``--profile`` as given: None, ``all``, or a 0-based index. Raises FlameError."""
    if text is None:
        return None
    if text.strip().lower() == ALL:
        return ALL
    try:
        value = int(text)
    except ValueError:
        raise FlameError(f"--profile: expected a number 0..{n - 1} or '{ALL}', got {text!r}") from None
    if not 0 <= value < n:
        raise FlameError(f"--profile: {value} out of range; this file has {n} profile(s): 0..{n - 1} or '{ALL}'")
    return value


def group_of(title: str, parts: Sequence[Part], active: int | str = 0) -> ProfileGroup:
    """A group of ``parts`` (at least one); an ``active`` index out of range becomes 0."""
    if not parts:
        raise FlameError(f"{title}: no profiles")
    if active != ALL and not (isinstance(active, int) and 0 <= active < len(parts)):
        active = 0
    return ProfileGroup(title, tuple(parts), active)
