"""Issue 29: the Prometheus source reads dcgm-exporter's Kubernetes labels back: the pod given each GPU.

The scrape is Datadog's real dcgm-exporter fixture (tests/data/SOURCES.md), whose
``ip-11111`` GPU carries ``pod``, ``namespace`` and ``container`` labels, as dcgm-exporter adds
them from the kubelet's PodResources API.
"""

from __future__ import annotations

from gpulens.sources.prometheus.assemble import assemble
from tests.unit.sources.test_prom_hostname import SCRAPE, _answers


def test_the_gpu_given_to_a_pod_names_it() -> None:
    hosts = assemble(_answers(SCRAPE), 1.0)
    given = hosts["ip-11111"].gpus[0].allocated
    assert given is not None
    assert (given.namespace, given.pod, given.container, given.found_by) == (
        "ray-llm", "ray-1111111", "ray-worker", "prometheus")
    assert hosts["424773df46e0"].gpus[0].allocated is None  # no pod labels there: not invented


def test_hostile_pod_labels_are_cleaned_and_cut() -> None:
    text = SCRAPE.replace('pod="ray-1111111"', 'pod="\x1b]52;c;cm0K\x07' + "x" * 10_000 + '"')
    given = assemble(_answers(text), 1.0)["ip-11111"].gpus[0].allocated
    assert given is not None and given.pod is not None
    assert "\x1b" not in given.pod and "\x07" not in given.pod and len(given.pod) <= 253
