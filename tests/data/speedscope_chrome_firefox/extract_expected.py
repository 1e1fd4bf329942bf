"""Turn speedscope's jest snapshots of its Chrome and Firefox importers into expected.json (see SOURCES.md).

Usage::

    python extract_expected.py chrome.test.ts.snap firefox.test.ts.snap v8heapalloc.test.ts.snap > expected.json

Each snapshot records ``dumpProfile`` of the profile a test imported: its stacks in time order with
weights printed by speedscope's formatters (``TimeFormatter``: 2 decimals of ns/µs/ms/s;
``ByteFormatter``: whole B, else 2 decimals of KB/MB/GB of 1024) and its frames with exact weights
(µs for cpuprofiles, ms for Firefox, bytes for heap profiles). Per local file this writes the
profile's ``unit``, ``stacks`` (frame names joined by ``;`` -> [value, rounding tolerance], summed
over the stack's lines), ``idle`` (the empty stack's value, not counted by gpulens) and ``frames``.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

# test name in the snapshot -> (local file, unit of the printed and exact weights)
TESTS = {
    "importFromChromeCPUProfile": ("simple.cpuprofile", "us"),
    "importFromV8Profiler Node 10": ("example.cpuprofile", "us"),
    "importFromFirefox": ("firefox59-simple-firefox.json", "ms"),
    "importFromFirefox recursion": ("firefox61-recursion.json", "ms"),
    "importFromFirefox ignore self-hosted": ("firefox63-simple-firefox.json", "ms"),
    "importV8HeapAlloc from Chrome": ("Heap-20181005T144546.heapprofile", "bytes"),
}
_EXPORT = re.compile(r"^exports\[`(?P<test>.*?)`\] = `\n?(?P<body>.*?)`;$", re.M | re.S)
_TIME = {"ns": 1e-3, "µs": 1.0, "ms": 1e3, "s": 1e6}
_BYTES = {"KB": 1024.0, "MB": 1024.0**2, "GB": 1024.0**3}


def _value(text: str, unit: str) -> tuple[float, float]:
    """A printed weight in ``unit`` (µs, ms or bytes) and half its last printed digit."""
    m = re.fullmatch(r"(\d+) B", text)
    if m:
        return float(m.group(1)), 0.5
    m = re.fullmatch(r"(\d+\.\d\d) ?(KB|MB|GB)", text)
    if m:
        scale = _BYTES[m.group(2)]
        return float(m.group(1)) * scale, 0.005 * scale
    m = re.fullmatch(r"(\d+\.\d\d)(ns|µs|ms|s)", text)
    if m is None:
        raise ValueError(f"unexpected weight {text!r}")
    scale = _TIME[m.group(2)] / (1e3 if unit == "ms" else 1.0)
    return float(m.group(1)) * scale, 0.005 * scale


def _literal(text: str) -> Any:
    text = text.removesuffix(",")
    if text in ("undefined", "null"):
        return None
    if text.startswith('"'):
        return text[1:-1]
    return float(text) if "." in text else int(text)


def _profile(body: str, unit: str) -> dict[str, Any]:
    frames: list[dict[str, Any]] = []
    stacks: dict[str, list[float]] = {}
    idle = 0.0
    frame: dict[str, Any] = {}
    in_stacks = False
    keys = {"name": "name", "file": "file", "line": "line", "selfWeight": "self", "totalWeight": "total"}
    for line in body.splitlines():
        text = line.strip()
        if text == '"stacks": [':
            in_stacks = True
        elif in_stacks and text.startswith('"'):
            folded, _, weight = text[1:-2].rpartition(" ")
            if weight in ("B", "KB", "MB", "GB"):
                folded, _, number = folded.rpartition(" ")
                weight = f"{number} {weight}"
            value, tol = _value(weight, unit)
            if folded:
                got = stacks.setdefault(folded, [0.0, 0.0])
                got[0] += value
                got[1] += tol
            else:
                idle += value
        elif text == "Frame {":
            frame = {}
        elif text == "},":
            if frame:
                frames.append(frame)
            frame = {}
        elif line.startswith("      ") and ": " in text:
            key, _, raw = text.partition(": ")
            if key.strip('"') in keys:
                frame[keys[key.strip('"')]] = _literal(raw)
    return {"unit": unit, "stacks": {k: [round(v[0], 6), round(v[1], 6)] for k, v in stacks.items()},
            "idle": round(idle, 6), "frames": frames}


def main(argv: list[str]) -> int:
    out: dict[str, Any] = {}
    for path in argv[1:]:
        with open(path, encoding="utf-8") as f:
            for m in _EXPORT.finditer(f.read()):
                test, _, n = m.group("test").rpartition(" ")
                if test in TESTS and n == "1":
                    file, unit = TESTS[test]
                    out[file] = {"test": test, **_profile(m.group("body"), unit)}
    missing = {f for f, _ in TESTS.values()} - set(out)
    if missing:
        raise SystemExit(f"no snapshot for {sorted(missing)}")
    json.dump(dict(sorted(out.items())), sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
