"""Everything that talks to a live Kubernetes API server.

- :mod:`bootstrap.kube.api`: the types and Protocols callers are written against (:class:`Cluster`,
  :class:`LiveApi`, :class:`WorkloadApi`, ...), one place for "what rackctl asks of Kubernetes".
- :mod:`bootstrap.kube.client`: ``kubectl`` with the state directory's kubeconfig (:class:`Kubectl`), or
  :class:`NotDeployed`; :func:`cluster_for` picks one; :class:`ClusterGate` drains for the rollouts.
- :mod:`bootstrap.kube.apply`: server-side apply of rendered objects, and the watches of their rollouts.
- :mod:`bootstrap.kube.node_labels`: the inventory's node labels and taints patched onto live Nodes.
- :mod:`bootstrap.kube.service_proxy`: a Service reached through the API server's service proxy.

Rendering and offline validation of what will be applied stay in :mod:`bootstrap.cluster`. The client's
names are re-exported here (``from bootstrap.kube import Kubectl``): it is what most callers need.
"""

from bootstrap.kube.api import Cluster, KubeError, KubeNode
from bootstrap.kube.client import (
    ETCD_DATA_DIR,
    KUBECONFIG,
    SYSTEM_LABEL_PREFIXES,
    ClusterGate,
    Kubectl,
    NotDeployed,
    blocking_pods,
    cluster_for,
    kube_node,
    user_labels,
)

__all__ = [
    "ETCD_DATA_DIR",
    "KUBECONFIG",
    "SYSTEM_LABEL_PREFIXES",
    "Cluster",
    "ClusterGate",
    "KubeError",
    "KubeNode",
    "Kubectl",
    "NotDeployed",
    "blocking_pods",
    "cluster_for",
    "kube_node",
    "user_labels",
]
