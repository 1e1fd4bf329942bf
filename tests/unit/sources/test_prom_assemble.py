"""The Prometheus fast paths give the same samples as the checked slow paths:
msgspec decoding against json decoding, cached-tier digests against
re-applying the cached answers, and the GC pause restores the GC's state.
Offline: no Prometheus needed."""

from __future__ import annotations

import gc
import json
import math
import random

from gpulens.ipc.prom_names import TABLE, MetricMap
from gpulens.sources.prometheus.assemble import assemble
from gpulens.sources.prometheus.client import parse_answer, parse_vector
from gpulens.sources.prometheus.source import _gc_paused
from gpulens.sources.prometheus.tally import Answer, digest

Answers = list[tuple[MetricMap, Answer]]


def _body(values: list[str]) -> bytes:
    result = [{"metric": {"host": f"h{i}", "gpu": "0"}, "value": [1700000000.5, v]} for i, v in enumerate(values)]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def test_fast_vector_decoding_matches_the_checked_decoder() -> None:
    body = _body(["1.5", "NaN", "+Inf", "-Inf", "1e-3", "0", "-2"])
    fast = list(parse_vector(body))
    checked = [(s.labels, s.points[0][1]) for s in parse_answer(body, "vector")]
    assert [labels for labels, _ in fast] == [labels for labels, _ in checked]
    for (_, a), (_, b) in zip(fast, checked, strict=True):
        assert (math.isnan(a) and math.isnan(b)) or a == b
    assert len(parse_vector(body)) == 7
    # a scalar answer (no series shape) still goes through the checked path
    scalar = b'{"status":"success","data":{"resultType":"scalar","result":[1700000000,"4"]}}'
    assert list(parse_vector(scalar)) == [({}, 4.0)]


def _labels(rnd: random.Random) -> dict[str, str]:
    labels: dict[str, str] = {}
    pick = rnd.random()
    if pick < 0.5:
        labels["host"] = rnd.choice("abcd")
    elif pick < 0.7:
        labels["Hostname"] = rnd.choice("abcd")
    elif pick < 0.9:
        labels["instance"] = rnd.choice("abcd") + ":9100"
    for key, options in (("gpu", ["0", "1", "07", "x", "", "300", "99999"]), ("uuid", ["U1", "U2", ""]),
                         ("UUID", ["V1", ""]), ("name", ["H100", ""]), ("modelName", ["A100"]),
                         ("pid", ["1", "2", "x"]), ("reason", ["r1", "r2"]),
                         ("field", ["gpu.power_w", "cpu.total_percent", ""]), ("user", ["u"]),
                         ("tree_id", ["t"]), ("cmdline", ["c"])):
        if rnd.random() < 0.5:
            labels[key] = rnd.choice(options)
    return labels


def _answers(rnd: random.Random, rows: list[MetricMap]) -> Answers:
    values = [1.0, 2.5, 0.0, float("nan"), float("inf"), 123456.7]
    return [(r, [(_labels(rnd), rnd.choice(values)) for _ in range(rnd.randint(0, 10))]) for r in rows]


def test_digests_give_the_samples_of_reapplied_answers() -> None:
    """Every family, jobs, throttling, processes, reasons, NaN, hosts only in
    the cache (must not live on), GPU ids from several tiers: same samples."""
    rnd = random.Random(7)
    for _ in range(150):
        tiers = {t: [r for r in TABLE if r.tier == t and rnd.random() < 0.7] for t in ("core", "detail", "static")}
        core = _answers(rnd, tiers["core"])
        detail, static = _answers(rnd, tiers["detail"]), _answers(rnd, tiers["static"])
        skipped = {"gpu.power_w": "not queried"} if rnd.random() < 0.3 else None
        expected = assemble(core, 5.0, extra=detail + static, skipped=skipped)
        digests = [digest(detail), digest(static)]
        assert assemble(core, 5.0, skipped=skipped, digests=digests) == expected  # (NaN never reaches a sample)
        assert assemble(core, 5.0, skipped=skipped, digests=digests) == expected  # merging leaves digests as they were


def test_gc_pause_restores_the_previous_state() -> None:
    assert gc.isenabled()
    with _gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with _gc_paused():
            pass
        assert not gc.isenabled()  # someone else's pause is left alone
    finally:
        gc.enable()


def _row(field: str, family: str = "gpulens") -> MetricMap:
    return next(r for r in TABLE if r.field == field and r.family == family)


def test_rate_answers_alone_do_not_keep_a_gone_host() -> None:
    """rate() still answers for a window after a target went away: only instant rows make hosts."""
    rate, instant = _row("network.rx_bytes_per_s"), _row("memory.used_bytes")
    assert rate.windowed and not instant.windowed
    answers: Answers = [(rate, [({"host": "gone"}, 5.0), ({"host": "here"}, 7.0)]),
                        (instant, [({"host": "here"}, 1.0)])]
    got = assemble(answers, 1.0)
    assert set(got) == {"here"} and got["here"].network.rx_bytes_per_s == 7.0


def test_hosts_found_only_in_detail_answers_are_hosts() -> None:
    """Datadog's dcgm scrape: a host whose GPU has only detail fields (power limit,
    throttling) is a host in every poll, also those that reuse the cached details."""
    core: Answers = [(_row("gpu.utilization_percent", "dcgm"), [({"Hostname": "a", "gpu": "0"}, 5.0)])]
    limit = (_row("gpu.power_limit_w", "dcgm"), [({"Hostname": "b", "gpu": "0", "UUID": "U"}, 70.0)])
    nvlink = (_row("gpu.nvlink_total_bytes_per_s", "dcgm"), [({"Hostname": "gone", "gpu": "0"}, 1.0)])
    plain = assemble(core, 1.0, digests=[digest([limit, nvlink])])
    assert set(plain) == {"a"}  # a cache alone adds nobody
    got = assemble(core, 1.0, digests=[digest([limit, nvlink], adds_hosts=True)])
    assert set(got) == {"a", "b"}  # ... unless told; never from a rate() answer
    assert got["b"].gpus[0].power_limit_w == 70.0 and got["b"].gpus[0].uuid == "U"
