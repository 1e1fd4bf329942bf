"""A kubelet PodResources server (TEST DOUBLE): a real gRPC server built from the vendored api.proto's
generated stubs (collectors/kubelet/proto), on a unix socket in a fresh directory under /tmp.

It serves ``List`` and ``GetAllocatableResources`` from plain data; ``delay_s`` makes ``List`` answer
late (a slow or hung kubelet); ``answer`` replaces the whole ``List`` answer (a hostile one). It counts
the calls, so tests can check how often the client asks. Needs grpcio (the [test] extra has it).
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc

from gpulens.collectors.kubelet.proto import api_pb2, api_pb2_grpc

Devices = Mapping[str, Sequence[str]]
"""resource name -> device ids (``{"nvidia.com/gpu": ["GPU-…"]}``)."""


@dataclass
class FakePod:
    namespace: str
    name: str
    containers: Sequence[tuple[str, Devices]] = ()


def list_answer(pods: Sequence[FakePod]) -> api_pb2.ListPodResourcesResponse:
    return api_pb2.ListPodResourcesResponse(pod_resources=[
        api_pb2.PodResources(namespace=p.namespace, name=p.name, containers=[
            api_pb2.ContainerResources(name=c, cpu_ids=[1, 2], devices=[
                api_pb2.ContainerDevices(resource_name=r, device_ids=list(ids)) for r, ids in devs.items()])
            for c, devs in p.containers])
        for p in pods])


@dataclass
class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):
    pods: Sequence[FakePod] = ()
    allocatable: Devices = field(default_factory=dict)
    delay_s: float = 0.0
    answer: api_pb2.ListPodResourcesResponse | None = None
    calls: dict[str, int] = field(default_factory=dict)
    released: threading.Event = field(default_factory=threading.Event)

    def List(self, request: Any, context: Any) -> api_pb2.ListPodResourcesResponse:
        self.calls["List"] = self.calls.get("List", 0) + 1
        if self.delay_s:
            self.released.wait(self.delay_s)  # set when the server stops: no thread sleeps past the test
        return self.answer if self.answer is not None else list_answer(self.pods)

    def GetAllocatableResources(self, request: Any, context: Any) -> api_pb2.AllocatableResourcesResponse:
        self.calls["GetAllocatableResources"] = self.calls.get("GetAllocatableResources", 0) + 1
        return api_pb2.AllocatableResourcesResponse(cpu_ids=[0, 1], devices=[
            api_pb2.ContainerDevices(resource_name=r, device_ids=list(ids)) for r, ids in self.allocatable.items()])


@contextmanager
def _socket_dir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="gpl-kubelet-", dir="/tmp")  # short: a unix socket path is at most 107 bytes
    try:
        yield f"{d}/kubelet.sock"
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextmanager
def kubelet_server(kubelet: FakeKubelet) -> Iterator[str]:
    """Serves ``kubelet`` on a fresh unix socket; yields its path."""
    with _socket_dir() as path:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(kubelet, server)
        server.add_insecure_port(f"unix://{path}")
        server.start()
        try:
            yield path
        finally:
            kubelet.released.set()
            server.stop(grace=None).wait(5)


@contextmanager
def silent_socket() -> Iterator[str]:
    """A unix socket that accepts connections and never says a word (a hung kubelet)."""
    with _socket_dir() as path:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(8)
        held: list[socket.socket] = []
        stop = threading.Event()

        def accept() -> None:
            listener.settimeout(0.1)
            while not stop.is_set():
                try:
                    held.append(listener.accept()[0])
                except OSError:
                    continue

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        try:
            yield path
        finally:
            stop.set()
            thread.join(2)
            for conn in held:
                conn.close()
            listener.close()


__all__ = ["FakeKubelet", "FakePod", "kubelet_server", "list_answer", "silent_socket"]
