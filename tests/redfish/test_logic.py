"""Pure logic of redfish_tools and the oob stage: no BMC needed."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bootstrap.errors import InvalidInput
from bootstrap.inventory import load_inventory
from bootstrap.oob import select_nodes, targets_for, write_mac_diff
from redfish_tools import errors as E
from redfish_tools.bios import validate_against_registry
from redfish_tools.power import plan_power
from redfish_tools.secrets import forget_secret, install_log_redaction, register_secret
from redfish_tools.tls import normalise_fingerprint

REGISTRY = {
    "BootMode": {
        "AttributeName": "BootMode",
        "Type": "Enumeration",
        "Value": [{"ValueName": "Uefi"}, {"ValueName": "Bios"}],
    },
    "SystemServiceTag": {"AttributeName": "SystemServiceTag", "Type": "String", "ReadOnly": True},
    "NumLock": {"AttributeName": "NumLock", "Type": "Integer", "LowerBound": 0, "UpperBound": 3},
}


def test_registry_validation_names_each_problem() -> None:
    problems = validate_against_registry(
        {"BootMode": "Legacy", "SystemServiceTag": "X", "Nope": "1", "NumLock": "9"}, REGISTRY
    )
    assert any(p.startswith("BootMode: 'Legacy' is not one of Uefi, Bios") for p in problems)
    assert "SystemServiceTag: read-only on this system" in problems
    assert "Nope: not a BIOS attribute of this system" in problems
    assert "NumLock: 9 is outside 0..3" in problems
    assert validate_against_registry({"BootMode": "Uefi", "NumLock": "2"}, REGISTRY) == []


@pytest.mark.parametrize(
    ("current", "action", "step"),
    [
        ("On", "on", None),
        ("Off", "on", "on"),
        ("Off", "off", None),
        ("On", "graceful-off", "graceful-off"),
        ("Off", "cycle", "on"),
        ("On", "cycle", "cycle"),
    ],
)
def test_power_plan_is_a_no_op_for_the_current_state(current: str, action: str, step: str | None) -> None:
    assert plan_power(current, action) == step


def test_error_parsing_strips_registry_prefix() -> None:
    body = {
        "error": {
            "code": "Base.1.12.GeneralError",
            "@Message.ExtendedInfo": [
                {
                    "MessageId": "IDRAC.2.8.RAC0218",
                    "Message": "The maximum number of user sessions is reached.",
                }
            ],
        }
    }
    assert E.message_id_of(body) == "RAC0218"
    err = E.SessionLimitError(
        "no session",
        bmc="n1",
        uri="/redfish/v1/SessionService/Sessions",
        status=400,
        message_id="RAC0218",
        extended_info=E.extended_info_of(body),
    )
    assert err.kind == "session_limit"
    assert "n1 /redfish/v1/SessionService/Sessions" in err.message and "RAC0218" in err.message
    assert err.as_dict()["extended_info"][0]["MessageId"] == "IDRAC.2.8.RAC0218"


def test_fingerprint_formats() -> None:
    fp = "AB:" * 31 + "CD"
    assert normalise_fingerprint(fp) == ("ab" * 31) + "cd"
    assert normalise_fingerprint("sha256:" + "ab" * 32) == "ab" * 32
    with pytest.raises(ValueError, match="not a SHA-256"):
        normalise_fingerprint("AB:CD")


def test_log_redaction_covers_the_dmtf_library_logger(caplog: pytest.LogCaptureFixture) -> None:
    install_log_redaction()
    token = "tok-9f8e7d6c5b4a"
    register_secret(token)
    try:
        with caplog.at_level(logging.DEBUG, logger="redfish.rest.v1"):
            logging.getLogger("redfish.rest.v1").debug("Headers: X-Auth-Token: %s", token)
        assert token not in caplog.text and "<redacted>" in caplog.text
    finally:
        forget_secret(token)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="redfish.rest.v1"):
        logging.getLogger("redfish.rest.v1").debug("value %s", token)
    assert token in caplog.text  # no longer registered: nothing to hide
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="redfish.rest.v1"):
        logging.getLogger("redfish.rest.v1").debug('X-Auth-Token: %s {"Password": "%s"}', token, "hunter22")
    assert token not in caplog.text and "hunter22" not in caplog.text  # redacted by shape


SAMPLE = """\
# top comment kept
cluster:
  name: lab
  domain: lab.local
  admin_ssh_keys: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKxHjvM1vQ2K0e3C0Gm7Zl0p6w1nQyBqJq2c3e4f5g6h a@b"]
  lab: true
networks:
  oob: {cidr: 10.10.0.0/24}
  pxe: {shared_with: oob}
  management: {cidr: 10.20.0.0/24}
  kubernetes: {api_vip: 10.20.0.10}
credentials:
  idrac: {username: root, password_env: RF_TEST_PW}
bmc:
  defaults: {credentials: idrac, fingerprint: "FINGERPRINT"}
nodes:
  - hostname: head-01   # the head
    role: head
    model: R660
    bmc: {address: "https://127.0.0.1:1"}
    interfaces:
      - {name: pxe0, network: pxe, fqdd: NIC.Embedded.1-1-1, ip: 10.10.0.21}
      - {name: mgmt0, network: management, ip: 10.20.0.21}
  - hostname: gpu-01
    role: worker
    model: R760xa
    gpus: {type: L40S, count: 4}
    bmc: {address: "https://127.0.0.1:2"}
    interfaces:
      - {name: pxe0, network: pxe, ip: 10.10.0.22}
      - {name: mgmt0, network: management, ip: 10.20.0.22}
"""


def test_limit_selection_and_mac_write_keep_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yml"
    path.write_text(SAMPLE.replace("FINGERPRINT", ":".join(["AB"] * 32)))
    inv = load_inventory(path)
    assert [n.hostname for n in select_nodes(inv, "worker")] == ["gpu-01"]
    assert [n.hostname for n in select_nodes(inv, "head-*,gpu-01")] == ["head-01", "gpu-01"]
    with pytest.raises(InvalidInput) as info:
        select_nodes(inv, "nope-1")
    assert "'nope-1' matches no node" in str(info.value.problems[0])
    diff = [{"node": "head-01", "interface": "pxe0", "discovered": "b0:7b:25:00:00:01"}]
    assert write_mac_diff(path, diff) == 1
    text = path.read_text()
    assert "# top comment kept" in text and "# the head" in text
    assert load_inventory(path).node("head-01").interfaces[0].mac == "b0:7b:25:00:00:01"


def test_a_credential_shared_by_every_node_is_reported_once_when_unresolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The design sample's nodes share ``credentials.idrac``: its unset variable is one problem, not five."""
    sample = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"
    monkeypatch.delenv("RACKCTL_BMC_PASSWORD", raising=False)
    inventory = load_inventory(sample)
    with pytest.raises(InvalidInput) as caught:
        targets_for(inventory, list(inventory.nodes))
    assert [p.path for p in caught.value.problems] == ["credentials.idrac.password_env"]
    assert "RACKCTL_BMC_PASSWORD is not set" in caught.value.problems[0].message
