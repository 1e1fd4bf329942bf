"""The kubelet's PodResources API (collectors/kubelet) against a real gRPC server built from the vendored
api.proto (tests/fakes/kubelet_server.py): GPUs mapped to the pod and container given them, container
names for single-container pods, and a slow, hung, hostile, lying or absent kubelet bounded and named."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("grpc", reason="grpcio is not installed (the [test] extra has it)")

from gpulens.collectors.kubelet import PodResourcesClient, attach
from gpulens.collectors.kubelet.client import NO_GRPC
from gpulens.collectors.kubelet.podresources import MAX_CONTAINERS, MAX_NAME, PodResourcesReading
from gpulens.collectors.sampler import Sampler
from gpulens.core.model import GpuSample, JobInfo, Workload
from gpulens.ipc.serialize import sample_from_dict, sample_to_dict
from tests.fakes.fake_nvml import make_fake_nvml
from tests.fakes.kubelet_server import (
    FakeKubelet,
    FakePod,
    kubelet_server,
    list_answer,
    silent_socket,
)

UUIDS = [f"GPU-fa4e0000-0000-0000-0000-{i:012d}" for i in range(4)]  # the fake NVML's
UID_TRAIN = "1c3e5f2a-0000-4000-8000-00000000000a"
UID_SERVE = "1c3e5f2a-0000-4000-8000-00000000000b"


def _node() -> FakeKubelet:
    return FakeKubelet(
        pods=[
            FakePod("ml", "train-0", [("trainer", {"nvidia.com/gpu": UUIDS[:2]})]),
            FakePod("llm-serving", "vllm-0", [("server", {"nvidia.com/gpu": [UUIDS[2]]}), ("proxy", {})]),
            FakePod("kube-system", "dns", [("coredns", {})]),
        ],
        allocatable={"nvidia.com/gpu": UUIDS},
    )


def _gpus() -> list[GpuSample]:
    return [GpuSample(i, "g", u) for i, u in enumerate(UUIDS)]


def _job(pid: int, uid: str, namespace: str | None = None, pod: str | None = None) -> JobInfo:
    w = Workload(runtime="containerd", container_id="ab" * 32, pod_uid=uid, namespace=namespace, pod=pod,
                 found_by="cgroup")
    return JobInfo(pid=pid, tree_id="t", cmdline="python", user="u", start_time=1e9, workload=w)


def test_the_client_maps_each_gpu_to_the_pod_and_container_given_it() -> None:
    kubelet = _node()
    with kubelet_server(kubelet) as path:
        reading = PodResourcesClient(path, deadline_s=10).reading()  # not about the deadline: a slow CI is no failure
    assert reading.why is None and reading.note is None
    assert [(p.namespace, p.name, [c.name for c in p.containers]) for p in reading.pods] == [
        ("ml", "train-0", ["trainer"]), ("llm-serving", "vllm-0", ["server", "proxy"]),
        ("kube-system", "dns", ["coredns"])]
    assert reading.allocatable is not None and reading.allocatable[0].ids == tuple(UUIDS)
    names = {UID_TRAIN: ("ml", "train-0"), UID_SERVE: ("llm-serving", "vllm-0")}
    jobs = [_job(10, UID_TRAIN, "ml", "train-0"), _job(11, UID_SERVE, "llm-serving", "vllm-0"), _job(12, UID_SERVE)]
    gpus, named, notes = attach(_gpus(), jobs, reading, names)
    assert notes == {}
    assert [g.allocated for g in gpus] == [
        Workload(pod_uid=UID_TRAIN, namespace="ml", pod="train-0", container="trainer", found_by="kubelet"),
        Workload(pod_uid=UID_TRAIN, namespace="ml", pod="train-0", container="trainer", found_by="kubelet"),
        Workload(pod_uid=UID_SERVE, namespace="llm-serving", pod="vllm-0", container="server", found_by="kubelet"),
        None]  # GPU 3: allocatable, given to no one
    # one container: its processes are in it; two: nothing says which, so unnamed; no pod name: unnamed
    assert [j.workload.container for j in named if j.workload is not None] == ["trainer", None, None]
    assert named[0].workload == Workload(runtime="containerd", container_id="ab" * 32, pod_uid=UID_TRAIN,
                                         namespace="ml", pod="train-0", container="trainer", found_by="cgroup")


def test_asked_at_most_every_refresh_and_allocatable_once() -> None:
    now = [100.0]
    kubelet = _node()
    with kubelet_server(kubelet) as path:
        # a generous deadline: with under 0.05 s of it left, GetAllocatableResources would wait for a later ask
        client = PodResourcesClient(path, deadline_s=10, refresh_s=10.0, clock=lambda: now[0])
        first = client.reading()
        assert client.reading() is first and kubelet.calls == {"List": 1, "GetAllocatableResources": 1}
        now[0] += 10.0
        client.reading()  # asks again, in the background: this sample keeps the last answer
        deadline = time.monotonic() + 5
        while kubelet.calls.get("List") != 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert kubelet.calls == {"List": 2, "GetAllocatableResources": 1}


def test_a_path_that_is_no_socket_is_not_asked(tmp_path: Path) -> None:
    path = tmp_path / "kubelet.sock"
    path.write_text("")
    assert PodResourcesClient(str(path)).reading().why == f"kubelet PodResources not read: {path} is not a socket"


def test_the_sampler_sets_allocated_from_the_fake_nvml_uuids() -> None:
    fake = make_fake_nvml(gpus=4)
    with kubelet_server(_node()) as path, Sampler(nvml=fake, kubelet=PodResourcesClient(path, deadline_s=10)) as sampler:
        sample = sampler.sample()
    assert [g.uuid for g in sample.gpus] == UUIDS
    got = [(g.allocated.namespace, g.allocated.pod, g.allocated.container) if g.allocated else None
           for g in sample.gpus]
    assert got == [("ml", "train-0", "trainer"), ("ml", "train-0", "trainer"),
                   ("llm-serving", "vllm-0", "server"), None]
    assert not any(k.startswith("kubelet") for k in sample.unavailable)
    assert sample_from_dict(sample_to_dict(sample)) == sample


def test_a_slow_kubelet_costs_the_sample_at_most_the_deadline_and_says_why() -> None:
    slow = _node()
    slow.delay_s = 30.0
    fake = make_fake_nvml(gpus=2)
    with kubelet_server(slow) as path, Sampler(nvml=fake, kubelet=PodResourcesClient(path, deadline_s=0.3)) as s:
        client = s._kubelet
        assert client is not None
        t0 = time.monotonic()
        reading = client.reading()
        assert time.monotonic() - t0 < 5  # slack for a loaded machine; the kubelet takes 30 s, so it was not waited for
        assert reading.why is not None and "no answer within 0.3 s" in reading.why
        sample = s.sample()  # the next samples do not wait: the ask is in the background or done
        assert "no answer within 0.3 s" in sample.unavailable["kubelet"]
        assert len(sample.gpus) == 2 and all(g.allocated is None for g in sample.gpus)


def test_a_socket_that_never_answers_is_bounded_by_the_deadline() -> None:
    with silent_socket() as path:
        t0 = time.monotonic()
        reading = PodResourcesClient(path, deadline_s=0.3).reading()
        assert time.monotonic() - t0 < 5  # slack for a loaded machine; the socket never answers, so it was bounded
    assert reading.why is not None and reading.pods == ()


def test_hostile_names_are_cleaned_and_cut() -> None:
    evil = "\x1b]52;c;cm0gLXJmIH4=\x07" + "\x1b[2J" + "p" * 10_000 + "\u202e\x9b31m"
    kubelet = FakeKubelet(pods=[FakePod(evil, evil, [(evil, {"nvidia.com/gpu": [UUIDS[0]]})])])
    with kubelet_server(kubelet) as path:
        reading = PodResourcesClient(path, deadline_s=10).reading()
    (pod,) = reading.pods
    for name in (pod.namespace, pod.name, pod.containers[0].name):
        assert name is not None and name == "p" * MAX_NAME
    gpus, _, _ = attach(_gpus(), [], reading, {})
    assert gpus[0].allocated is not None and gpus[0].allocated.pod == "p" * MAX_NAME


def test_a_hundred_thousand_containers_are_bounded() -> None:
    answer = list_answer([FakePod("ml", "big", [(f"c{i}", {}) for i in range(100_000)])])
    with kubelet_server(FakeKubelet(answer=answer)) as path:
        reading = PodResourcesClient(path, deadline_s=10).reading()
    assert len(reading.pods[0].containers) == MAX_CONTAINERS
    assert reading.note is not None and "99872 containers over 128" in reading.note
    _, _, notes = attach(_gpus(), [], reading, {})
    assert notes["kubelet.note"] == reading.note


def test_a_multi_megabyte_answer_is_refused_and_the_sample_kept() -> None:
    answer = list_answer([FakePod("ml", "x" * (6 << 20), [])])
    fake = make_fake_nvml(gpus=2)
    with kubelet_server(FakeKubelet(answer=answer)) as path, Sampler(nvml=fake, kubelet=PodResourcesClient(path, deadline_s=10)) as s:
        sample = s.sample()
    assert "answer over the 4 MiB limit, refused" in sample.unavailable["kubelet"]
    assert len(sample.gpus) == 2 and sample.cpu.total_percent is not None


def test_lying_device_ids_are_ignored_and_a_shared_gpu_labelled_by_no_one() -> None:
    kubelet = FakeKubelet(pods=[
        FakePod("a", "p1", [("c", {"nvidia.com/gpu": ["GPU-not-on-this-node", "0", f"{UUIDS[1]}::0"]})]),
        FakePod("b", "p2", [("c", {"nvidia.com/gpu": [f"{UUIDS[1]}::1"], "example.com/nic": [UUIDS[2]]})]),
        FakePod("c", "p3", [("c", {"amd.com/gpu": [UUIDS[3]]})]),
    ])
    with kubelet_server(kubelet) as path:
        reading = PodResourcesClient(path, deadline_s=10).reading()
    gpus, _, notes = attach(_gpus(), [], reading, {})
    assert [g.allocated.pod if g.allocated else None for g in gpus] == [None, None, None, "p3"]
    assert "2 kubelet GPU device ids name no GPU read here" in notes["kubelet.devices"]
    assert notes["kubelet.shared"].endswith("GPU 1: 2 pods")


def test_without_grpcio_the_reason_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    with kubelet_server(_node()) as path:
        monkeypatch.setitem(sys.modules, "grpc", None)  # import grpc raises ImportError
        reading = PodResourcesClient(path).reading()
        monkeypatch.undo()
    assert reading.why == NO_GRPC == ("kubelet PodResources not read: the grpcio package is not installed "
                                      "(pip install gpulens[k8s])")
    gpus, _, notes = attach(_gpus(), [], reading, {})
    assert notes == {"kubelet": NO_GRPC} and all(g.allocated is None for g in gpus)


def test_an_absent_socket_is_said_only_where_pods_run(tmp_path: Path) -> None:
    reading = PodResourcesClient(str(tmp_path / "kubelet.sock")).reading()
    assert reading.absent and reading.why == (
        f"no kubelet PodResources socket at {tmp_path}/kubelet.sock: pods are named from /var/log/pods, "
        "containers unnamed")
    assert attach(_gpus(), [], reading, {})[2] == {}  # no kubelet, no pods: nothing to explain
    assert attach(_gpus(), [_job(1, UID_TRAIN)], reading, {})[2] == {"kubelet": reading.why}


def test_a_failed_ask_keeps_the_last_answer_for_a_while() -> None:
    now = [0.0]
    kubelet = _node()
    with kubelet_server(kubelet) as path:
        # the first ask (a fresh connection, List and GetAllocatableResources) gets a generous deadline, so a
        # loaded machine still reads it; the failing ask after it is bounded by the short one
        client = PodResourcesClient(path, deadline_s=10, clock=lambda: now[0])
        assert client.reading().why is None
        client.deadline_s = 0.3
        kubelet.delay_s = 30.0
        now[0] += 10.0
        client.reading()
        deadline = time.monotonic() + 5
        while client.reading().note is None and time.monotonic() < deadline:
            time.sleep(0.02)
        reading = client.reading()
    assert reading.why is None and len(reading.pods) == 3
    assert reading.note is not None and "answer 10 s old" in reading.note and "no answer within 0.3 s" in reading.note


def test_reading_type_defaults() -> None:
    assert PodResourcesReading().gpu_claims == {} and PodResourcesReading().why is None
