"""The rendered model repository delivered to the Triton pods: a ConfigMap and a copying initContainer.

Per model, ConfigMap ``<model>-repository`` holds the rendered files under flat keys (ConfigMap keys cannot
hold ``/``) plus ``rackctl-repository.json`` (digest, file paths, the empty version directories Triton needs).
The pod mounts it with ``items: [{key, path}]``, which restores the tree, and the initContainer ``repository``
(the Triton image, python3, ``rackctl_copy_repository.py`` from the launcher ConfigMap) copies it to the path
Triton loads, atomically, skipping the copy when the digest there already matches. The digest is also the pod
template's annotation ``rackctl.io/repository-digest``: a changed repository rolls the Deployment.

Where the repository lands: a pod-local ``emptyDir`` at ``/opt/rackctl-models/<model>/model_repository``
(the model's files are mounted read-only, so the repository never goes there). Weights, engines and
tokenizers stay where the configs point: under ``deployment.storage.mount_path`` (see manifests.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bootstrap.errors import InvalidInput, Problem
from bootstrap.inventory.served_models import ModelSpec
from bootstrap.triton.render import REPOSITORY_DIR, RenderedModel

COPIER_SCRIPT = Path(__file__).parent / "templates" / "k8s" / "rackctl_copy_repository.py"
#: Keys and paths shared with the copier script (it is stdlib-only and cannot import these).
MANIFEST_KEY = "rackctl-repository.json"
TREE_DIR = "repository"
MARKER = ".rackctl-repository-digest"
#: Where the pod mounts the ConfigMap (the copier's ``--source``).
SOURCE_MOUNT = "/opt/rackctl-repository-source"
#: Where the model repository lives in the pod (an emptyDir; the model's files are mounted read-only).
REPOSITORY_ROOT = "/opt/rackctl-models"
DIGEST_ANNOTATION = "rackctl.io/repository-digest"
#: The API server refuses a ConfigMap whose values total more than this (``core.MaxSecretSize``, 1 MiB).
CONFIG_MAP_LIMIT = 1024 * 1024
#: What a ConfigMap key may contain (``IsConfigMapKey``), and its longest length.
KEY_PATTERN = re.compile(r"[-._a-zA-Z0-9]+")
KEY_MAX = 253
KEY_SEPARATOR = "__"


def repository_digest(files: Mapping[str, bytes], dirs: list[str] | tuple[str, ...]) -> str:
    """sha256 over every (path, content) and directory in path order: the copier script's own function."""
    digest = hashlib.sha256()
    for rel in sorted(files):
        data = files[rel]
        digest.update(b"file\0" + rel.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    for rel in sorted(dirs):
        digest.update(b"dir\0" + rel.encode() + b"\0")
    return digest.hexdigest()


def config_map_key(rel: str) -> str:
    """The flat key of a repository file: ``preprocessing/1/model.py`` -> ``preprocessing__1__model.py``."""
    return rel.replace("/", KEY_SEPARATOR)


def repository_path(spec: ModelSpec) -> str:
    """The model repository path Triton loads in the pod (``--model_repo``)."""
    return f"{REPOSITORY_ROOT}/{spec.name}/{REPOSITORY_DIR}"


def config_map_name(spec: ModelSpec) -> str:
    return f"{spec.name}-repository"


def _bad(spec: ModelSpec, message: str, fix: str) -> InvalidInput:
    return InvalidInput(f"model {spec.name}: {message}", problems=[Problem(f"models[{spec.name}]", message, fix)])


def repository_config_map(spec: ModelSpec, rendered: RenderedModel, meta: dict[str, Any]) -> dict[str, Any]:
    """ConfigMap ``<model>-repository`` of ``rendered`` (``meta``: its metadata), refused over 1 MiB."""
    keys = {rel: config_map_key(rel) for rel in sorted(rendered.files)}
    bad_keys = [k for k in keys.values() if len(k) > KEY_MAX or not KEY_PATTERN.fullmatch(k)]
    if bad_keys or len(set(keys.values())) != len(keys) or MANIFEST_KEY in keys.values():
        raise _bad(spec, f"repository paths give invalid or clashing ConfigMap keys {bad_keys}", "report a rackctl bug")
    contents = {rel: text.encode("utf-8") for rel, text in rendered.files.items()}
    manifest = {
        "digest": repository_digest(contents, rendered.dirs),
        "files": sorted(rendered.files),
        "dirs": sorted(rendered.dirs),
    }
    data = {keys[rel]: rendered.files[rel] for rel in keys}
    data[MANIFEST_KEY] = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    size = sum(len(v.encode("utf-8")) for v in data.values())
    if size > CONFIG_MAP_LIMIT:
        largest = sorted(rendered.files, key=lambda rel: -len(contents[rel]))[:3]
        raise _bad(
            spec,
            f"the rendered repository is {size} bytes, over Kubernetes' {CONFIG_MAP_LIMIT}-byte (1 MiB) limit for "
            f"ConfigMap {config_map_name(spec)} (largest: {', '.join(largest)})",
            "keep large files out of the repository: engines and tokenizers are read from engine_dir and "
            "hf_model_dir on the model volume, not shipped in the ConfigMap",
        )
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def digest_of(config_map: dict[str, Any]) -> str:
    """The repository digest a ConfigMap built by :func:`repository_config_map` carries."""
    return str(json.loads(config_map["data"][MANIFEST_KEY])["digest"])


def volume_items(config_map: dict[str, Any]) -> list[dict[str, str]]:
    """``items`` restoring the tree: the manifest at the root, each file at ``repository/<path>``."""
    manifest = json.loads(config_map["data"][MANIFEST_KEY])
    items = [{"key": MANIFEST_KEY, "path": MANIFEST_KEY}]
    return items + [{"key": config_map_key(rel), "path": f"{TREE_DIR}/{rel}"} for rel in manifest["files"]]


def source_volume(config_map: dict[str, Any]) -> dict[str, Any]:
    """The pod volume projecting ``config_map`` as the copier's source tree."""
    name = config_map["metadata"]["name"]
    return {"name": "repository-source", "configMap": {"name": name, "items": volume_items(config_map)}}


def _overlaps(a: str, b: str) -> bool:
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def copier_container(spec: ModelSpec, image: str, launcher_mount: str) -> dict[str, Any]:
    """The initContainer copying the projected repository to :func:`repository_path`."""
    storage = spec.deployment.storage
    taken = [m for m in (launcher_mount, SOURCE_MOUNT, REPOSITORY_ROOT) if _overlaps(storage.mount_path, m)]
    if taken:
        raise InvalidInput(
            f"model {spec.name}: deployment.storage.mount_path {storage.mount_path} overlaps {taken[0]}",
            problems=[
                Problem(
                    f"models[{spec.name}].deployment.storage.mount_path",
                    f"{storage.mount_path} overlaps {taken[0]}, where rackctl mounts its own volume in the pod",
                    "choose another mount path (the default is /models)",
                )
            ],
        )
    return {
        "name": "repository",
        "image": image,
        "command": [
            "python3",
            f"{launcher_mount}/{COPIER_SCRIPT.name}",
            f"--source={SOURCE_MOUNT}",
            f"--dest={repository_path(spec)}",
        ],
        "volumeMounts": [
            {"name": "repository-source", "mountPath": SOURCE_MOUNT, "readOnly": True},
            {"name": "model-repository", "mountPath": REPOSITORY_ROOT},
            {"name": "launcher", "mountPath": launcher_mount, "readOnly": True},
        ],
    }


def carries_repository(deployment: dict[str, Any]) -> bool:
    """Whether a Deployment brings its model repository (the copier initContainer and the digest annotation)."""
    template = deployment.get("spec", {}).get("template", {})
    inits = [c.get("name") for c in template.get("spec", {}).get("initContainers") or []]
    return "repository" in inits and DIGEST_ANNOTATION in (template.get("metadata", {}).get("annotations") or {})
