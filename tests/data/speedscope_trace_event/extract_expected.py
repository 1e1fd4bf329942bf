"""Turn speedscope's jest snapshot of its trace-event importer into expected.json (see SOURCES.md).

Usage::

    python extract_expected.py trace-event.test.ts.snap [speedscope-run.json] > expected.json

``trace-event.test.ts.snap`` is speedscope's ``src/import/__snapshots__/trace-event.test.ts.snap``:
for each test, ``dumpProfile`` of every profile (its name, the stacks in time order with their
formatted weights, and its frames with exact self and total weights). Per input file this writes,
per profile in speedscope's order: the name, ``stacks`` (folded stack -> [weight in µs, rounding
tolerance in µs], the snapshot prints 2 decimals of µs/ms/s), ``idle_us`` (the stack-less time
between events, which speedscope prints as an empty stack) and ``frames`` (exact weights).

``speedscope-run.json`` (optional) is what speedscope's own importer printed for every sample file
(``speedscope_dump.ts``): the file the snapshot lacks is taken from it (exact weights,
tolerance 0), and every file the snapshot has is checked against it.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

_EXPORT = re.compile(r"^exports\[`(?P<test>.*?)`\] = `\n?(?P<body>.*?)`;$", re.M | re.S)
_UNITS = {"ns": 1e-3, "µs": 1.0, "ms": 1e3, "s": 1e6}


def _value(text: str) -> tuple[float, float]:
    """A TimeFormatter string (``2.00µs``) in µs, and half its last printed digit."""
    m = re.fullmatch(r"(\d+\.\d\d)(ns|µs|ms|s)", text)
    if m is None:
        raise ValueError(f"unexpected weight {text!r}")
    scale = _UNITS[m.group(2)]
    return float(m.group(1)) * scale, 0.005 * scale


def _field(line: str, name: str) -> str | None:
    prefix = f'"{name}": '
    line = line.strip()
    if not line.startswith(prefix):
        return None
    return line[len(prefix):].removesuffix(",")


def _literal(text: str) -> Any:
    if text in ("undefined", "null"):
        return None
    if text.startswith('"'):
        return text[1:-1]  # pretty-format does not escape inner quotes
    return float(text) if "." in text else int(text)


def _profile(body: str) -> dict[str, Any]:
    lines = body.splitlines()
    name: Any = None
    frames: list[dict[str, Any]] = []
    stacks: dict[str, list[float]] = {}
    idle = 0.0
    frame: dict[str, Any] = {}
    in_stacks = False
    for line in lines:
        if line.startswith('  "name": '):
            name = _literal(_field(line, "name") or "")
        elif line.strip() == '"stacks": [':
            in_stacks = True
        elif in_stacks and line.strip().startswith('"'):
            folded, _, weight = line.strip()[1:-2].rpartition(" ")
            us, tol = _value(weight)
            if folded:
                got = stacks.setdefault(folded, [0.0, 0.0])
                got[0] += us
                got[1] += tol
            else:
                idle += us
        elif line.strip() == "Frame {":
            frame = {}
        elif line.strip() == "},":
            if frame:
                frames.append(frame)
            frame = {}
        else:
            for key, out in (("name", "name"), ("file", "file"), ("line", "line"),
                             ("selfWeight", "self_us"), ("totalWeight", "total_us")):
                value = _field(line, key)
                if value is not None and not line.startswith('  "'):
                    frame[out] = _literal(value)
    return {"name": name, "stacks": {k: [round(v[0], 6), round(v[1], 6)] for k, v in stacks.items()},
            "idle_us": round(idle, 6), "frames": frames}


def from_snapshot(text: str) -> dict[str, list[dict[str, Any]]]:
    bodies: dict[str, list[tuple[int, str]]] = {}
    files: dict[str, str] = {}
    for m in _EXPORT.finditer(text):
        test, body = m.group("test"), m.group("body")
        if test.endswith(": profileGroup.name 1"):
            files[test.removesuffix(": profileGroup.name 1")] = json.loads(body)
        elif not test.endswith(": indexToView 1"):
            base, _, n = test.rpartition(" ")
            bodies.setdefault(base, []).append((int(n), body))
    out: dict[str, list[dict[str, Any]]] = {}
    for test, parts in sorted(bodies.items()):
        profiles = [_profile(body) for _, body in sorted(parts)]
        file = files[test]
        if file in out and out[file] != profiles:
            raise ValueError(f"two tests of {file} disagree")
        out[file] = profiles
    return out


def from_run(run: list[dict[str, Any]]) -> list[dict[str, Any]]:
    profiles = []
    for prof in run:
        stacks: dict[str, list[float]] = {}
        idle = 0.0
        for folded, us in prof["stacks"]:
            if folded:
                stacks.setdefault(folded, [0.0, 0.0])[0] += us
            else:
                idle += us
        frames = [{"name": f["name"], "file": f["file"], "line": f["line"], "self_us": f["self"],
                   "total_us": f["total"]} for f in prof["frames"]]
        profiles.append({"name": prof["name"], "stacks": stacks, "idle_us": idle, "frames": frames})
    return profiles


def _agree(snap: list[dict[str, Any]], run: list[dict[str, Any]]) -> bool:
    if [p["name"] for p in snap] != [p["name"] for p in run]:
        return False
    for a, b in zip(snap, run, strict=True):
        if a["stacks"].keys() != b["stacks"].keys() or a["frames"] != b["frames"]:
            return False
        if any(abs(a["stacks"][k][0] - b["stacks"][k][0]) > a["stacks"][k][1] + 1e-9 for k in a["stacks"]):
            return False
    return True


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as f:
        expected: dict[str, Any] = {k: {"from": "snapshot", "profiles": v} for k, v in from_snapshot(f.read()).items()}
    if len(argv) > 2:
        with open(argv[2], encoding="utf-8") as f:
            run = json.load(f)
        for file, profiles in run.items():
            got = from_run(profiles)
            if file not in expected:
                expected[file] = {"from": "speedscope importer run (not in the snapshot)", "profiles": got}
            elif not _agree(expected[file]["profiles"], got):
                raise SystemExit(f"{file}: the snapshot and speedscope's importer disagree")
    json.dump(dict(sorted(expected.items())), sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
