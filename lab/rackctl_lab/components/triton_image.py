"""The lab's Triton image: the real tritonserver on CPU, under the name rackctl's Deployment runs.

rackctl's Triton Deployment runs NGC's ``nvcr.io/nvidia/tritonserver:<YY.MM>-trtllm-python-py3``
(:attr:`bootstrap.inventory.trtllm.VersionInfo.image`), which cannot be had here. The lab assembles an image
of that name from what the project already installs: the ``tritonserver`` of the nvidia-pytriton wheel (the
same one ``rackctl triton load-check`` runs; :func:`bootstrap.triton.server.find_tritonserver`) with its
Python backend and the stub for Debian bookworm's Python 3.11, laid out as NGC's image lays it out
(``/opt/tritonserver/bin``, ``backends/python``, ``lib``), on a Debian bookworm minbase layer with Python,
numpy and PyYAML (what rackctl's launcher, copier and LLM-API model import). The GPU-only part,
``tensorrt_llm``, is the lab's STAND-IN (:mod:`rackctl_lab.components.trtllm_standin`). Cached like the
cluster's images, keyed by every file's digest.
"""

from __future__ import annotations

from pathlib import Path

from bootstrap.triton.server import find_tritonserver
from rackctl_lab.components import trtllm_standin
from rackctl_lab.components.images import PATH_ENV, Image, ImageRecipe, assemble_one

#: What rackctl's launcher (``python3``), copier and LLM-API model (numpy, yaml) need, and the stub's libpython
PACKAGES = ("python3", "python3-numpy", "python3-yaml", "libpython3.11")
#: The stub must match the image's Python (Debian bookworm's)
IMAGE_PYTHON = "3.11"
ROOT = "opt/tritonserver"
STANDIN_PATH = f"usr/local/lib/python{IMAGE_PYTHON}/dist-packages/tensorrt_llm/__init__.py"
ENV = (
    PATH_ENV.replace("PATH=", f"PATH=/{ROOT}/bin:"),
    f"LD_LIBRARY_PATH=/{ROOT}/lib",
)


def recipe(ref: str) -> ImageRecipe:
    """The image named ``ref`` (NGC's name for a release): this machine's tritonserver and the stand-in."""
    install = find_tritonserver()
    stub = install.stub.parent.parent / IMAGE_PYTHON / install.stub.name
    files = [(f"{ROOT}/bin/tritonserver", install.binary)]
    files += [(f"{ROOT}/backends/python/{f.name}", f) for f in sorted(install.python_backend.iterdir()) if f.is_file()]
    files += [(f"{ROOT}/backends/python/triton_python_backend_stub", stub)]
    files += [(f"{ROOT}/lib/{f.name}", f) for f in sorted(install.libs.iterdir()) if f.is_file()]
    files += [(STANDIN_PATH, Path(trtllm_standin.__file__))]
    repository, _, tag = ref.rpartition(":")
    registry, _, name = repository.partition("/")
    return ImageRecipe(
        name, tag, (), registry=registry, base_packages=PACKAGES, files=tuple((p, str(s)) for p, s in files), env=ENV
    )


def triton_image(ref: str) -> Image:
    """The lab's Triton image named ``ref``, assembled (or from the cache)."""
    return assemble_one(recipe(ref), {})
