"""The part of a profile an export keeps: one node's subtree, or every stack through a regex.

``focus_node`` is what the TUI's focus shows (one node, its stacks starting
at its frame). ``focus_regex`` is ``--focus REGEX``: every stack that passes
through a matching frame, cut so it starts at the outermost match (recursion
is counted once), merged into one profile whose total is the search's value.
"""

from __future__ import annotations

import re

from gpulens.analysis.flame.errors import FlameError
from gpulens.analysis.flame.model import Profile, build_from_stacks, subtree_stacks
from gpulens.analysis.flame.query import MAX_PATTERN_CHARS


def focus_node(profile: Profile, node: int) -> Profile:
    """``node``'s subtree as a profile of its own (the root itself when ``node`` is 0)."""
    if node == 0:
        return profile
    if not 0 < node < profile.n_nodes:
        raise FlameError(f"no node {node} in this profile")
    title = f"{profile.title} (focus: {profile.label(node)})" if profile.title else f"focus: {profile.label(node)}"
    return build_from_stacks(subtree_stacks(profile, node), profile.unit, title)


def focus_regex(profile: Profile, pattern: str) -> Profile:
    """Every stack through a frame matching ``pattern`` (text or label), starting at its outermost match.

    Raises FlameError for a bad pattern or when nothing matches.
    """
    if len(pattern) > MAX_PATTERN_CHARS:
        raise FlameError(f"--focus: pattern longer than {MAX_PATTERN_CHARS} characters")
    try:
        rx = re.compile(pattern)
    except re.error as err:
        raise FlameError(f"--focus: bad pattern {pattern!r}: {err}") from None
    matched = {fid for fid, text in enumerate(profile.frames) if rx.search(text) or rx.search(profile.info(fid).label)}
    stacks: list[tuple[list[str], float]] = []
    if matched:
        lookup = {profile.frames[f] for f in matched}
        for frames, value in profile.stacks():
            for i, text in enumerate(frames):
                if text in lookup:
                    stacks.append((frames[i:], value))
                    break
    if not stacks:
        raise FlameError(f"--focus: no frame matches {pattern!r}")
    title = f"{profile.title} (focus: /{pattern}/)" if profile.title else f"focus: /{pattern}/"
    return build_from_stacks(stacks, profile.unit, title)
