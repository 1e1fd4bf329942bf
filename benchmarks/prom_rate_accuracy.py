"""What Prometheus shows for a bursty 9.0 MB/s network stream over 60 s, scraped every 15 s.

Issue 12's example. One fake sampler (one sample a second, a seeded bursty
receive rate) feeds two exporters in the same run, scraped by the real
Prometheus (Debian ``prometheus``) at 15 s:

* the earlier exporter's way (the peer): a gauge of the last second's rate,
  ``gpulens_network_receive_bytes_per_second``, read over the window with
  ``avg_over_time(...[60s])`` (and as the instant value a viewer showed);
* gpulens' /metrics now (``agent.metrics.serve_metrics`` with the history):
  the counter ``gpulens_network_receive_bytes_total``, read with ``rate(...[60s])``,
  also through ``PrometheusSource`` as the viewer does.

The truth is computed here from the sampler's own per-second rates over the
same 60 s. ``--repeat`` windows (default 3, ending ``--every`` 7 s apart, so
each sees another scrape phase) are measured; prints each figure's median
(min-max) and its ratio to each window's truth, median (min-max).

    .venv/bin/python benchmarks/prom_rate_accuracy.py [--seconds 80] [--seed 12] [--repeat 3]
"""

from __future__ import annotations

import argparse
import bisect
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MB = 1e6


class BurstySampler:
    """One sample a second; the receive rate of second i is rates[i] (mean 9.0 MB/s)."""

    def __init__(self, seed: int, pattern: str) -> None:
        rnd = random.Random(seed)
        if pattern == "periodic":
            # a training step every 5 s: its all-reduce and data loading, 9.0 MB/s over every 5 s
            raw = [12.0, 6.0, 9.0, 3.0, 15.0] * 120
        else:
            # bursts of 25-40 MB/s between quiet seconds, 9.0 MB/s over the 600 s
            raw = [rnd.choice((0.0, 0.0, 0.0, 1.0, 2.0)) * rnd.uniform(25, 40) for _ in range(600)]
        scale = 9.0 * len(raw) / sum(raw)
        self.rates = [r * scale * MB for r in raw]
        self.t0 = float(int(time.time()))
        self.times: list[float] = [self.t0]
        self.cum: list[float] = [0.0]
        self.samples: list[object] = []
        self.lock = threading.Lock()

    def bytes_at(self, t: float) -> float:
        """Bytes received by time t: the integral of the per-second rates (exact)."""
        i = int(t - self.t0)
        return sum(self.rates[:i]) + (t - self.t0 - i) * self.rates[i]

    def tick(self) -> None:
        import dataclasses

        from gpulens.core.model import NetInterface
        from tests.fakes.prom_fixtures import synthetic_sample

        i = len(self.times) - 1
        t = self.t0 + i + 1
        rate = self.rates[i]
        total = self.cum[-1] + rate
        base = synthetic_sample("bench", 1, jobs=False, t=t)
        nic = NetInterface("eth0", rate, 0.0, rx_bytes=round(total), tx_bytes=0)
        s = dataclasses.replace(base, network=dataclasses.replace(base.network, rx_bytes_per_s=rate, interfaces=(nic,)))
        with self.lock:
            self.times.append(t)
            self.cum.append(total)
            self.samples.append(s)

    def latest(self) -> object:
        with self.lock:
            return self.samples[-1] if self.samples else None

    def history(self, since: float | None) -> list[bytes]:
        from gpulens.ipc.serialize import sample_to_dict
        from gpulens.ipc.stream_frames import pack_sample

        with self.lock:
            times = self.times[1:]
            start = 0 if since is None else bisect.bisect_right(times, since)
            return [pack_sample(sample_to_dict(s)) for s in self.samples[start:]]  # type: ignore[arg-type]


def old_exporter(sampler: BurstySampler) -> Iterator[object]:
    """The earlier exporter's network gauge: the newest sample's last-second rate."""
    from prometheus_client.core import GaugeMetricFamily

    class Old:
        def collect(self) -> Iterator[object]:
            s = sampler.latest()
            fam = GaugeMetricFamily("gpulens_network_receive_bytes_per_second", "Received, all interfaces but lo.",
                                    labels=["host"])
            if s is not None:
                fam.add_metric(["bench"], s.network.rx_bytes_per_s)  # type: ignore[attr-defined]
            yield fam

    return Old()  # type: ignore[return-value]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=80.0, help="run time (>= 75: the 60 s window covered at 15 s)")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=3, help="windows measured (default 3)")
    ap.add_argument("--every", type=float, default=7.0, help="seconds between the windows' ends (default 7)")
    ap.add_argument("--pattern", choices=("periodic", "random"), default="periodic",
                    help="periodic: 9.0 MB/s over every 5 s, bursty within; random: seeded bursts")
    args = ap.parse_args()

    from prometheus_client import start_http_server
    from prometheus_client.core import CollectorRegistry

    from gpulens.agent.metrics import serve_metrics
    from gpulens.sources.prometheus.source import PrometheusSource
    from tests.fakes.prom_fixtures import free_port, prometheus_binary, start_prometheus

    if prometheus_binary() is None:
        print("prometheus not installed (Debian package 'prometheus')", file=sys.stderr)
        return 2
    sampler = BurstySampler(args.seed, args.pattern)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            while sampler.t0 + len(sampler.times) <= time.time():
                sampler.tick()
            stop.wait(0.05)

    threading.Thread(target=loop, daemon=True).start()
    new = serve_metrics(0, "bench", sampler.latest, history=sampler.history)  # type: ignore[arg-type]
    reg = CollectorRegistry(auto_describe=False)
    reg.register(old_exporter(sampler))  # type: ignore[arg-type]
    old_port = free_port()
    old_server, _ = start_http_server(old_port, addr="127.0.0.1", registry=reg)
    tmp = Path(tempfile.mkdtemp(prefix="gpulens-bench-"))
    prom = start_prometheus(tmp, {"new": [f"127.0.0.1:{new.port}"], "old": [f"127.0.0.1:{old_port}"]}, interval="15s")
    rows: list[dict[str, float]] = []
    try:
        time.sleep(args.seconds)
        for k in range(args.repeat):
            if k:
                time.sleep(args.every)  # another window position and scrape phase
            src = PrometheusSource(prom.url, step_s=15, rate_window_s=60, backfill=False)
            try:
                viewer = src.fetch_latest()["bench"].network.rx_bytes_per_s
            finally:
                src.stop()
            at = time.time()

            def q(expr: str, at: float = at) -> float:
                res = prom.api("/api/v1/query", query=expr, time=f"{at:.3f}")["data"]["result"]
                return float(res[0]["value"][1])

            raw = prom.api("/api/v1/query", query="gpulens_network_receive_bytes_total[60s]",
                           time=f"{at:.3f}")["data"]["result"][0]["values"]
            t1, t2 = float(raw[0][0]), float(raw[-1][0])
            rows.append({
                "truth": (sampler.bytes_at(at) - sampler.bytes_at(at - 60)) / 60,
                "span": (sampler.bytes_at(t2) - sampler.bytes_at(t1)) / (t2 - t1),
                "old_avg": q("avg_over_time(gpulens_network_receive_bytes_per_second[60s])"),
                "old_now": q("gpulens_network_receive_bytes_per_second"),
                "new_rate": q("sum(rate(gpulens_network_receive_bytes_total[60s]))"),
                "viewer": viewer,
            })
    finally:
        stop.set()
        prom.close()
        new.close()
        old_server.shutdown()

    def line(label: str, key: str, ratio: bool = True) -> str:
        vals = [r[key] / MB for r in rows]
        text = f"  {label:44s} {statistics.median(vals):6.2f} ({min(vals):.2f}-{max(vals):.2f})"
        if ratio:
            rs = [r[key] / r["truth"] for r in rows]
            text += f"   ratio {statistics.median(rs):.3f} ({min(rs):.3f}-{max(rs):.3f})"
        return text

    print(f"60 s window, 15 s scrape, {args.pattern} bursty stream (MB/s); median (min-max) of {len(rows)} "
          f"windows {args.every:g} s apart, the ratio to each window's truth")
    print(line("truth over the 60 s (the sampler's rates)", "truth", ratio=False))
    print(line("truth between the window's first and last scrape", "span", ratio=False))
    print(line("earlier: avg_over_time(gauge[60s])", "old_avg"))
    print(line("earlier: the gauge's instant value", "old_now"))
    print(line("now: rate(gpulens_..._bytes_total[60s])", "new_rate"))
    print(line("now: PrometheusSource (the viewer)", "viewer"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
