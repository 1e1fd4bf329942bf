"""Name a file gpulens cannot read as a profile, and say which command makes one it can.

Each message is one line: what the bytes look like, then the command that
writes a readable profile (py-spy, perf, the PyTorch profiler...).
"""

from __future__ import annotations

import re

RECORD_HINT = ("record with `py-spy record -f raw` or `-f speedscope`, fold perf data with "
               "`perf script > out.perf`, or export folded stacks / speedscope JSON from your profiler")

_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "a gzip file that did not decompress to a profile"),
    (b"PK\x03\x04", "a zip archive (e.g. a Chrome trace bundle): unzip it and open the JSON inside"),
    (b"PERFILE2", "Linux perf.data (binary): not supported (convert it with `perf script -i perf.data > out.perf` "
                  "and open out.perf)"),
    (b"memray", "memray capture (binary): not supported (export with `memray flamegraph` or use memray's reader)"),
    (b"v8-version,", "V8 log (`node --prof`): not supported (run `node --prof-process --preprocess FILE > v8.json` "
                     "and open it in speedscope, then export speedscope JSON)"),
    (b"# callgrind format", "callgrind profile: not supported (fold it with `gprof2dot` or open it in speedscope "
                            "and export speedscope JSON)"),
    (b"\x89PNG", "a PNG image, not a profile: " + RECORD_HINT),
    (b"%PDF", "a PDF document, not a profile: " + RECORD_HINT),
    (b"\x7fELF", "an executable (ELF), not a profile: " + RECORD_HINT),
    (b"FLR\x00", "a Java Flight Recorder file: export it with `jfr print --stack-depth 64` into folded stacks"),
)


def describe(data: bytes) -> str | None:
    """One line naming what ``data`` looks like and how to make a readable profile; None if no guess."""
    head = data[:4096]
    if head.startswith(b"PK\x03\x04") and b".trace/" in head[:512]:
        return ("Instruments .trace bundle (zipped): not supported (in Instruments, select the call tree and "
                "Edit > Deep Copy, or export with `xctrace export`, then open it in speedscope)")
    for magic, what in _SIGNATURES:
        if head.startswith(magic):
            return what
    low = head.lstrip().lower()
    if b"<svg" in low or (low.startswith(b"<?xml") and b"svg" in data[:65536].lower()):
        body = data[:65536].lower()
        if b"flame" not in body and b"py-spy" not in body:
            return "an SVG image, not a profile: " + RECORD_HINT
        made_by = "py-spy" if b"py-spy" in body else "flamegraph.pl"
        return (f"an SVG flame graph image (from {made_by}), which holds no stacks to read: "
                "record with `py-spy record -f raw` or `-f speedscope` (or keep the folded input of flamegraph.pl)")
    if low.startswith((b"<!doctype html", b"<html")):
        return "an HTML page (a rendered report, not a profile): " + RECORD_HINT
    if b"Time and Allocation Profiling Report" in head[:512]:
        return "GHC .prof text report: not supported (profile with `+RTS -pj` and open the JSON in speedscope)"
    if re.match(rb"^[\w \t()]*\tSymbol Name", head):
        return "Instruments deep copy: not supported (open it in speedscope and export speedscope JSON)"
    if head.startswith(b"\x80"):
        return "a Python pickle that is not a torch memory snapshot: make one with torch.cuda.memory._dump_snapshot()"
    return None


def unreadable_line(data: bytes, source: str) -> str:
    """The one line for a file no importer took: :func:`describe`, else a generic one."""
    what = describe(data)
    if what is not None:
        return f"{source}: {what}"
    if b"\x00" in data[:65536]:
        return (f"{source}: binary data (contains NUL bytes), not a profile gpulens reads; it reads folded stacks, "
                f"speedscope, Chrome/Kineto traces, perf script output and torch memory snapshots: {RECORD_HINT}")
    sample = data[:200].decode("utf-8", "replace").split("\n", 1)[0]
    shown = re.sub(r"[^\x20-\x7e]", "?", sample)[:60]
    return (f"{source}: not a profile gpulens reads (starts {shown!r}); it reads folded stacks, speedscope, "
            f"Chrome/Kineto traces, perf script output and torch memory snapshots: {RECORD_HINT}")
