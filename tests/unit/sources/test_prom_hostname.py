"""dcgm-exporter's host label in both spellings: ``Hostname`` (releases) and
``hostname`` (its main branch). A scrape with either names the host; only
``instance`` (``localhost:9400`` behind a sidecar) is the fallback (issue 32 item 15)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpulens.ipc.prom_names import TABLE, MetricMap, host_of
from gpulens.sources.prometheus.assemble import assemble
from gpulens.sources.prometheus.tally import Answer
from tests.paths import DATA

SCRAPE = (DATA / "prometheus" / "datadog-dcgm-metrics.txt").read_text()
HOSTS = {"424773df46e0", "551bdf382151", "ip-11111"}


def _answers(text: str) -> list[tuple[MetricMap, Answer]]:
    """What Prometheus answers for each dcgm row: the scrape's series plus the
    ``instance`` label Prometheus adds (the exporter scraped through localhost)."""
    series: dict[str, list[tuple[Mapping[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if "gpu" not in s.labels:  # the file's few unlabelled lines (a metric list, no series of a GPU)
                continue
            series.setdefault(s.name, []).append(({**s.labels, "instance": "localhost:9400"}, s.value))
    return [(row, series[row.metrics[0]]) for row in TABLE
            if row.family == "dcgm" and len(row.metrics) == 1 and row.metrics[0] in series]


@pytest.mark.parametrize("label", ["Hostname", "hostname"])
def test_both_spellings_name_the_host_not_localhost(label: str) -> None:
    text = SCRAPE.replace('Hostname="', f'{label}="')
    assert (f'{label}="424773df46e0"' in text) and (label == "Hostname" or 'Hostname="' not in text)
    answers = _answers(text)
    assert len(answers) >= 5
    assert {host_of(lab) for _, ans in answers for lab, _ in ans} == HOSTS
    hosts = assemble(answers, 1.0)
    assert set(hosts) == HOSTS
    assert "localhost" not in hosts
    assert hosts["424773df46e0"].gpus[0].temperature_c == 25


def test_instance_is_the_fallback_and_host_wins() -> None:
    assert host_of({"instance": "localhost:9400"}) == "localhost"
    assert host_of({"hostname": "n7", "instance": "localhost:9400"}) == "n7"
    assert host_of({"host": "a", "hostname": "n7"}) == "a"
