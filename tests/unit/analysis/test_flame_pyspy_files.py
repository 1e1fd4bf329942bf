"""Every file py-spy 0.4 writes, made here by the real py-spy, opens as the flame graph it records.

py-spy runs the workload as its child (``py-spy record -- python -c ...``);
where it cannot attach (no ptrace) the tests skip and say so.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpulens.analysis.flame.errors import FlameFormatError
from gpulens.analysis.flame.group import ALL
from gpulens.analysis.flame.importers import load_group, load_profile
from gpulens.analysis.flame.query import function_table
from gpulens.cli import main

PYSPY = Path(sys.executable).with_name("py-spy")

# Two busy threads with known functions, and one that only sleeps (py-spy drops its samples).
WORKLOAD = """
import threading, time
def spin_main(n):
    t = time.time()
    while time.time() - t < n:
        sum(i * i for i in range(500))
def spin_worker(n):
    t = time.time()
    while time.time() - t < n:
        sum(i * i for i in range(500))
threading.Thread(target=time.sleep, args=(1.6,), name="sleeper").start()
w = threading.Thread(target=spin_worker, args=(1.5,), name="worker")
w.start()
spin_main(1.5)
w.join()
"""


def record(tmp_path: Path, fmt: str, extra: tuple[str, ...] = ()) -> tuple[Path, str]:
    """Run the real py-spy on WORKLOAD; the file and py-spy's own message (it states the sample count)."""
    if not PYSPY.exists():
        pytest.skip(f"py-spy is not installed next to {sys.executable}")
    out = tmp_path / f"profile.{fmt}"
    proc = subprocess.run([str(PYSPY), "record", "-r", "200", "-d", "1", "-f", fmt, *extra, "-o", str(out),
                           "--", sys.executable, "-c", WORKLOAD], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0 or not out.exists():
        reason = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        pytest.skip(f"py-spy could not record here (exit {proc.returncode}): {reason}")
    return out, proc.stdout + proc.stderr


def pyspy_samples(message: str) -> int:
    m = re.search(r"Samples: (\d+)", message)
    assert m, message
    return int(m.group(1))


def test_raw_file_and_an_empty_stack_line(tmp_path: Path) -> None:
    path, message = record(tmp_path, "raw")
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    counts = [int(ln.rpartition(" ")[2]) for ln in lines]
    profile = load_profile(str(path))
    assert profile.total == sum(counts) == pyspy_samples(message)
    # py-spy itself sometimes writes " N" (a sample with no Python frame): kept at the root.
    empty = sum(int(ln.split()[-1]) for ln in lines if not ln.rpartition(" ")[0].strip())
    assert profile.node_self[0] == empty
    assert {"spin_main", "spin_worker"} <= {r.name for r in function_table(profile)}
    # A sample with no Python frame: py-spy writes " 1"; flamegraph.pl counts it at the root.
    path.write_text(path.read_text() + " 3\n")
    with_empty = load_profile(str(path))
    assert with_empty.total == sum(counts) + 3
    assert with_empty.node_self[0] == empty + 3


def test_speedscope_file_one_profile_per_thread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, message = record(tmp_path, "speedscope")
    doc = json.loads(path.read_text())
    assert doc["activeProfileIndex"] is None  # what py-spy writes; speedscope shows the first profile
    group = load_group(str(path))
    assert len(group) == len(doc["profiles"]) >= 2
    frames = doc["shared"]["frames"]
    for i, prof in enumerate(doc["profiles"]):
        assert group.pick(i).total == pytest.approx(sum(prof["weights"]))
        assert prof["name"] in group.names[i]
    # The worker thread's profile: py-spy names it after the thread when it could read the name, which it
    # sometimes cannot on a loaded machine (a full CI run); its samples say which one it is either way.
    leaves = [{frames[s[-1]]["name"] for s in p["samples"] if s} for p in doc["profiles"]]
    worker = next(i for i, found in enumerate(leaves) if "spin_worker" in found)
    assert "spin_main" not in leaves[worker]  # one thread's samples, not merged with the main thread's
    assert "spin_worker" in {r.name for r in function_table(group.pick(worker))}
    everything = group.pick(ALL)
    assert everything.total == pytest.approx(sum(sum(p["weights"]) for p in doc["profiles"]))
    # Each thread under a frame named after it, as py-spy --threads does.
    assert {everything.label(c) for c in everything.children(0)} == set(group.names)
    # CLI: --profile N|all
    assert main(["flame", str(path), "--profile", "all", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total"] == pytest.approx(everything.total) and out["profiles"] == list(group.names)
    assert main(["flame", str(path), "--profile", str(worker), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == pytest.approx(sum(doc["profiles"][worker]["weights"]))
    assert main(["flame", str(path), "--profile", "9", "--json"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert pyspy_samples(message) > 0


def _busy_time_by_thread(events: list[dict[str, object]]) -> dict[object, float]:
    """Independent: per thread, µs during which at least one B is open (depth counting in time order)."""
    by_tid: dict[object, list[dict[str, object]]] = {}
    for ev in events:
        if ev.get("ph") in ("B", "E"):
            by_tid.setdefault(ev["tid"], []).append(ev)
    busy: dict[object, float] = {}
    for tid, evs in by_tid.items():
        evs.sort(key=lambda e: float(e["ts"]))  # type: ignore[arg-type]
        depth, last, total = 0, 0.0, 0.0
        for ev in evs:
            ts = float(ev["ts"])  # type: ignore[arg-type]
            if depth > 0:
                total += ts - last
            depth += 1 if ev["ph"] == "B" else -1
            last = ts
        busy[tid] = total
    return busy


def test_chrometrace_file_is_a_flame_graph_of_its_samples(tmp_path: Path) -> None:
    path, _ = record(tmp_path, "chrometrace")
    events = json.loads(path.read_text())
    group = load_group(str(path))
    busy = _busy_time_by_thread(events)
    assert len(group) == len(busy)
    assert sorted(group.pick(i).total for i in range(len(group))) == pytest.approx(
        sorted(us * 1e-6 for us in busy.values()))
    names = {r.name for i in range(len(group)) for r in function_table(group.pick(i))}
    assert {"spin_main", "spin_worker"} <= names
    assert group.pick(0).unit == "seconds" and "wall time" in group.pick(0).title


def test_svg_from_pyspy_is_named_with_the_command_to_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = record(tmp_path, "flamegraph")
    with pytest.raises(FlameFormatError) as err:
        load_profile(str(path))
    text = str(err.value)
    assert "SVG flame graph" in text and "py-spy record -f raw" in text and "\n" not in text
    assert main(["flame", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "SVG flame graph" in lines[0]
