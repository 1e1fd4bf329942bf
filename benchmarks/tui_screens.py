"""Viewer CPU and RSS per screen, with btop (update_ms = 1000) measured in the same run.

CPU: every viewer runs at once in its own 160x45 tmux pane at 1 Hz, for
``--seconds``: gpulens on this machine (overview, this host's screen, and the
job screen of a light CPU workload the benchmark starts, renamed
``gl-cpu-workload``, the local viewers' job pattern matching it alone) and
``--demo`` (16 hosts x 8 GPUs: overview, host gpu-node05, job 4711), plus
``btop --utf-force``. CPU is utime + stime from /proc/PID/stat (threads
included), as % of one core, over ``--windows`` back-to-back windows (default
3 of 20 s); each figure is printed as the median with the windows' min-max,
and with its ratio to btop and to the overview of the same source (ratios
of the medians).

RSS: ``--demo`` viewers left ``--minutes`` on the overview, host and job
screens, and a viewer of this machine on the profiler screen: the demo
never binds the Kineto endpoint, so the tests' PyTorch CPU workload
(tests/fakes/kineto_workload.py, KINETO_USE_DAEMON=1, its own
KINETO_IPC_SOCKET_DIR) runs beside a local-source viewer with the same
socket directory, whose in-process endpoint it polls; the viewer opens the
workload's job screen (``:job PID``, the job pattern matching only the
workload, renamed ``gl-rss-workload``), presses ``o`` and takes one 500 ms
trace (``--no-trace``: none), so the screen holds a trace. RSS is read
every 10 s; printed: start, max, end and the growth over the last half.
The issue's targets: <= 5 MB growth over the last 15 of 30 minutes,
<= 150 MB.

Targets (issue 13): overview <= 1.0 % (this machine), <= 1.5 % (demo);
host and job screens within 1.3x of the overview.

Usage: .venv/bin/python benchmarks/tui_screens.py [--seconds 60] [--windows 3] [--minutes 2] [--no-rss | --rss-only] [--no-trace]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
SIZE = ("160", "45")


def cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    """Resident set size of ``pid`` in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Tmux:
    """One private tmux server; a session per viewer."""

    def __init__(self, part: str) -> None:
        self.sock = f"gpulens-screens-{os.getpid()}-{part}"

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True,
                              check=True).stdout

    def start(self, name: str, command: str) -> int:
        self("new-session", "-d", "-s", name, "-x", SIZE[0], "-y", SIZE[1], command)
        return int(self("display", "-p", "-t", f"{name}:0.0", "#{pane_pid}").strip())

    def keys(self, name: str, *keys: str) -> None:
        self("send-keys", "-t", f"{name}:0.0", *keys)

    def screen(self, name: str) -> str:
        return self("capture-pane", "-p", "-t", f"{name}:0.0")

    def stop(self) -> None:
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True)


def shows(tmux: Tmux, name: str, jump: str) -> bool:
    """The pane's breadcrumbs end in the jump's target (``› gpu-node05``, ``› job 4711``)."""
    first = (tmux.screen(name).splitlines() or [""])[0]
    target = jump.removeprefix("host ")
    if f"› {target}" in first:
        return True
    # A job without a job key is named host:pid (``› job vm:20859`` for ``job 20859``).
    shown = first.split("› job ", 1)[1].split() if target.startswith("job ") and "› job " in first else []
    return bool(shown) and shown[0].endswith(f":{target.removeprefix('job ')}")


def reach(tmux: Tmux, name: str, jump: str | None) -> None:
    """Open the screen with ``:jump`` (tried three times: a busy viewer may still be starting)."""
    for _ in range(3 if jump else 0):
        tmux.keys(name, ":")
        time.sleep(0.5)
        tmux.keys(name, jump or "", "Enter")
        time.sleep(2)
        if shows(tmux, name, jump or ""):
            return
        tmux.keys(name, "Escape")
    if jump:
        print(f"warning: {name} does not show {jump!r}")


JOB_COMM = "gl-cpu-workload"
"""The local job's ``comm``: the local viewers' job pattern matches it and nothing else here."""
_JOB = (f"import time; open('/proc/self/comm', 'w').write({JOB_COMM!r}); print('READY', flush=True)\n"
        "while True:\n    sum(range(20000)); time.sleep(0.05)")


def local_job() -> subprocess.Popen[str]:
    """A light CPU workload (a few % of a core) for this machine's job screen; ready when it returns."""
    proc = subprocess.Popen([sys.executable, "-c", _JOB], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.readline()
    return proc


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60, help="CPU measurement, in all")
    parser.add_argument("--windows", type=int, default=3, help="windows the seconds are cut into (default 3)")
    parser.add_argument("--minutes", type=float, default=2, help="RSS run length (the issue's: 30)")
    parser.add_argument("--no-rss", action="store_true")
    parser.add_argument("--rss-only", action="store_true", help="skip the CPU part")
    parser.add_argument("--no-trace", action="store_true", help="open the profiler screen, take no trace")
    parser.add_argument("--gpulens", type=Path, default=Path(sys.executable).parent / "gpulens",
                        help="the gpulens command to measure (default: this venv's)")
    args = parser.parse_args()
    if shutil.which("tmux") is None or shutil.which("btop") is None:
        print("needs tmux and btop")
        return 1
    gpulens = args.gpulens
    conf = Path(tempfile.mkdtemp())
    (conf / "btop").mkdir()
    (conf / "btop" / "btop.conf").write_text("update_ms = 1000\n")
    (conf / "gpulens").mkdir()
    env = f"XDG_CONFIG_HOME={conf} TERM=xterm-256color"
    if args.rss_only:
        rss(gpulens, env, args.minutes, not args.no_trace)
        return 0
    here = socket.gethostname()
    job = local_job()
    local = f"--interval 1 --pattern '/{JOB_COMM}$'"
    viewers: dict[str, tuple[str, str | None]] = {
        "local-overview": (local, None),
        "local-host": (local, f"host {here}"),
        "local-job": (local, f"job {job.pid}"),
        "demo-overview": ("--demo --interval 1", None),
        "demo-host": ("--demo --interval 1", "host gpu-node05"),
        "demo-job": ("--demo --interval 1", "job 4711"),
    }
    tmux = Tmux("cpu")
    try:
        pids = {n: tmux.start(n, f"{env} exec {gpulens} {flags}") for n, (flags, _) in viewers.items()}
        pids["btop"] = tmux.start("btop", f"{env} exec btop --utf-force")
        time.sleep(10)  # start-up and the demo's backfill are not the steady state
        for n, (_, jump) in viewers.items():
            reach(tmux, n, jump)
        time.sleep(5)
        per: dict[str, list[float]] = {n: [] for n in pids}
        wall = 0.0
        for _ in range(args.windows):  # back-to-back windows of the same run
            start = {n: cpu_s(p) for n, p in pids.items()}
            t0 = time.monotonic()
            time.sleep(args.seconds / args.windows)
            dt = time.monotonic() - t0
            wall += dt
            for n, p in pids.items():
                per[n].append((cpu_s(p) - start[n]) / dt * 100)
    finally:
        tmux.stop()
        job.kill()
        job.wait()
    used = {n: statistics.median(v) for n, v in per.items()}
    btop = max(used["btop"], 0.01)
    print(f"CPU at 1 Hz, 160x45 tmux, all at once, {args.windows} windows of {wall / args.windows:.0f} s "
          "(% of one core; median, then min-max of the windows; ratios of the medians):")
    print(f"  btop --utf-force (update_ms = 1000): {used['btop']:.2f} % ({min(per['btop']):.2f}-{max(per['btop']):.2f})")
    for n in viewers:
        base = used["local-overview" if n.startswith("local") else "demo-overview"]
        print(f"  gpulens {n:15s}: {used[n]:.2f} % ({min(per[n]):.2f}-{max(per[n]):.2f})   x{used[n] / btop:.1f} btop"
              f"   x{used[n] / max(base, 0.01):.2f} its overview")
    sys.stdout.flush()
    if not args.no_rss:
        rss(gpulens, env, args.minutes, not args.no_trace)
    return 0


WORKLOAD = Path(__file__).resolve().parent.parent / "tests" / "fakes" / "kineto_workload.py"
WORKLOAD_COMM = "gl-rss-workload"
"""The workload's ``comm``: the profiler viewer's job pattern matches it and nothing else here."""
_RENAMED = (f"import runpy, sys; open('/proc/self/comm', 'w').write({WORKLOAD_COMM!r}); "
            "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


class Workload:
    """The tests' PyTorch CPU training loop polling ``DIR/s`` every second (as benchmarks/trace_latency.py)."""

    def __init__(self, seconds: float) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="gkr", dir="/tmp"))
        self.sock = self.dir / "s"
        self.sock.mkdir()
        cfg = self.dir / "kineto.conf"
        cfg.write_text("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KINETO", "TORCHELASTIC"))}
        env.update(KINETO_USE_DAEMON="1", KINETO_IPC_SOCKET_DIR=str(self.sock), KINETO_CONFIG=str(cfg))
        self.proc = subprocess.Popen([sys.executable, "-c", _RENAMED, str(WORKLOAD), "--seconds", str(seconds)],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "READY":
            self.close()
            raise RuntimeError("the Kineto workload did not start (is torch installed?)")

    @property
    def viewer_env(self) -> str:
        """What the profiler viewer's command line starts with: the workload's socket directory."""
        return f"KINETO_IPC_SOCKET_DIR={self.sock} GPULENS_NO_PRUNE=1"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


TRACE_FILES: list[Path] = []
"""Traces the profiler viewer took (removed at the end)."""


def alive(tmux: Tmux, name: str) -> bool:
    """The viewer still answers keys: ``?`` opens its help (closed again with escape)."""
    before = tmux.screen(name)
    tmux.keys(name, "?")
    time.sleep(2)
    changed = tmux.screen(name) != before
    tmux.keys(name, "Escape")
    time.sleep(1)
    return changed


def open_profiler(tmux: Tmux, name: str, pid: int, trace: bool) -> str:
    """``:job PID``, then ``o``, then (``trace``) ``t``; what the screen shows, in words."""
    for _ in range(5):  # the viewer's endpoint must first see the workload poll (about a second)
        tmux.keys(name, ":")
        time.sleep(0.5)
        tmux.keys(name, f"job {pid}", "Enter")
        time.sleep(2)
        tmux.keys(name, "o")
        time.sleep(2)
        if f"pid {pid}: ready" in tmux.screen(name):
            break
        tmux.keys(name, "Escape")
        time.sleep(1)
    else:
        return f"warning: the profiler screen for pid {pid} did not open"
    if not trace:
        return "profiler screen open, no trace taken"
    tmux.keys(name, "t")
    rows: list[str] = []
    for _ in range(30):
        time.sleep(1)
        rows = trace_rows(tmux.screen(name))
        if any(word in row for row in rows for word in ("done", "failed")):
            break
    if not alive(tmux, name):
        return "warning: the viewer stopped answering keys after the trace request: RSS meaningless"
    for word in " ".join(rows).split():  # the trace file goes when the run ends
        if word.startswith("/") and "/trace_" in word and word.endswith((".json", ".json.gz")):
            TRACE_FILES.append(Path(word))
    return "one trace: " + (" ".join(rows[0].split())[:110] if rows else "warning: no trace row shown")


def trace_rows(screen: str) -> list[str]:
    """The profiler's trace table rows (below its ``state  detail`` header)."""
    lines = screen.splitlines()
    at = next((i for i, ln in enumerate(lines) if ln.split()[:2] == ["state", "detail"]), None)
    return [] if at is None else [ln for ln in lines[at + 1 :] if ln.strip() and "esc Back" not in ln]


def rss(gpulens: Path, env: str, minutes: float, trace: bool = True) -> None:
    """RSS of demo viewers left ``minutes`` on each screen, and of a local viewer on the profiler."""
    tmux = Tmux("rss")
    screens = {"overview": None, "host": "host gpu-node05", "job": "job 4711"}
    series: dict[str, list[tuple[float, float]]] = {n: [] for n in [*screens, "profiler"]}
    workload: Workload | None = None
    said = ""
    try:
        pids = {n: tmux.start(n, f"{env} exec {gpulens} --demo --interval 1") for n in screens}
        try:
            workload = Workload(minutes * 60 + 300)
        except (RuntimeError, OSError) as err:
            said = f"skipped ({err})"
        else:
            pids["profiler"] = tmux.start("profiler", f"{env} {workload.viewer_env} exec {gpulens} --interval 1 "
                                                      f"--pattern '/{WORKLOAD_COMM}$'")
        time.sleep(10)
        for n, jump in screens.items():
            reach(tmux, n, jump)
        if workload is not None:
            said = open_profiler(tmux, "profiler", workload.proc.pid, trace)
        t0 = time.monotonic()
        while (now := time.monotonic() - t0) < minutes * 60:
            for n, p in pids.items():
                series[n].append((now, rss_mb(p)))
            time.sleep(10)
        if workload is not None and "› Profiler" not in "".join(tmux.screen("profiler").splitlines()[:1]):
            said += "; warning: the profiler viewer left its screen"
    finally:
        tmux.stop()
        if workload is not None:
            workload.close()
        for taken in TRACE_FILES:
            taken.unlink(missing_ok=True)
    print(f"RSS of viewers over {minutes:g} min (MB): start, max, end, growth over the last half "
          "(--demo: overview, host, job; this machine: profiler)")
    for n, pts in series.items():
        if not pts:
            print(f"  {n:9s}: {said}")
            continue
        half = [v for t, v in pts if t >= pts[-1][0] / 2]
        print(f"  {n:9s}: {pts[0][1]:.1f}  {max(v for _, v in pts):.1f}  {pts[-1][1]:.1f}  "
              f"{half[-1] - half[0]:+.1f}")
    if said and series["profiler"]:
        print(f"  profiler : {said}")


if __name__ == "__main__":
    sys.exit(main())
