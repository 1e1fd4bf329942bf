"""`gpulens analyze` on the command line: JSON documents as docs/analyze-json.md says, exit codes as --help says."""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpulens.cli import build_parser, main
from gpulens.core.errors import ConfigProblem
from tests.fakes.cli_helpers import refusal
from tests.paths import DATA, ROOT

TRACES = DATA / "traces"
RANKS = [str(TRACES / "sampled_rank-0.json.gz"), str(TRACES / "sampled_rank-1.json.gz")]
DOC = ROOT / "docs" / "analyze-json.md"
STRICT = {"ranks", "rank", "split", "spread", "straggler", "straggler_rule", "rule_metric", "diff", "delta"}


def _documented() -> dict[str, list[str]]:
    """``### `object` `` headings of the doc and the keys of the table under each."""
    out: dict[str, list[str]] = {}
    current = None
    for line in DOC.read_text().splitlines():
        m = re.match(r"^### `(\w+)`", line)
        if m:
            current = m.group(1)
            out[current] = []
            continue
        m = re.match(r"^\| `(\w+)` \|", line)
        if m and current is not None:
            out[current].append(m.group(1))
    return out


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["analyze", *argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _check(obj: dict[str, Any], name: str, doc: dict[str, list[str]]) -> None:
    keys = doc[name]
    assert keys, name
    missing = [k for k in keys if k not in obj]
    assert not missing, f"{name}: documented but not emitted: {missing}"
    if name in STRICT:
        extra = [k for k in obj if k not in keys]
        assert not extra, f"{name}: emitted but not documented: {extra}"


def test_trace_document(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _documented()
    rc, out, _ = _run(capsys, str(TRACES / "nccl_data.json.gz"), "--json", "--top", "3")
    assert rc == 0
    d = json.loads(out)
    assert (d["schema_version"], d["kind"]) == (1, "trace")
    _check(d, "trace", doc)
    for p in d["processes"]:
        _check(p, "process", doc)


def test_ranks_document(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _documented()
    rc, out, _ = _run(capsys, *RANKS, "--json", "--jobs", "1")
    assert rc == 0
    d = json.loads(out)
    assert (d["schema_version"], d["kind"]) == (1, "ranks")
    _check(d, "ranks", doc)
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    for r in d["ranks"]:
        _check(r, "rank", doc)
        _check(r["split"], "split", doc)
        _check(r["per_step"], "split", doc)
    _check(d["spread"], "spread", doc)
    # HTA's two sampled ranks have 2 steps each: too few to measure the noise, and no rank is 50 % off
    assert d["stragglers"] == [] and d["straggler_rule"]["noise_measured"] is False
    assert "noise not measured" in d["straggler_rule"]["note"]
    rc, out, _ = _run(capsys, str(TRACES / "ddp_gloo"), "--json", "--jobs", "1")
    assert rc == 0
    d = json.loads(out)
    _check(d["straggler_rule"], "straggler_rule", doc)
    assert [m["metric"] for m in d["straggler_rule"]["metrics"]] == ["compute", "wait", "data", "idle", "other"]
    for m in d["straggler_rule"]["metrics"]:
        _check(m, "rule_metric", doc)
    assert [s["rank"] for s in d["stragglers"]] == [1]
    for s in d["stragglers"]:
        _check(s, "straggler", doc)


def test_diff_document(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _documented()
    rc, out, _ = _run(capsys, "--diff", *RANKS, "--json")
    assert rc == 0
    d = json.loads(out)
    assert (d["schema_version"], d["kind"]) == (1, "diff")
    _check(d, "diff", doc)
    _check(d["a"], "rank", doc)
    _check(d["b"], "rank", doc)
    for row in d["ops"][:20] + d["kernels"][:20]:
        _check(row, "delta", doc)


def test_text_reports(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, str(TRACES / "ddp_gloo"))
    assert rc == 0
    assert "2 ranks" in out and "Optimizer.step boundaries" in out and "rank 1 by compute" in out
    rc, out, _ = _run(capsys, "--diff", *RANKS, "--top", "3")
    assert rc == 0 and "step time: +" in out


def test_help_states_the_exit_codes() -> None:
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    text = subparsers.choices["analyze"].format_help()
    assert "Exit status: 0 success; 2 a file that cannot be read or has nothing to analyse" in " ".join(text.split())


def test_py_spy_chrometrace_is_named_not_summarised(capsys: pytest.CaptureFixture[str]) -> None:
    """A trace written by ``py-spy record --format chrometrace`` (py-spy 0.4.3): exit 2, one line saying so."""
    rc, out, err = _run(capsys, str(TRACES / "pyspy-chrometrace.json"))
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "looks like a py-spy chrometrace" in lines[0] and "gpulens flame" in lines[0]


def test_py_spy_rank_in_a_directory_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    shutil.copy(RANKS[0], tmp_path / "rank-0.json.gz")
    shutil.copy(TRACES / "pyspy-chrometrace.json", tmp_path / "rank-1.json")
    rc, _, err = _run(capsys, str(tmp_path), "--jobs", "1")
    assert rc == 2 and "rank-1.json: looks like a py-spy chrometrace" in err


def test_a_missing_trace_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "/nonexistent/trace.json")
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "no such file or directory" in err


@pytest.mark.parametrize(
    ("argv", "where", "problem"),
    [
        (["--diff", RANKS[0]], "--diff", ConfigProblem.OUT_OF_RANGE),
        (["--diff", *RANKS, RANKS[0]], "--diff", ConfigProblem.OUT_OF_RANGE),
        (["--diff", str(TRACES), RANKS[0]], "--diff", ConfigProblem.NOT_REGULAR),
        (["--diff", RANKS[0], str(TRACES)], "--diff", ConfigProblem.NOT_REGULAR),
        ([*RANKS, "--jobs", "0"], "--jobs", ConfigProblem.OUT_OF_RANGE),
        ([RANKS[0], RANKS[0].replace("-0", "-1"), "--straggler-pct", "nan"], "--straggler-pct", ConfigProblem.OUT_OF_RANGE),
        ([*RANKS, "--straggler-pct=-1"], "--straggler-pct", ConfigProblem.OUT_OF_RANGE),
    ],
    ids=["diff-one", "diff-three", "diff-dir-a", "diff-dir-b", "jobs", "straggler-nan", "straggler-negative"],
)
def test_bad_arguments_exit_2_with_the_flag_and_the_reason(argv: list[str], where: str,
                                                          problem: ConfigProblem) -> None:
    err = refusal("analyze", *argv)  # exit 2, one line, nothing on stdout
    assert (err.where, err.problem) == (where, problem)


def test_diff_says_what_it_takes() -> None:
    """The one sentence of analyze's flag checks pinned on purpose: it tells which file is the baseline."""
    assert str(refusal("analyze", "--diff", RANKS[0])) == "--diff takes exactly two trace files: A (the baseline) and B"


def test_empty_directory_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, _, err = _run(capsys, str(tmp_path))
    assert rc == 2 and "no trace files" in err


def test_limits_hold_in_worker_processes() -> None:
    """A file over --max-events read by a worker process (a fresh, single-threaded CLI): one line, exit 2."""
    proc = subprocess.run([sys.executable, "-m", "gpulens", "analyze", *RANKS, "--jobs", "2", "--max-events", "1000"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "sampled_rank-0.json.gz" in lines[0] and "1000" in lines[0]


def test_hostile_file_names_and_event_names_reach_the_terminal_clean(capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path) -> None:
    evil = "\x1b]0;owned\x07\x1b[31m"
    with gzip.open(RANKS[0]) as f:
        doc = json.load(f)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = evil + e["name"]
    with gzip.open(tmp_path / f"rank-0{evil}.json.gz", "wt") as f:
        json.dump(doc, f)
    shutil.copy(RANKS[1], tmp_path / "rank-1.json.gz")
    rc, out, _ = _run(capsys, str(tmp_path), "--jobs", "1")
    bad = [line for line in out.splitlines() if "\x1b" in line or "\x07" in line]
    assert rc == 0 and not bad, bad
    rc, out, _ = _run(capsys, "--diff", str(tmp_path / f"rank-0{evil}.json.gz"), RANKS[1])
    assert rc == 0 and "\x1b" not in out and "\x07" not in out
    shutil.copy(RANKS[0], tmp_path / f"x{evil}.json.gz")
    rc, _, err = _run(capsys, str(tmp_path), "--jobs", "1")
    assert rc == 2 and "both rank 0" in err and "\x1b" not in err


def test_directory_of_one_trace_is_the_single_summary(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    shutil.copy(RANKS[0], tmp_path / "only.json.gz")
    rc, out, _ = _run(capsys, str(tmp_path), "--json", "--top", "2")
    assert rc == 0 and json.loads(out)["kind"] == "trace"


def test_fifos_and_device_links_in_a_directory_are_skipped_not_read(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "rank-7.json")  # opening it would block forever
    os.symlink("/dev/zero", tmp_path / "rank-8.json")
    for r in (0, 1):
        shutil.copy(RANKS[r], tmp_path / f"rank-{r}.json.gz")
    rc, out, _ = _run(capsys, str(tmp_path), "--json", "--jobs", "1")
    assert rc == 0 and [r["rank"] for r in json.loads(out)["ranks"]] == [0, 1]
