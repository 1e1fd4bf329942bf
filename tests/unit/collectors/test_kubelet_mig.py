"""MIG devices given by the kubelet (collectors/kubelet/attach.py), against a real gRPC PodResources server
built from the vendored api.proto (tests/fakes/kubelet_server.py) and the fake NVML test double: a MIG
device id (``MIG-…``, under ``nvidia.com/mig-<profile>`` or, in the device plugin's "single" strategy,
``nvidia.com/gpu``) labels the GPU it is part of; MIG devices of one GPU given to several pods are all
named, and the GPU labelled by none; a MIG id that names no GPU read here is still counted in a note."""

from __future__ import annotations

import pytest

pytest.importorskip("grpc", reason="grpcio is not installed (the [test] extra has it)")

from gpulens.collectors.kubelet import PodResourcesClient, PodResourcesReading, attach
from gpulens.collectors.nvml.collector import NvmlCollector
from gpulens.collectors.sampler import Sampler
from gpulens.core.model import GpuSample, Workload
from gpulens.ipc.serialize import sample_from_dict, sample_to_dict
from tests.fakes.fake_nvml import FakeNvml, make_fake_nvml
from tests.fakes.kubelet_server import FakeKubelet, FakePod, kubelet_server

UUIDS = [f"GPU-fa4e0000-0000-0000-0000-{i:012d}" for i in range(4)]  # the fake NVML's
MIGS = [f"MIG-fa4e0001-0000-4000-8000-{slot:012d}" for slot in range(3)]  # GPU 1's, from set_mig(1, 3)
PROFILE = "nvidia.com/mig-1g.10gb"
UID_TRAIN = "1c3e5f2a-0000-4000-8000-00000000000a"


def _fake() -> FakeNvml:
    fake = make_fake_nvml(4)
    fake.set_mig(1, 3)
    fake.gpus[3].mig_mode = None  # no MIG on this one
    return fake


def _gpus_and_parents() -> tuple[tuple[GpuSample, ...], dict[str, str]]:
    fake = _fake()
    with NvmlCollector(fake, clock=fake.clock) as collector:  # type: ignore[arg-type]
        fake.advance(1.0)
        reading = collector.read()
    return reading.gpus, dict(reading.mig_parents)


def _ask(kubelet: FakeKubelet) -> PodResourcesReading:
    with kubelet_server(kubelet) as path:
        return PodResourcesClient(path, deadline_s=10).reading()  # not about the deadline: a slow CI is no failure


def _given(g: GpuSample) -> tuple[str | None, str | None, str | None] | None:
    w = g.allocated
    return None if w is None else (w.namespace, w.pod, w.container)


def test_a_mixed_strategy_mig_device_labels_its_gpu() -> None:
    gpus, parents = _gpus_and_parents()
    assert parents == dict.fromkeys(MIGS, UUIDS[1])
    reading = _ask(FakeKubelet(
        pods=[FakePod("ml", "train-0", [("trainer", {PROFILE: [MIGS[2]]})]),
              FakePod("ml", "eval-0", [("eval", {"nvidia.com/gpu": [UUIDS[0]]})])],
        allocatable={"nvidia.com/gpu": [UUIDS[0], UUIDS[2], UUIDS[3]], PROFILE: MIGS}))
    out, _, notes = attach(gpus, [], reading, {}, parents)
    assert notes == {}  # every allocatable MIG id is a MIG device of GPU 1
    assert out[1].allocated == Workload(namespace="ml", pod="train-0", container="trainer", found_by="kubelet")
    assert [_given(g) for g in out] == [("ml", "eval-0", "eval"), ("ml", "train-0", "trainer"), None, None]
    assert out[1].unavailable["mig"].startswith(f"MIG mode on: 3 MIG devices: {MIGS[0]} (GPU instance 7")


def test_a_single_strategy_mig_device_under_nvidia_com_gpu_labels_its_gpu() -> None:
    gpus, parents = _gpus_and_parents()
    reading = _ask(FakeKubelet(pods=[FakePod("ml", "train-0", [("trainer", {"nvidia.com/gpu": [MIGS[0]]})])],
                               allocatable={"nvidia.com/gpu": MIGS}))
    out, _, notes = attach(gpus, [], reading, {UID_TRAIN: ("ml", "train-0")}, parents)
    assert notes == {}
    assert out[1].allocated == Workload(pod_uid=UID_TRAIN, namespace="ml", pod="train-0", container="trainer",
                                        found_by="kubelet")
    assert [g.allocated for g in out if g.index != 1] == [None, None, None]


def test_two_pods_on_two_mig_devices_of_one_gpu_are_both_named() -> None:
    gpus, parents = _gpus_and_parents()
    reading = _ask(FakeKubelet(pods=[
        FakePod("ml", "train-0", [("trainer", {PROFILE: [MIGS[0]]})]),
        FakePod("llm", "vllm-0", [("server", {PROFILE: [MIGS[1], f"{MIGS[2]}::1"]}), ("proxy", {})]),
    ]))
    out, _, notes = attach(gpus, [], reading, {}, parents)
    assert out[1].allocated is None  # one Workload cannot name two pods: labelled by none, as time-slicing is
    assert out[1].unavailable["allocated"] == (
        f"given to 2 pods (MIG devices of it), so labelled by none: ml/train-0/trainer ({MIGS[0]}), "
        f"llm/vllm-0/server ({MIGS[1]}, {MIGS[2]})")
    assert notes == {"kubelet.shared": "GPUs given to several pods (time-slicing, or MIG devices of one GPU) are "
                                       "labelled by none: GPU 1: 2 pods on MIG devices"}
    assert "allocated" not in out[0].unavailable


def test_two_containers_of_one_pod_on_mig_devices_label_the_gpu_with_the_pod() -> None:
    gpus, parents = _gpus_and_parents()
    reading = _ask(FakeKubelet(pods=[FakePod("ml", "train-0", [("a", {PROFILE: [MIGS[0]]}),
                                                               ("b", {PROFILE: [MIGS[1]]})])]))
    out, _, notes = attach(gpus, [], reading, {}, parents)
    assert _given(out[1]) == ("ml", "train-0", None) and notes == {}


def test_time_sliced_replicas_given_to_two_pods_are_named_too() -> None:
    gpus, parents = _gpus_and_parents()
    reading = _ask(FakeKubelet(pods=[FakePod("a", "p1", [("c", {"nvidia.com/gpu": [f"{UUIDS[0]}::0"]})]),
                                     FakePod("b", "p2", [("c", {"nvidia.com/gpu": [f"{UUIDS[0]}::1"]})])]))
    out, _, notes = attach(gpus, [], reading, {}, parents)
    assert out[0].allocated is None
    assert out[0].unavailable["allocated"] == "given to 2 pods (time-sliced replicas), so labelled by none: a/p1/c, b/p2/c"
    assert notes["kubelet.shared"].endswith("labelled by none: GPU 0: 2 pods")


def test_a_mig_id_that_names_no_gpu_read_here_is_still_counted() -> None:
    gpus, parents = _gpus_and_parents()
    unknown = "MIG-0badc0de-0000-4000-8000-000000000000"
    reading = _ask(FakeKubelet(pods=[FakePod("ml", "train-0", [("trainer", {PROFILE: [unknown, MIGS[0]]})])],
                               allocatable={PROFILE: [*MIGS, unknown]}))
    out, _, notes = attach(gpus, [], reading, {}, parents)
    assert _given(out[1]) == ("ml", "train-0", "trainer")
    assert notes == {"kubelet.devices": (
        "1 kubelet GPU device ids name no GPU read here (another node's, a MIG device NVML did not list, "
        f"or no UUID): ignored, e.g. '{unknown}'")}
    # without the NVML collector's map (an older reader, or MIG devices not listed), MIG ids label nothing
    out, _, notes = attach(gpus, [], reading, {})
    assert all(g.allocated is None for g in out)
    assert notes["kubelet.devices"].startswith("4 kubelet GPU device ids name no GPU read here")


def test_an_older_drivers_mig_id_names_its_gpu_itself() -> None:
    gpus = tuple(GpuSample(i, "g", u) for i, u in enumerate(UUIDS))
    legacy = f"MIG-{UUIDS[2]}/1/0"
    reading = _ask(FakeKubelet(pods=[FakePod("ml", "old-0", [("c", {PROFILE: [legacy]})])],
                               allocatable={PROFILE: [legacy, "MIG-GPU-elsewhere/1/0"]}))
    out, _, notes = attach(gpus, [], reading, {})
    assert [_given(g) for g in out] == [None, None, ("ml", "old-0", "c"), None]
    assert "1 kubelet GPU device ids" in notes["kubelet.devices"] and "MIG-GPU-elsewhere/1/0" in notes["kubelet.devices"]


def test_the_sampler_labels_a_mig_gpu_from_the_fake_nvml_and_the_kubelet() -> None:
    kubelet = FakeKubelet(
        pods=[FakePod("ml", "train-0", [("trainer", {PROFILE: [MIGS[1]]})]),
              FakePod("ml", "serve-0", [("server", {"nvidia.com/gpu": [UUIDS[3]]})])],
        allocatable={"nvidia.com/gpu": [UUIDS[0], UUIDS[2], UUIDS[3]], PROFILE: MIGS})
    with kubelet_server(kubelet) as path, Sampler(nvml=_fake(), kubelet=PodResourcesClient(path, deadline_s=10)) as sampler:
        sample = sampler.sample()
    assert [_given(g) for g in sample.gpus] == [None, ("ml", "train-0", "trainer"), None, ("ml", "serve-0", "server")]
    assert not any(k.startswith("kubelet") for k in sample.unavailable)
    assert sample.gpus[1].unavailable["mig"].startswith("MIG mode on: 3 MIG devices")
    assert sample_from_dict(sample_to_dict(sample)) == sample
