"""Benchmark: PrometheusSource against 1,000 simulated hosts x 8 GPUs.

A load generator (a separate process, 127.0.0.1 only) serves gpulens-format
``/metrics/<n>`` for every simulated host; the real Prometheus scrapes all
1,000 targets (one port, 1,000 paths, listed through file_sd) every 5 s.
Then, in this process, PrometheusSource:

* first screen: ``start()`` until the first full set of 1,000 host samples
  (name discovery, one instant query per overview field across all hosts),
  and until the host-screen details have followed;
* refresh: later ``fetch_latest()`` calls (overview fields);
* viewer work per poll with the answers already received (decode + assemble,
  GC paused while assembling as the source does, and with the GC running);
* viewer CPU % while polling at a 5 s step, steady state (this process only);

and a peer in the same run: the naive way, one query per host
(``{__name__=~"gpulens_.*", host="hNNNN"}``), same 4 workers, run 3 times in
turns with a batched refresh (median, min-max of each; ratio of the medians).
The first screen is measured 3 times (median, min-max).

Usage: .venv/bin/python benchmarks/prom_load.py [--hosts 1000] [--gpus 8] [--cpu-seconds 30]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def render_all(hosts: int, gpus: int) -> list[bytes]:
    """Exposition text for each simulated host (gpulens names, no jobs)."""
    from prometheus_client.exposition import generate_latest

    from gpulens.agent.metrics import families
    from tests.fakes.prom_fixtures import synthetic_sample

    base = synthetic_sample("h", 1, jobs=False)
    out = []
    for n in range(hosts):
        g0 = base.gpus[0]
        gl = tuple(dataclasses.replace(g0, index=i, uuid=f"GPU-{n:05d}-{i}", utilization_percent=float((n + i) % 100),
                                       processes=(), throttle_reasons=()) for i in range(gpus))
        s = dataclasses.replace(base, host=f"h{n:04d}", gpus=gl, cpu=dataclasses.replace(base.cpu, total_percent=float(n % 100)))

        class One:
            def collect(self, s=s):  # type: ignore[no-untyped-def]
                return families(s)

        out.append(generate_latest(One()))  # type: ignore[arg-type]
    return out


def serve(hosts: int, gpus: int, port_file: str) -> None:
    """Load generator process: one threading HTTP server, /metrics/<n> per host."""
    import http.server

    bodies = render_all(hosts, gpus)

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            try:
                body = bodies[int(self.path.rsplit("/", 1)[1])]
            except (ValueError, IndexError):
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: object, client_address: object) -> None:
            pass  # Prometheus closing idle keep-alive connections is not news

    httpd = Server(("127.0.0.1", 0), H)
    Path(port_file).write_text(str(httpd.server_address[1]))
    print(f"load generator: {hosts} hosts, {sum(map(len, bodies)) / 1e6:.1f} MB per full scrape", flush=True)
    httpd.serve_forever()


def naive_fetch(url: str, hosts: list[str], workers: int) -> int:
    """The peer: one query per host for all its gpulens series."""
    from gpulens.sources.prometheus.client import PromClient

    client = PromClient(url, timeout_s=30)
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda h: client.query(f'{{__name__=~"gpulens_.*",host="{h}"}}'), hosts))
    return sum(len(r) for r in results)


def probe_prometheus(url: str) -> None:
    """Prometheus' own share: wall time of single queries (the viewer barely works)."""
    from gpulens.sources.prometheus.client import PromClient

    probe = PromClient(url, timeout_s=30)
    for q in ("gpulens_gpu_utilization_ratio", "max by (host, gpu) (gpulens_gpu_utilization_ratio * 100)"):
        w, c = time.monotonic(), time.process_time()
        n = len(probe.query_pairs(q))
        print(f"  one query, {n} series ({q}): {time.monotonic() - w:.3f} s wall, "
              f"{time.process_time() - c:.3f} s viewer CPU")


def offline_cost(src: object, profile: bool = False) -> float:
    """CPU of decoding + assembling one core poll from bodies already received,
    with the other tiers' cached digests, as PrometheusSource does it."""
    from gpulens.sources.prometheus.assemble import assemble
    from gpulens.sources.prometheus.client import parse_vector
    from gpulens.sources.prometheus.source import _gc_paused

    rows = [r for r in src._current_rows() if r.tier == "core"]  # type: ignore[attr-defined]
    client = src._client  # type: ignore[attr-defined]
    digests = [entry[1] for entry in src._cache.values()]  # type: ignore[attr-defined]
    bodies = [(r, client._get("/api/v1/query", {"query": r.query("", 60)})) for r in rows]

    def one(pause: bool) -> float:
        c = time.process_time()
        answers = [(r, parse_vector(b)) for r, b in bodies]
        if pause:
            with _gc_paused():
                assemble(answers, time.time(), digests=digests)
        else:
            assemble(answers, time.time(), digests=digests)
        return time.process_time() - c

    paused = [one(True) for _ in range(3)]
    gc_on = [one(False) for _ in range(3)]
    print(f"  decode + assemble of one core poll: {statistics.median(paused):.3f} s CPU as the source runs it "
          f"(cyclic GC paused while assembling), {statistics.median(gc_on):.3f} s with the GC running throughout")
    if profile:
        import cProfile
        import pstats

        print(f"  bodies: {sum(len(b) for _, b in bodies) / 1e6:.1f} MB; first 300 bytes: {bodies[-1][1][:300]!r}")
        prof = cProfile.Profile()
        prof.enable()
        assemble([(r, parse_vector(b)) for r, b in bodies], time.time(), digests=digests)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    return statistics.median(paused)


def first_screen(url: str, hosts: int, workers: int) -> tuple[float, float, float]:
    """start() -> first full set of host samples (overview), and -> details too.

    Returns (first screen s, its viewer CPU s, details s)."""
    import threading

    from gpulens.sources.prometheus.source import PrometheusSource

    marks: list[tuple[float, float]] = []
    seen = [0]
    done = threading.Event()

    def emit(ev: object) -> None:
        if type(ev).__name__ == "SampleEvent":
            seen[0] += 1
            if seen[0] % hosts == 0:
                marks.append((time.monotonic(), time.process_time()))
                if len(marks) == 2:
                    done.set()

    src = PrometheusSource(url, step_s=5.0, backfill=False, workers=workers)
    w0, c0 = time.monotonic(), time.process_time()
    src.start(emit)
    done.wait(120)
    src.stop()
    assert len(marks) == 2, marks
    return marks[0][0] - w0, marks[0][1] - c0, marks[1][0] - w0


def measure(url: str, hosts: int, gpus: int, workers: int, cpu_seconds: float, profile: bool) -> None:
    from gpulens.sources.prometheus.source import PrometheusSource

    firsts = [first_screen(url, hosts, workers) for _ in range(3)]
    first_s, first_cpu, details_s = (statistics.median(f[i] for f in firsts) for i in range(3))
    src = PrometheusSource(url, step_s=5.0, backfill=False, workers=workers)
    first = src.fetch_latest()
    assert len(first) == hosts and all(len(s.gpus) == gpus for s in first.values()), len(first)
    refresh, refresh_cpu, queries = [], [], []
    for _ in range(5):
        w, c, q = time.monotonic(), time.process_time(), src.queries_sent
        assert len(src.fetch_latest()) == hosts
        refresh.append(time.monotonic() - w)
        refresh_cpu.append(time.process_time() - c)
        queries.append(src.queries_sent - q)
    if profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        src.fetch_latest()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    offline = offline_cost(src, profile)
    naive, naive_c, ours, ours_c = [], [], [], []
    for _ in range(3):  # the peer and a refresh in turns, so load bursts hit both
        w, c = time.monotonic(), time.process_time()
        series = naive_fetch(url, sorted(first), workers=workers)
        naive.append(time.monotonic() - w)
        naive_c.append(time.process_time() - c)
        w, c = time.monotonic(), time.process_time()
        assert len(src.fetch_latest()) == hosts
        ours.append(time.monotonic() - w)
        ours_c.append(time.process_time() - c)
    naive_s, naive_cpu = statistics.median(naive), statistics.median(naive_c)
    src.stop()

    # count events, do not keep them: the store's cost is not the source's
    counts: dict[str, int] = {}

    def emit(ev: object) -> None:
        counts[type(ev).__name__] = counts.get(type(ev).__name__, 0) + 1

    poller = PrometheusSource(url, step_s=5.0, backfill=False, workers=workers)
    poller.start(emit)
    while counts.get("SampleEvent", 0) < 2 * hosts:  # skip start-up (quick screen + details)
        time.sleep(0.05)
    c0, w0, n0 = time.process_time(), time.monotonic(), counts["SampleEvent"]
    time.sleep(cpu_seconds)
    cpu_pct = 100 * (time.process_time() - c0) / (time.monotonic() - w0)
    poller.stop()
    polls = (counts.get("SampleEvent", 0) - n0) // hosts

    med = statistics.median(refresh)
    print(f"first screen (start() -> {hosts} hosts x {gpus} GPUs, overview fields): median {first_s:.2f} s wall "
          f"({min(f[0] for f in firsts):.2f}-{max(f[0] for f in firsts):.2f}; 3 runs), {first_cpu:.2f} s viewer "
          f"CPU; host-screen details complete at {details_s:.2f} s")
    print(f"refresh: median {med:.2f} s wall (min {min(refresh):.2f}, max {max(refresh):.2f}; 5 runs), "
          f"viewer CPU median {statistics.median(refresh_cpu):.2f} s, queries per refresh {queries}")
    print(f"viewer work per core poll, bodies already received: {offline:.2f} s CPU "
          f"(= {100 * offline / 5:.1f} % of a core at a 5 s step)")
    print(f"peer, one query per host ({len(first)} queries / {series} series), 3 runs in turns with a batched "
          f"refresh: median {naive_s:.2f} s wall ({min(naive):.2f}-{max(naive):.2f}), {naive_cpu:.2f} s viewer CPU "
          f"({min(naive_c):.2f}-{max(naive_c):.2f}); the refreshes beside it: {statistics.median(ours):.2f} s wall "
          f"({min(ours):.2f}-{max(ours):.2f}), {statistics.median(ours_c):.2f} s CPU -> ratio of medians: batched "
          f"{naive_s / statistics.median(ours):.1f}x faster, "
          f"{naive_cpu / max(statistics.median(ours_c), 1e-9):.1f}x less CPU")
    print(f"viewer CPU polling at a 5 s step (steady state): {cpu_pct:.1f} % of one core over "
          f"{cpu_seconds:g} s ({polls} polls)")
    print(f"targets: first screen <= 2 s {'OK' if first_s <= 2 else 'MISSED'}, refresh <= 1 s "
          f"{'OK' if med <= 1 else 'MISSED'}, CPU < 10 % {'OK' if cpu_pct < 10 else 'MISSED'}; "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--cpu-seconds", type=float, default=30.0)
    ap.add_argument("--profile", action="store_true", help="cProfile one refresh")
    ap.add_argument("--workers", type=int, default=4, help="concurrent queries (default 4)")
    ap.add_argument("--serve", metavar="PORT_FILE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.hosts, args.gpus, args.serve)
        return 0

    from tests.fakes.prom_fixtures import start_prometheus

    tmp = Path(tempfile.mkdtemp(prefix="gpulens-prom-bench-"))
    port_file = tmp / "port"
    gen = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file), "--hosts", str(args.hosts),
                            "--gpus", str(args.gpus)])
    prom = None
    try:
        while not port_file.exists():
            if gen.poll() is not None:
                raise SystemExit("load generator died")
            time.sleep(0.1)
        port = int(port_file.read_text())
        targets = [{"targets": [f"127.0.0.1:{port}"], "labels": {"__metrics_path__": f"/metrics/{n}", "sim": str(n)}}
                   for n in range(args.hosts)]
        (tmp / "targets.json").write_text(json.dumps(targets))
        extra = f"  - job_name: sim\n    file_sd_configs:\n      - files: [{json.dumps(str(tmp / 'targets.json'))}]\n"
        prom = start_prometheus(tmp, {}, extra=extra, interval="5s")
        t0 = time.monotonic()
        prom.wait_targets_up(args.hosts, timeout_s=120)
        prom.wait_query("gpulens_gpu_utilization_ratio", args.hosts * args.gpus, timeout_s=120)
        print(f"prometheus: {args.hosts} targets up and scraped in {time.monotonic() - t0:.1f} s", flush=True)
        probe_prometheus(prom.url)
        measure(prom.url, args.hosts, args.gpus, args.workers, args.cpu_seconds, args.profile)
    finally:
        if prom is not None:
            prom.close()
        gen.terminate()
        gen.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
