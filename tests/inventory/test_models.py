"""Shape checks: unknown keys (with suggestions), types, formats, secrets kept out."""

from __future__ import annotations

from tests.inventory.conftest import expect, problems_of, valid


def test_sample_is_valid(data):
    result = valid(data)
    assert len(result.inventory.nodes) == 5
    assert [n.hostname for n in result.inventory.control_planes] == ["head-01", "cp-02", "cp-03"]


def test_unknown_key_suggests_the_right_one(data):
    data["nodes"][0]["bmc"]["adress"] = data["nodes"][0]["bmc"].pop("address")
    expect(data, "nodes[0].bmc.adress", "unknown key 'adress'", "did you mean 'address'?")


def test_unknown_top_level_key(data):
    data["netwerks"] = {}
    expect(data, "netwerks", "unknown key", "did you mean 'networks'?")


def test_plain_password_is_refused_without_echoing_it(data):
    data["credentials"]["idrac"]["password"] = "calvin-secret"
    problem = expect(data, "credentials.idrac.password", "passwords never go in the inventory", "password_env")
    assert "calvin-secret" not in str(problem)


def test_missing_required_key_names_it(data):
    del data["networks"]["kubernetes"]
    expect(data, "networks.kubernetes", "required key 'kubernetes' is missing")


def test_bad_ip_shows_value(data):
    data["nodes"][1]["interfaces"][0]["ip"] = "10.10.0.300"
    expect(data, "nodes[1].interfaces[0].ip", "'10.10.0.300'")


def test_bad_mac_format(data):
    data["nodes"][1]["interfaces"][0]["mac"] = "b0:7b:25:zz:00:01"
    expect(data, "nodes[1].interfaces[0].mac", "not a MAC address")


def test_mac_is_normalised(data):
    data["nodes"][1]["interfaces"][0]["mac"] = "B0-7B-25-00-00-01"
    assert valid(data).inventory.nodes[1].interfaces[0].mac == "b0:7b:25:00:00:01"


def test_role_must_be_known(data):
    data["nodes"][3]["role"] = "wroker"
    expect(data, "nodes[3].role", "head", "worker")


def test_hostname_format(data):
    data["nodes"][3]["hostname"] = "GPU_01"
    expect(data, "nodes[3].hostname", "not a valid hostname")


def test_service_tag_format(data):
    data["nodes"][3]["service_tag"] = "TOO-LONG-TAG"
    expect(data, "nodes[3].service_tag", "7 letters or digits")


def test_fingerprint_format(data):
    data["nodes"][0]["bmc"]["fingerprint"] = "12:34"
    expect(data, "nodes[0].bmc.fingerprint", "SHA-256")


def test_plain_http_bmc_refused(data):
    data["nodes"][0]["bmc"]["address"] = "http://10.10.0.11"
    expect(data, "nodes[0].bmc.address", "https")


def test_credential_needs_exactly_one_source(data):
    data["credentials"]["idrac"]["password_file"] = "secrets.yml"
    expect(data, "credentials.idrac", "exactly one of password_env or password_file")


def test_private_key_is_not_an_admin_key(data):
    data["cluster"]["admin_ssh_keys"] = ["-----BEGIN OPENSSH PRIVATE KEY-----"]
    expect(data, "cluster.admin_ssh_keys", "not an SSH public key")


def test_cidr_with_host_bits(data):
    data["networks"]["management"]["cidr"] = "10.20.0.5/24"
    expect(data, "networks.management.cidr", "host bits set", "10.10.0.0/24")


def test_dhcp_range_reversed(data):
    data["networks"]["pxe"]["dhcp_range"] = {"start": "10.10.0.250", "end": "10.10.0.200"}
    expect(data, "networks.pxe.dhcp_range", "swap them")


def test_all_problems_reported_at_once(data):
    data["nodes"][0]["hostname"] = "Bad_Name"
    data["nodes"][1]["interfaces"][0]["ip"] = "nope"
    data["cluster"]["name"] = "Has Spaces"
    paths = {p.path for p in problems_of(data)}
    assert {"nodes[0].hostname", "nodes[1].interfaces[0].ip", "cluster.name"} <= paths
