"""Synthetic folded stacks for the flame-graph benchmark (deterministic)."""

from __future__ import annotations

import random


def generate_folded(path: str, n_stacks: int = 100_000, n_samples: int = 1_000_000, seed: int = 42) -> int:
    """Write ``n_stacks`` distinct stacks totalling ``n_samples``; returns bytes written.

    Stacks look like Python programs: 8-32 frames of ``pkg.module:Class.method``
    names; each level picks among a few likely callees, so prefixes are
    shared the way real call trees share them.
    """
    rng = random.Random(seed)
    names = [
        f"pkg{rng.randrange(40)}/m{rng.randrange(200)}.py:C{rng.randrange(500)}.fn_{i}"
        for i in range(20_000)
    ]
    seen: set[tuple[int, ...]] = set()
    stacks: list[tuple[int, ...]] = []
    while len(stacks) < n_stacks:
        depth = rng.randint(6, 28)
        frames = [rng.randrange(8)]
        for _ in range(depth - 1):
            choice = min(int(rng.expovariate(1.0)), 40)
            frames.append((frames[-1] * 7919 + choice * 104729 + len(frames)) % len(names))
        key = tuple(frames)
        if key not in seen:
            seen.add(key)
            stacks.append(key)
    weights = [rng.paretovariate(1.2) for _ in stacks]
    scale = (n_samples - n_stacks) / sum(weights)
    counts = [1 + int(w * scale) for w in weights]
    counts[0] += n_samples - sum(counts)
    with open(path, "w", encoding="utf-8") as fh:
        for key, count in zip(stacks, counts, strict=True):
            fh.write(";".join(names[f] for f in key))
            fh.write(f" {count}\n")
        return fh.tell()
