"""The kubelet's PodResources API: pod, namespace and container names, and which container was given which GPU.

``client`` asks the kubelet's socket (bounded, in a worker thread, at most
every 10 s; ``grpcio`` and ``protobuf`` are the optional ``[k8s]`` extra),
``podresources`` keeps its answer cleaned and bounded, ``attach`` joins it
onto a sample. ``proto/`` holds the vendored Kubernetes ``api.proto``
(Apache-2.0) and its generated stubs (``scripts/gen_podresources.sh``).
"""

from gpulens.collectors.kubelet.attach import attach
from gpulens.collectors.kubelet.client import DEFAULT_SOCKET, PodResourcesClient
from gpulens.collectors.kubelet.podresources import (
           KubeletContainer,
           KubeletDevices,
           KubeletPod,
           PodResourcesReading,
)

__all__ = ["DEFAULT_SOCKET", "KubeletContainer", "KubeletDevices", "KubeletPod", "PodResourcesClient",
           "PodResourcesReading", "attach"]
