"""What rackctl's code asks of Kubernetes: the types and Protocols every caller is written against.

:class:`bootstrap.kube.client.Kubectl` has every method named here; tests and the day-2 commands pass
stand-ins that have only the part they need. One Protocol per kind of work, composed where a caller needs
several: :class:`Cluster` (nodes: drain, delete, uncordon, labels, etcd membership), :class:`ObjectReader`
and :class:`ObjectPatcher` (one object read or merge-patched), :class:`LiveApi` (server-side apply),
:class:`PodLister` (pods by selector), :class:`WorkloadApi` (the validation Jobs), :class:`OperatorApi`
(the GPU Operator's ClusterPolicy and the nodes it upgrades).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bootstrap.errors import RackctlError


class KubeError(RackctlError):
    """A Kubernetes operation failed (the message names it and kubectl's answer)."""


@dataclass(frozen=True)
class KubeNode:
    """What day-2 commands read of a Kubernetes node."""

    name: str
    ready: bool
    allocatable_gpus: int
    labels: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False


class Cluster(Protocol):
    """The Kubernetes a day-2 command works with."""

    @property
    def deployed(self) -> bool: ...

    @property
    def reason(self) -> str: ...

    def nodes(self) -> dict[str, KubeNode]: ...

    def drain(self, node: str) -> None: ...

    def delete_node(self, node: str) -> None: ...

    def uncordon(self, node: str) -> None: ...

    def remove_etcd_member(self, node: str, *, via: str) -> str: ...

    def label(self, node: str, labels: dict[str, str]) -> None: ...


class ObjectReader(Protocol):
    """One object read by kind and name (``None`` when it does not exist)."""

    def get_object(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None: ...


class ObjectPatcher(ObjectReader, Protocol):
    """One object read and JSON-merge-patched (node labels and taints, the ClusterPolicy)."""

    def merge_patch(self, kind: str, name: str, patch: dict[str, Any], namespace: str | None = None) -> None: ...


class LiveApi(ObjectReader, Protocol):
    """Server-side apply of a manifest, and what the cluster serves (:mod:`bootstrap.kube.apply`)."""

    def get_manifest(self, manifest: Path) -> list[dict[str, Any]]: ...

    def apply_server_side(self, manifest: Path, *, field_manager: str) -> str: ...

    def served_kinds(self, api_version: str) -> set[str]: ...


class PodLister(Protocol):
    """Objects of one resource in a namespace, by label selector."""

    def namespaced_objects(self, resource: str, namespace: str, selector: str) -> list[dict[str, Any]]: ...


class WorkloadApi(LiveApi, PodLister, Protocol):
    """Jobs applied, their pods read, their logs fetched and everything deleted (the cluster checks)."""

    def delete_object(self, kind: str, name: str, namespace: str | None = None) -> None: ...

    def logs(self, ref: str, namespace: str, *, tail: int = 400, wait_s: float = 10.0) -> str: ...

    def objects(self, resource: str) -> list[dict[str, Any]]: ...


class OperatorApi(ObjectPatcher, Protocol):
    """What the driver upgrade's operator path needs: the nodes, and the ClusterPolicy read and patched."""

    def nodes(self) -> dict[str, KubeNode]: ...

    def objects(self, resource: str) -> list[dict[str, Any]]: ...
