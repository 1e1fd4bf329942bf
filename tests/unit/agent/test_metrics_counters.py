"""/metrics as Prometheus wants it: counters that never go back and add up to the
true amount whatever the scrape interval, promtool's lint, the default port.

A fake sampler produces one sample per second with known, changing rates;
the "truth" is computed here from those rates, independently of the exporter.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import shutil
import subprocess
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpulens.agent.metrics import DEFAULT_METRICS_PORT, serve_metrics
from gpulens.core.model import (
    CpuSample,
    GpuSample,
    HostSample,
    JobInfo,
    MemorySample,
    NetworkSample,
    StorageSample,
)
from gpulens.ipc.serialize import sample_to_dict
from gpulens.ipc.stream_frames import pack_sample
from tests.fakes.prom_fixtures import synthetic_cpu_times, synthetic_sample

Scrape = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> tuple[str, Scrape]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: Scrape = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return text, out


def value(m: Scrape, name: str, missing: float | None = None, **labels: str) -> float:
    """The one series of ``name`` with ``labels``; ``missing`` if there is none and that is allowed."""
    hits = [v for (n, lab), v in m.items() if n == name and set(labels.items()) <= lab]
    if not hits and missing is not None:
        return missing
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


class FakeSampler:
    """One sample a second of a host without kernel counters (as a SIMULATED
    sampler): network, PCIe, power, a job's CPU and XIDs at known, changing values."""

    def __init__(self, seed: int = 3) -> None:
        self.rnd = random.Random(seed)
        self.samples: list[HostSample] = []
        self.t = 1_700_000_000.0

    def step(self, xid: tuple[int, ...] = ()) -> HostSample:
        self.t += 1.0
        rx = self.rnd.choice([0.0, 2e6, 9e6, 25e6])
        gpu = GpuSample(index=0, name="H100", uuid="GPU-a", power_w=self.rnd.uniform(100, 700),
                        pcie_rx_bytes_per_s=self.rnd.uniform(0, 1e9), xid_events=xid,
                        throttle_reasons=("sw_power_cap",) if self.rnd.random() < 0.5 else ())
        job = JobInfo(pid=7, tree_id="t", cmdline="c", user="u", start_time=1.0, cpu_percent=self.rnd.uniform(0, 400))
        s = HostSample(
            host="n1", time=self.t, cpu=CpuSample(total_percent=50.0, per_core_percent=(self.rnd.uniform(0, 100),)),
            memory=MemorySample(1, 1), network=NetworkSample(rx, 0.0), storage=StorageSample(None, None),
            gpus=(gpu,), jobs=(job,),
        )
        self.samples.append(s)
        return s

    def history(self, since: float | None) -> list[bytes]:
        return [pack_sample(sample_to_dict(s)) for s in self.samples if since is None or s.time > since]

    def latest(self) -> HostSample | None:
        return self.samples[-1] if self.samples else None

    def truth(self, t1: float, t2: float, amount: str) -> float:
        """What accumulated in (t1, t2], from the samples' own rates (each one an average over
        the second before it); power by the trapezoid rule."""
        total, prev = 0.0, None
        for s in self.samples:
            if prev is not None and t1 < s.time <= t2:
                total += _amount(s, prev, amount)
            prev = s
        return total


def _amount(s: HostSample, prev: HostSample, amount: str) -> float:
    dt = s.time - prev.time
    g, pg = s.gpus[0], prev.gpus[0]
    if amount == "rx":
        return (s.network.rx_bytes_per_s or 0.0) * dt
    if amount == "pcie":
        return (g.pcie_rx_bytes_per_s or 0.0) * dt
    if amount == "energy":
        return ((g.power_w or 0.0) + (pg.power_w or 0.0)) / 2 * dt
    if amount == "job_cpu":
        return (s.jobs[0].cpu_percent or 0.0) / 100 * dt
    if amount == "throttle":
        return dt if g.throttle_reasons else 0.0
    assert amount == "busy"
    return s.cpu.per_core_percent[0] / 100 * dt


COUNTERS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("rx", "gpulens_network_receive_bytes_total", {}),
    ("pcie", "gpulens_gpu_pcie_receive_bytes_total", {}),
    ("energy", "gpulens_gpu_energy_joules_total", {}),
    ("job_cpu", "gpulens_job_cpu_seconds_total", {}),
    ("throttle", "gpulens_gpu_throttle_seconds_total", {"reason": "sw_power_cap"}),
    ("busy", "gpulens_cpu_seconds_total", {"cpu": "0", "mode": "busy"}),
)


def test_integrated_counters_equal_the_true_amount_whatever_the_scrape_interval() -> None:
    fake = FakeSampler()
    fake.step()
    server = serve_metrics(0, "n1", fake.latest, history=fake.history)
    try:
        scrapes: list[tuple[float, Scrape]] = []
        for gap in (1, 15, 4, 30, 60, 2):  # samples between scrapes: any scrape interval
            for _ in range(gap):
                fake.step(xid=(79,) if fake.rnd.random() < 0.1 else ())
            scrapes.append((fake.t, scrape(server.port)[1]))
    finally:
        server.close()
    for (t1, a), (t2, b) in itertools.pairwise(scrapes):
        for what, name, labels in COUNTERS:
            # a reason not seen yet has no series: 0 so far
            got = value(b, name, 0.0, **labels) - value(a, name, 0.0, **labels)
            assert got == pytest.approx(fake.truth(t1, t2, what), rel=1e-9, abs=1e-6), (what, t1, t2)
    # every XID event counted once, none missed between scrapes (each existed in one sample only)
    events = sum(1 for s in fake.samples if s.gpus[0].xid_events)
    assert events > 3
    assert value(scrapes[-1][1], "gpulens_gpu_xid_errors_total", code="79") == events


def test_counters_never_decrease_between_scrapes() -> None:
    fake = FakeSampler(seed=11)
    fake.step()
    server = serve_metrics(0, "n1", fake.latest, history=fake.history)
    try:
        before = scrape(server.port)[1]
        for _ in range(20):
            fake.step(xid=(13,))
        fake.samples.append(dataclasses.replace(fake.samples[-1]))  # the same sample seen twice: nothing added
        after = scrape(server.port)[1]
        again = scrape(server.port)[1]  # no new sample: nothing changes
    finally:
        server.close()
    counters = [k for k in after if k[0].endswith("_total")]
    assert len(counters) >= len(COUNTERS)
    for key in counters:
        assert after[key] >= before.get(key, 0.0), key
        assert again[key] == after[key], key


def test_raw_kernel_counters_pass_through_unchanged() -> None:
    """The kernel's counters (network and disk in the sample, CPU read at scrape time) are
    exported as they are, as node_exporter does; a SIMULATED sample never gets this machine's."""
    box = [synthetic_sample("h", 1, t=1_700_000_100.0)]
    cpu = [synthetic_cpu_times(1, t=1_700_000_100.0)]
    server = serve_metrics(0, "h", lambda: box[0], cpu_times=lambda: cpu[0])
    try:
        a = scrape(server.port)[1]
        box[0] = synthetic_sample("h", 1, t=1_700_000_160.0)
        cpu[0] = synthetic_cpu_times(1, t=1_700_000_160.0)
        b = scrape(server.port)[1]
        box[0] = dataclasses.replace(box[0], simulated=True, time=1_700_000_161.0)
        sim = scrape(server.port)[1]
    finally:
        server.close()
    assert value(b, "gpulens_cpu_seconds_total", cpu="1", mode="user") == cpu[0][1].user
    assert {dict(k[1])["mode"] for k in b if k[0] == "gpulens_cpu_seconds_total"} == {
        "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"}
    assert {dict(k[1])["mode"] for k in sim if k[0] == "gpulens_cpu_seconds_total"} == {"busy", "idle"}
    nic = box[0].network.interfaces[0]
    assert value(b, "gpulens_network_receive_bytes_total", device="eth0") == nic.rx_bytes
    rate = (value(b, "gpulens_network_receive_bytes_total", device="eth0")
            - value(a, "gpulens_network_receive_bytes_total", device="eth0")) / 60.0
    assert rate == pytest.approx(nic.rx_bytes_per_s)
    disk = box[0].storage.disks[0]
    assert value(b, "gpulens_disk_read_bytes_total", device="nvme0n1") == disk.read_bytes


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package 'prometheus')")
def test_promtool_check_metrics_is_clean() -> None:
    fake = FakeSampler()
    for i in range(5):
        fake.step(xid=(48,) if i == 2 else ())
    boxes = {"raw counters": lambda: synthetic_sample("h", 2), "integrated": fake.latest}
    for what, latest in boxes.items():
        server = serve_metrics(0, "h", latest, history=fake.history if what == "integrated" else None)
        try:
            scrape(server.port)
            text = scrape(server.port)[0]
        finally:
            server.close()
        assert "_total" in text
        done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), (what, done)


def test_default_port_is_documented_and_outside_the_exporter_range() -> None:
    from pathlib import Path

    from gpulens.commands import agent as agent_cmd

    assert not 9100 <= DEFAULT_METRICS_PORT <= 9999  # Prometheus' exporter allocations (all taken)
    assert DEFAULT_METRICS_PORT not in (9090, 9091, 9093, 9094, 7789)  # Prometheus, Pushgateway, Alertmanager, us
    import argparse

    parser = argparse.ArgumentParser()
    agent_cmd.add_arguments(parser)
    assert parser.parse_args(["--stdio", "--metrics-port"]).metrics_port == DEFAULT_METRICS_PORT
    assert parser.parse_args(["--stdio", "--metrics-port", "9500"]).metrics_port == 9500
    docs = (Path(__file__).resolve().parents[3] / "docs" / "metrics.md").read_text()
    assert str(DEFAULT_METRICS_PORT) in docs


def test_raw_counter_fields_are_additive_on_the_wire() -> None:
    """A sample from an agent without the kernel-counter fields still decodes (they default
    to none), and one with them round-trips through the sample codec unchanged."""
    from gpulens.ipc.serialize import sample_from_dict, sample_from_msgpack

    s = synthetic_sample("h", 2)
    assert sample_from_msgpack(pack_sample(sample_to_dict(s))) == s
    old = sample_to_dict(s)
    for nic in old["network"]["interfaces"]:
        del nic["rx_bytes"], nic["tx_bytes"]
    for disk in old["storage"]["disks"]:
        del disk["read_bytes"], disk["write_bytes"]
    for g in old["gpus"]:
        del g["energy_joules"], g["tensor_active_percent"], g["nvlink_total_bytes_per_s"]
    back = sample_from_dict(old)
    assert back.network.interfaces[0].rx_bytes is None
    assert back.storage.disks[0].read_bytes is None and back.gpus[0].energy_joules is None
    assert sample_from_msgpack(pack_sample(old)) == back
