"""The sample model survives a round trip, and malformed data is refused by field path."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulens.core.errors import SchemaError
from gpulens.core.model import (
    CacheSample,
    CpuSample,
    GpuProcess,
    GpuSample,
    HostSample,
    JobInfo,
    MemorySample,
    NetInterface,
    NetworkSample,
    StorageSample,
)
from gpulens.ipc.serialize import sample_from_dict, sample_to_dict


def make_sample() -> HostSample:
    gpu = GpuSample(
        index=0,
        name="NVIDIA H100",
        uuid="GPU-1",
        utilization_percent=97.0,
        mem_used_bytes=10 << 30,
        mem_total_bytes=80 << 30,
        processes=(GpuProcess(pid=42, used_memory_bytes=1 << 30),),
        xid_events=(79,),
        unavailable={"nvlink_rx_bytes_per_s": "not supported"},
    )
    return HostSample(
        host="node01",
        time=1_700_000_000.5,
        cpu=CpuSample(total_percent=12.5, per_core_percent=(10.0, 15.0)),
        memory=MemorySample(total_bytes=1 << 34, used_bytes=1 << 33),
        network=NetworkSample(1.0, 2.0, (NetInterface("eth0", 1.0, 2.0),)),
        storage=StorageSample(None, None),
        cache=CacheSample(),
        gpus=(gpu,),
        jobs=(JobInfo(pid=42, tree_id="init/bash/python3", cmdline="python3 t.py", user="u",
                      start_time=1.0, gpu_mem_bytes={"0": 1 << 30}, job_key="123"),),
        unavailable={"cache.l2_hit_ratio": "perf_event_open: ENOENT"},
    )


def test_round_trip_json_and_msgpack() -> None:
    sample = make_sample()
    data = sample_to_dict(sample)
    assert data["cpu"]["total_percent"] == 12.5
    assert data["gpus"][0]["processes"][0]["pid"] == 42
    assert sample_from_dict(json.loads(json.dumps(data))) == sample
    assert sample_from_dict(msgpack.unpackb(msgpack.packb(data))) == sample


@pytest.mark.parametrize(
    ("path", "value", "expected_path"),
    [
        (("cpu", "total_percent"), "high", "cpu.total_percent"),
        (("gpus", 0, "index"), 1.5, "gpus[0].index"),
        (("jobs", 0, "gpu_mem_bytes"), [1], "jobs[0].gpu_mem_bytes"),
        (("time",), True, "time"),
        (("time",), float("nan"), "time"),
        (("gpus", 0, "processes", 0, "pid"), "42", "gpus[0].processes[0].pid"),
        (("jobs", 0, "gpu_mem_bytes", "0"), "1 GiB", "jobs[0].gpu_mem_bytes[...]"),
        (("unavailable",), {"cache.l2_hit_ratio": 7}, "unavailable[...]"),
        (("network", "interfaces"), {"eth0": 1}, "network.interfaces"),
    ],
)
def test_wrong_type_names_the_field(path: tuple[object, ...], value: object, expected_path: str) -> None:
    data = sample_to_dict(make_sample())
    target: Any = data  # nested maps and lists
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(SchemaError) as info:
        sample_from_dict(data)
    assert str(info.value).startswith(expected_path + ":")


def test_missing_required_field() -> None:
    data = sample_to_dict(make_sample())
    del data["host"]
    with pytest.raises(SchemaError, match=r"^host: expected a value"):
        sample_from_dict(data)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_arbitrary_data_is_refused_cleanly(value: object) -> None:
    with contextlib.suppress(SchemaError):
        sample_from_dict(value)
