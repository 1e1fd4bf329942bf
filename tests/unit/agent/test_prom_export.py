"""The /metrics exporter: exposition content over real HTTP, absent-not-zero."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpulens.agent.metrics import MAX_LABEL_CHARS, MetricsServer, serve_metrics
from gpulens.core.model import (
    CpuSample,
    HostSample,
    MemorySample,
    NetworkSample,
    StorageSample,
)
from tests.fakes.prom_fixtures import synthetic_cpu_times, synthetic_sample


def scrape(server: MetricsServer) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


@pytest.fixture
def served() -> Iterator[tuple[MetricsServer, list[HostSample | None]]]:
    box: list[HostSample | None] = [synthetic_sample("node01", 2)]
    server = serve_metrics(0, "node01", lambda: box[0], cpu_times=lambda: synthetic_cpu_times(2))
    yield server, box
    server.close()


def one(metrics: dict[str, list[tuple[dict[str, str], float]]], metric: str, /, **labels: str) -> float:
    hits = [v for lab, v in metrics[metric] if all(lab.get(k) == x for k, x in labels.items())]
    assert len(hits) == 1, (metric, labels, metrics.get(metric))
    return hits[0]


def test_host_gpu_job_metrics_in_base_units(served: tuple[MetricsServer, list[HostSample | None]]) -> None:
    m = scrape(served[0])
    up = 100.0  # the synthetic host's counters: 100 s at its rates
    busy = sum(one(m, "gpulens_cpu_seconds_total", cpu="0", mode=mode) for mode in ("user", "system"))
    assert busy / up == pytest.approx(0.25)
    assert one(m, "gpulens_cpu_seconds_total", cpu="1", mode="idle") == pytest.approx(0.75 * up)
    assert one(m, "gpulens_cpus", host="node01") == 2
    assert one(m, "gpulens_memory_used_bytes", host="node01") == 10 * 1024**3
    assert one(m, "gpulens_network_receive_bytes_total", host="node01", device="eth0") == 2000.0 * up
    assert one(m, "gpulens_disk_written_bytes_total", host="node01", device="nvme0n1") == 16384.0 * up
    assert one(m, "gpulens_gpu_utilization_ratio", host="node01", gpu="1", uuid="GPU-0002-0001") == pytest.approx(0.21)
    assert one(m, "gpulens_gpu_memory_used_bytes", gpu="0") == 1020 * 1048576
    assert one(m, "gpulens_gpu_power_watts", gpu="0") == 102.5
    assert one(m, "gpulens_gpu_sm_clock_hertz", gpu="0") == 1.98e9
    assert one(m, "gpulens_gpu_temperature_celsius", gpu="1") == 41.0
    assert one(m, "gpulens_gpu_ecc_corrected_errors_total", gpu="0") == 3
    assert one(m, "gpulens_gpu_xid_last_code", gpu="1") == 79
    assert one(m, "gpulens_gpu_xid_errors_total", gpu="1", code="79") == 1  # the one sample seen had one
    assert one(m, "gpulens_gpu_info", gpu="0", name="NVIDIA H100 80GB HBM3") == 1
    assert one(m, "gpulens_gpu_throttle_reason", gpu="0", reason="sw_power_cap") == 1
    assert one(m, "gpulens_gpu_throttle_seconds_total", gpu="0", reason="sw_power_cap") == 0  # no interval yet
    assert one(m, "gpulens_gpu_process_memory_used_bytes", gpu="0", pid="4242") == 512 * 1048576
    assert one(m, "gpulens_job_info", gpulens_job="slurm-77", pid="4242", user="alice") == 1
    assert one(m, "gpulens_job_cpu_cores", gpulens_job="slurm-77") == pytest.approx(1.5)
    assert one(m, "gpulens_job_gpu_memory_used_bytes", gpulens_job="slurm-77", gpu="0") == 512 * 1048576


def test_no_label_prometheus_would_rename_and_node_exporter_label_names(
    served: tuple[MetricsServer, list[HostSample | None]],
) -> None:
    m = scrape(served[0])
    labels = {k for series in m.values() for lab, _ in series for k in lab}
    assert not labels & {"job", "instance"}  # Prometheus would rename ours exported_job / exported_instance
    assert not labels & {"core", "interface", "disk"}  # node_exporter says cpu, device
    assert {"cpu", "mode", "device", "gpulens_job"} <= labels


def test_unavailable_is_absent_not_zero(served: tuple[MetricsServer, list[HostSample | None]]) -> None:
    m = scrape(served[0])
    # None in the sample -> no series at all, and the reason is exported instead
    assert "gpulens_swap_used_bytes" not in m
    assert "gpulens_cache_l2_hit_ratio" not in m
    assert "gpulens_gpu_sm_occupancy_ratio" not in m
    assert "gpulens_gpu_pcie_transmit_bytes_total" not in m
    assert "gpulens_gpu_xid_last_code" in m and len(m["gpulens_gpu_xid_last_code"]) == 1  # only GPU 1 had one
    reasons = {(lab["gpu"], lab["field"]): lab["reason"] for lab, _ in m["gpulens_metric_unavailable_info"]}
    assert reasons[("", "cache.l2_hit_ratio")].startswith("perf_event_open")
    assert reasons[("0", "pcie_tx_bytes_per_s")] == "NVML: not supported"


def test_no_sample_yet_serves_empty_and_updates_at_scrape_time(
    served: tuple[MetricsServer, list[HostSample | None]],
) -> None:
    server, box = served
    box[0] = None
    assert not [k for k in scrape(server) if k.startswith("gpulens_")]
    box[0] = HostSample(
        host="bare", time=1.0, cpu=CpuSample(None), memory=MemorySample(None, None),
        network=NetworkSample(None, None), storage=StorageSample(None, None),
    )
    m = scrape(server)
    assert "gpulens_network_receive_bytes_total" not in m  # (CPU seconds come from the kernel at scrape time)
    assert "gpulens_memory_total_bytes" not in m
    assert one(m, "gpulens_sample_timestamp_seconds", host="bare") == 1.0


def test_hostile_label_values_are_escaped_and_bounded(
    served: tuple[MetricsServer, list[HostSample | None]],
) -> None:
    import dataclasses

    server, box = served
    sample = synthetic_sample('we"ird\nhost\\', 1)
    job = dataclasses.replace(sample.jobs[0], cmdline="x" * 10_000 + '"} 1\nfake_metric 1')
    box[0] = dataclasses.replace(sample, jobs=(job,))
    m = scrape(server)
    assert "fake_metric" not in m
    (labels, _), = m["gpulens_job_info"]
    assert labels["host"] == 'we"ird\nhost\\'
    assert len(labels["cmdline"]) == MAX_LABEL_CHARS


def test_close_frees_the_port() -> None:
    server = serve_metrics(0, "x", lambda: None)
    port = server.port
    server.close()
    server.close()  # idempotent
    again = serve_metrics(port, "x", lambda: None)
    again.close()
