"""The rendered kubeadm configs, their placeholders filled as rackctl's roles fill them, read by the REAL kubeadm
of the pinned release (``kubeadm config validate``, built from its Go module).

The roles put the bootstrap token, the certificate key and the CA's hash in place of ``${KUBEADM_...}`` with
plain text substitution. A certificate key is hex: one of digits only (as the host side's dummy was) was read
by kubeadm as a number and the config refused ("cannot unmarshal number into Go struct field
InitConfiguration.certificateKey of type string"), first seen on the native lab cluster. The placeholders
are rendered quoted, so whatever characters fill them stay a string.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bootstrap.cluster.kubeadm_api import CERT_KEY_PLACEHOLDER, TOKEN_PLACEHOLDER
from bootstrap.cluster.render import render_cluster
from bootstrap.inventory.loader import load_inventory

SAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"
#: secrets of the right shapes whose characters YAML would read as numbers were they unquoted
FILLED = {
    TOKEN_PLACEHOLDER: "123456.0123456789012345",
    CERT_KEY_PLACEHOLDER: "0" * 64,
    "${KUBEADM_CA_CERT_HASH}": "sha256:" + "1" * 64,
}


@pytest.mark.parametrize("node", ["head-01", "cp-02", "gpu-l40s-01"])
def test_the_real_kubeadm_accepts_each_config_whatever_digits_fill_its_placeholders(
    kube_components: dict[str, Path], tmp_path: Path, node: str
) -> None:
    text = next(f for f in render_cluster(load_inventory(SAMPLE)).files if f.path == f"kubeadm/{node}.yaml").content()
    for placeholder, value in FILLED.items():
        text = text.replace(placeholder, value)
    assert "${" not in text
    config = tmp_path / "kubeadm.yaml"
    config.write_text(text)
    proc = subprocess.run(
        [str(kube_components["kubeadm"]), "config", "validate", "--config", str(config)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
