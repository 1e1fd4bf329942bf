"""Asking the kubelet's PodResources API (v1 ``List`` and ``GetAllocatableResources``) over its unix socket.

The socket, ``/var/lib/kubelet/pod-resources/kubelet.sock``, is root's: only
an agent running as root (or a user the socket lets connect) reads it, and
otherwise :attr:`PodResourcesReading.why` says so. The answer is used for
labels only (pod, namespace and container names; which container was given
which GPU), never to decide anything else.

Bounds, whatever the kubelet (or what listens on its socket) does:

* one ask every :data:`REFRESH_S` seconds at most; between asks the last
  answer is reused;
* every ask has a hard deadline (:data:`DEADLINE_S`) and runs in a worker
  thread: the sampling thread waits for it only the first time, and never
  longer than the deadline; later answers land for the next sample;
* answers over :data:`MAX_MESSAGE_BYTES` are refused by gRPC; names and
  counts are cleaned and cut (``collectors.kubelet.podresources``).

The ``grpcio`` and ``protobuf`` packages are optional (``pip install
gpulens[k8s]``); without them the reading says so, and pods are named from
``/var/log/pods`` only.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from gpulens.collectors.kubelet.podresources import (
    KubeletDevices,
    PodResourcesReading,
    allocatable_of,
    gpu_claims,
    pods_of,
)
from gpulens.core.sanitize import clean_text

if TYPE_CHECKING:
    from gpulens.collectors.kubelet.proto import api_pb2

log = logging.getLogger("gpulens.collectors.kubelet")

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEADLINE_S = 1.0
"""Longest one ask may take (both calls together), and the longest a sample waits for it."""
REFRESH_S = 10.0
"""The kubelet is asked again at most this often."""
KEEP_S = 30.0
"""A good answer is still used this long after it when later asks fail (said in the note)."""
MAX_MESSAGE_BYTES = 4 << 20
"""Largest answer accepted (gRPC refuses a larger one): 110 pods with GPUs take a few kB."""
NO_GRPC = "kubelet PodResources not read: the grpcio package is not installed (pip install gpulens[k8s])"


def load_grpc() -> tuple[Any, ModuleType, ModuleType]:
    """``grpc`` and the generated stubs (raises ImportError without grpcio or protobuf, and
    protobuf's VersionError or RuntimeError when the installed ones are older than the stubs)."""
    import grpc

    from gpulens.collectors.kubelet.proto import api_pb2, api_pb2_grpc

    return grpc, api_pb2, api_pb2_grpc


def _stub_errors() -> tuple[type[Exception], ...]:
    """What loading stubs newer than the installed protobuf/grpcio raises: protobuf's VersionError
    (protobuf 5.26 and later), grpc's RuntimeError, a descriptor's TypeError."""
    try:
        from google.protobuf.runtime_version import VersionError
    except ImportError:
        return (RuntimeError, TypeError, AttributeError)
    return (VersionError, RuntimeError, TypeError, AttributeError)


class _Lister(Protocol):
    """The one call of the generated ``PodResourcesListerStub`` asked here with a time limit."""

    def GetAllocatableResources(  # the kubelet's gRPC method name
        self, request: api_pb2.AllocatableResourcesRequest, *, timeout: float
    ) -> api_pb2.AllocatableResourcesResponse: ...


def _size(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n / 1024:g} KiB"


def _detail(err: Exception) -> str:
    return clean_text(str(err))[:200]


class PodResourcesClient:
    """The kubelet's pods and GPU allocation, asked at most every ``refresh_s`` (thread-safe)."""

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        *,
        deadline_s: float = DEADLINE_S,
        refresh_s: float = REFRESH_S,
        max_bytes: int = MAX_MESSAGE_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.socket_path = socket_path
        self.deadline_s = deadline_s
        self.refresh_s = refresh_s
        self.max_bytes = max_bytes
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: PodResourcesReading | None = None
        self._good: tuple[float, PodResourcesReading] | None = None  # the last answer that was read, and when
        self._asked: float | None = None
        self._worker: threading.Thread | None = None
        self._waited = False
        self._allocatable_asked = False
        self._allocatable: tuple[KubeletDevices, ...] | None = None

    def reading(self) -> PodResourcesReading:
        """The newest answer; asks again (in a worker thread) when the last ask is ``refresh_s`` old.

        Waits only for the first ask, and at most ``deadline_s``; never raises.
        """
        now = self._clock()
        worker: threading.Thread | None = None
        with self._lock:
            due = self._asked is None or now - self._asked >= self.refresh_s
            if due and self._worker is None:
                self._asked = now
                why = self._cannot_connect()
                if why is not None:
                    self._latest = why
                else:
                    worker = self._worker = threading.Thread(target=self._run, name="gpulens-kubelet", daemon=True)
                    worker.start()
                    if self._waited:
                        worker = None
                    self._waited = True
        if worker is not None:
            worker.join(self.deadline_s)
        with self._lock:
            if self._latest is None:
                return PodResourcesReading(why=f"kubelet PodResources: no answer within {self.deadline_s:g} s "
                                               f"from {self.socket_path}")
            return self._latest

    def _cannot_connect(self) -> PodResourcesReading | None:
        """Why the socket cannot be asked (absent, not a socket, not ours to open), or None."""
        path = self.socket_path
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return PodResourcesReading(why=f"no kubelet PodResources socket at {path}: pods are named from "
                                           "/var/log/pods, containers unnamed", absent=True)
        except OSError as err:
            return PodResourcesReading(why=f"kubelet PodResources not read: {path}: {err.strerror or err}")
        if not stat.S_ISSOCK(st.st_mode):
            return PodResourcesReading(why=f"kubelet PodResources not read: {path} is not a socket")
        if os.geteuid() != 0 and not os.access(path, os.R_OK | os.W_OK):
            return PodResourcesReading(why=f"kubelet PodResources not read: {path} is root's (the agent runs "
                                           "as root to read it): containers unnamed")
        return None

    def _run(self) -> None:
        try:
            got = self._ask()
        except Exception as err:  # the worker thread's top: a label source never stops the sampler
            log.debug("kubelet PodResources ask failed", exc_info=True)
            got = PodResourcesReading(why=f"kubelet PodResources not read: {type(err).__name__}: {_detail(err)}")
        now = self._clock()
        with self._lock:
            if got.why is None:
                self._good = (now, got)
            elif self._good is not None and now - self._good[0] <= KEEP_S:
                at, good = self._good
                got = replace(good, note=f"kubelet PodResources answer {now - at:.0f} s old: {got.why}")
            self._latest = got
            self._worker = None

    def _ask(self) -> PodResourcesReading:
        try:
            grpc, api_pb2, api_pb2_grpc = load_grpc()
        except ImportError as err:
            if (err.name or "").startswith("google"):
                return PodResourcesReading(why="kubelet PodResources not read: the protobuf package is not "
                                               "installed (pip install gpulens[k8s])")
            return PodResourcesReading(why=NO_GRPC)
        except _stub_errors() as err:  # protobuf's VersionError, grpc's RuntimeError: older than the stubs
            return PodResourcesReading(why=f"kubelet PodResources not read: the installed grpcio/protobuf "
                                           f"cannot load the stubs ({_detail(err)})")
        end = time.monotonic() + self.deadline_s
        options = [("grpc.max_receive_message_length", self.max_bytes), ("grpc.max_send_message_length", 1 << 16),
                   ("grpc.enable_retries", 0), ("grpc.enable_http_proxy", 0)]
        with grpc.insecure_channel(f"unix://{self.socket_path}", options=options) as channel:
            stub = api_pb2_grpc.PodResourcesListerStub(channel)
            try:
                answer = stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.deadline_s)
            except grpc.RpcError as err:
                return PodResourcesReading(why=self._rpc_why("List", err, grpc))
            pods, note = pods_of(answer)
            allocatable = self._allocatable_once(stub, api_pb2, grpc, end - time.monotonic())
        return PodResourcesReading(pods=pods, allocatable=allocatable, gpu_claims=gpu_claims(pods), note=note)

    def _allocatable_once(self, stub: _Lister, api_pb2: ModuleType, grpc: ModuleType,
                          left_s: float) -> tuple[KubeletDevices, ...] | None:
        """The node's GPU device ids, asked once (an older kubelet may not serve it: then None)."""
        if self._allocatable_asked or left_s < 0.05:  # no time left: asked on a later refresh
            return self._allocatable
        self._allocatable_asked = True
        try:
            self._allocatable = allocatable_of(stub.GetAllocatableResources(
                api_pb2.AllocatableResourcesRequest(), timeout=left_s))
        except grpc.RpcError:
            self._allocatable = None
        return self._allocatable

    def _rpc_why(self, call: str, err: Exception, grpc: ModuleType) -> str:
        code = err.code() if hasattr(err, "code") else None
        head = f"kubelet PodResources {call} from {self.socket_path}"
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"{head}: no answer within {self.deadline_s:g} s"
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return f"{head}: answer over the {_size(self.max_bytes)} limit, refused"
        details = err.details() if hasattr(err, "details") else str(err)
        name = getattr(code, "name", "error")
        return f"{head}: {name}: {clean_text(str(details))[:200]}"
