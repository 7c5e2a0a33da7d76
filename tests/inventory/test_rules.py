"""One test (at least) per cross-field rule, each asserting the message and the fix.

Every rule in ``bootstrap.inventory.rules.RULES`` must be named in a ``@covers`` marker here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bootstrap.inventory.rules import RULES
from tests.inventory.conftest import expect, problems_of, valid

COVERED: set[str] = set()


def covers(name: str):
    """Mark a test as covering the rule ``name``."""
    COVERED.add(name)
    return lambda f: f


def _iface(data, node, net):
    return next(i for i in data["nodes"][node]["interfaces"] if i["network"] == net)


@covers("unique-hostnames")
def test_duplicate_hostname(data):
    data["nodes"][4]["hostname"] = "cp-02"
    expect(data, "nodes[4].hostname", "duplicate hostname cp-02", "nodes[1].hostname")


@covers("unique-service-tags")
def test_duplicate_service_tag(data):
    data["nodes"][4]["service_tag"] = "CP02R66"
    expect(data, "nodes[4].service_tag", "duplicate service tag CP02R66")


@covers("unique-macs")
def test_duplicate_mac(data):
    _iface(data, 0, "pxe")["mac"] = "b0:7b:25:00:00:01"
    _iface(data, 3, "pxe")["mac"] = "B0:7B:25:00:00:01"
    expect(data, "nodes[3].interfaces[0].mac", "duplicate MAC b0:7b:25:00:00:01")


@covers("unique-ips")
def test_duplicate_ip(data):
    _iface(data, 4, "management")["ip"] = "10.20.0.21"
    expect(data, "nodes[4].interfaces[1].ip", "duplicate IP 10.20.0.21")


@covers("unique-bmc-addresses")
def test_duplicate_bmc(data):
    data["nodes"][2]["bmc"]["address"] = "10.10.0.11"
    expect(data, "nodes[2].bmc.address", "duplicate BMC address")


@covers("unique-interface-names")
def test_duplicate_interface_name_and_unknown_bond_member(data):
    data["nodes"][3]["interfaces"][2]["name"] = "mgmt0"
    expect(data, "nodes[3].interfaces", "'mgmt0' used twice")
    data["nodes"][3]["interfaces"][2]["name"] = "stor0"
    data["nodes"][3]["bonds"] = [{"name": "bond0", "members": ["stor0", "stor1"], "network": "storage"}]
    expect(data, "nodes[3].bonds[0].members", "'stor1' is not an interface", "did you mean 'stor0'?")


@covers("network-definitions")
def test_network_without_cidr_and_gateway_outside(data):
    del data["networks"]["storage"]["cidr"]
    expect(data, "networks.storage.cidr", "no cidr", "shared_with")
    data["networks"]["storage"]["cidr"] = "10.30.0.0/24"
    data["networks"]["management"]["gateway"] = "10.21.0.1"
    expect(data, "networks.management.gateway", "outside 10.20.0.0/24")


@covers("network-definitions")
def test_shared_network_with_other_cidr(data):
    data["networks"]["pxe"]["cidr"] = "10.11.0.0/24"
    expect(data, "networks.pxe.cidr", "differs from oob's 10.10.0.0/24")


@covers("network-definitions")
def test_dhcp_range_outside_pxe(data):
    data["networks"]["pxe"]["dhcp_range"]["end"] = "10.11.0.5"
    expect(data, "networks.pxe.dhcp_range.end", "outside 10.10.0.0/24")


@covers("ips-inside-networks")
def test_ip_outside_its_network(data):
    _iface(data, 3, "management")["ip"] = "10.30.0.50"
    expect(data, "nodes[3].interfaces[1].ip", "outside the management network 10.20.0.0/24")


@covers("ips-inside-networks")
@pytest.mark.parametrize(
    ("ip", "what"),
    [("10.20.0.0", "network address"), ("10.20.0.255", "broadcast"), ("10.20.0.1", "gateway")],
)
def test_ip_on_reserved_address(data, ip, what):
    _iface(data, 3, "management")["ip"] = ip
    expect(data, "nodes[3].interfaces[1].ip", what, "pick a host address")


@covers("ips-inside-networks")
def test_ip_equal_to_vip(data):
    _iface(data, 3, "management")["ip"] = "10.20.0.10"
    expect(data, "nodes[3].interfaces[1].ip", "Kubernetes API virtual IP")


@covers("api-vip")
def test_vip_outside_management(data):
    data["networks"]["kubernetes"]["api_vip"] = "10.30.0.10"
    expect(data, "networks.kubernetes.api_vip", "outside the management network")


@covers("dhcp-range-vs-static")
def test_dhcp_range_overlaps_static(data):
    _iface(data, 3, "pxe")["ip"] = "10.10.0.210"
    expect(data, "nodes[3].interfaces[0].ip", "inside the PXE DHCP range", "shrink networks.pxe.dhcp_range")


@covers("dhcp-range-vs-static")
def test_dhcp_range_overlaps_bmc_on_shared_segment(data):
    data["nodes"][3]["bmc"]["address"] = "10.10.0.201"
    expect(data, "nodes[3].bmc.address", "inside the PXE DHCP range")


@covers("networks-overlap")
def test_overlapping_networks(data):
    data["networks"]["storage"]["cidr"] = "10.20.0.0/23"
    expect(data, "networks.storage", "overlaps networks.management")


@covers("networks-overlap")
def test_pod_cidr_overlaps(data):
    data["networks"]["kubernetes"]["pod_cidr"] = "10.0.0.0/8"
    expect(data, "networks.kubernetes.pod_cidr", "overlaps networks.oob")


@covers("control-planes")
def test_even_number_of_control_planes(data):
    data["nodes"][2]["role"] = "worker"
    expect(data, "nodes", "2 control plane(s)", "odd number")


@covers("control-planes")
def test_single_control_plane_needs_lab_flag(data):
    data["nodes"][1]["role"] = "worker"
    data["nodes"][2]["role"] = "worker"
    expect(data, "nodes", "1 control plane(s)", "cluster.lab: true")
    data["cluster"]["lab"] = True
    result = valid(data)
    assert any("single control plane" in w.message for w in result.warnings)


@covers("control-planes")
def test_exactly_one_head(data):
    data["nodes"][1]["role"] = "head"
    expect(data, "nodes", "2 nodes have role head")


@covers("hardware-models")
def test_unknown_model(data):
    data["nodes"][4]["model"] = "XE9860"
    expect(data, "nodes[4].model", "unknown hardware model 'XE9860'", "did you mean 'XE9680'?")


@covers("hardware-models")
def test_gpu_count_contradicts_model(data):
    data["nodes"][4]["gpus"] = {"type": "H100-SXM", "count": 4}
    expect(data, "nodes[4].gpus.count", "XE9680 has 8 GPUs, not 4")


@covers("hardware-models")
def test_gpu_type_contradicts_model(data):
    data["nodes"][3]["gpus"] = {"type": "H100-SXM", "count": 4}
    expect(data, "nodes[3].gpus.type", "does not carry 'H100-SXM'", "L40S, H100-PCIe")


@covers("hardware-models")
def test_r760xa_must_say_which_gpus(data):
    del data["nodes"][3]["gpus"]
    expect(data, "nodes[3].gpus", "say which this node has")


@covers("hardware-models")
def test_role_not_allowed_for_model(data):
    data["nodes"][4]["role"] = "control-plane"
    data["nodes"][2]["role"] = "worker"
    expect(data, "nodes[4].role", "XE9680 cannot be a control-plane")


@covers("hardware-models")
def test_custom_hardware_model_extends_builtins(data):
    data["hardware_models"] = {
        "R760xa-2l40s": {
            "redfish_model": "PowerEdge R760xa",
            "roles": ["worker"],
            "gpu_types": ["L40S"],
            "gpu_counts": [2],
        }
    }
    data["nodes"][3]["model"] = "R760xa-2l40s"
    data["nodes"][3]["gpus"] = {"type": "L40S", "count": 2}
    inv = valid(data).inventory
    assert inv.gpus_of(inv.nodes[3]).count == 2


@covers("mig-profiles")
def test_mig_on_l40s_refused(data):
    data["nodes"][3]["mig_profile"] = "all-1g.10gb"
    expect(data, "nodes[3].mig_profile", "L40S GPUs do not support MIG")


@covers("mig-profiles")
def test_unknown_mig_profile(data):
    data["nodes"][4]["mig_profile"] = "all-1g.10g"
    expect(data, "nodes[4].mig_profile", "unknown MIG profile", "did you mean 'all-1g.10gb'?")
    data["nodes"][4]["mig_profile"] = "all-1g.10gb"
    assert valid(data).inventory.nodes[4].mig_profile == "all-1g.10gb"


@covers("bios-profiles")
def test_unknown_bios_profile(data):
    data["nodes"][3]["bios_profile"] = "gpu-wroker"
    expect(data, "nodes[3].bios_profile", "unknown BIOS profile", "did you mean 'gpu-worker'?")


@covers("node-networks")
def test_node_without_pxe_or_management(data):
    data["nodes"][3]["interfaces"] = [i for i in data["nodes"][3]["interfaces"] if i["network"] == "storage"]
    expect(data, "nodes[3].interfaces", "no interface with an IP on the pxe network")
    assert any("management network" in p.message for p in problems_of(data))


@covers("node-networks")
def test_missing_mac_is_a_warning(data):
    result = valid(data)
    assert any("has no MAC yet" in w.message and "discover --write" in w.fix for w in result.warnings)


@covers("labels-and-taints")
def test_invalid_label_and_taint(data):
    data["nodes"][3]["labels"] = {"bad key!": "x"}
    expect(data, "nodes[3].labels.bad key!", "invalid label key")
    data["nodes"][3]["labels"] = {"ok": "not valid value!"}
    expect(data, "nodes[3].labels.ok", "invalid label value")


@covers("bmc-access")
def test_bmc_without_tls_verification(data):
    del data["nodes"][3]["bmc"]["fingerprint"]
    expect(data, "nodes[3].bmc", "no way to verify the TLS certificate", "insecure: true explicitly")
    data["nodes"][3]["bmc"]["insecure"] = True
    assert any("TLS verification is off" in w.message for w in valid(data).warnings)


@covers("bmc-credentials-defined")
def test_bmc_credentials_undefined(data):
    data["nodes"][3]["bmc"]["credentials"] = "idracc"
    expect(data, "nodes[3].bmc.credentials", "not defined", "did you mean 'idrac'?")


@covers("bmc-credentials-defined")
def test_an_undefined_name_in_the_defaults_or_a_group_is_said_once_where_it_is_set(data):
    data["bmc"]["defaults"]["credentials"] = "idracc"  # every node inherits it: one error, at the defaults
    problems = [p for p in problems_of(data) if "not defined under" in p.message]
    assert [p.path for p in problems] == ["bmc.defaults.credentials"], [str(p) for p in problems]
    hostnames = [n["hostname"] for n in data["nodes"]]
    assert f"(BMCs of {', '.join(hostnames)})" in problems[0].message and "did you mean 'idrac'?" in problems[0].fix
    data["bmc"]["defaults"]["credentials"] = "idrac"
    data["bmc"]["groups"] = {"worker": {"credentials": "gpu-bmcs"}}  # a role's group: said at the group
    workers = [n["hostname"] for n in data["nodes"] if n["role"] == "worker"]
    problem = expect(data, "bmc.groups.worker.credentials", "'gpu-bmcs' are not defined", ", ".join(workers))
    assert len([p for p in problems_of(data) if "not defined under" in p.message]) == 1, problem


@covers("bmc-access")
def test_bmc_group_defaults_apply(data):
    data["bmc"]["defaults"] = {}
    expect(data, "nodes[0].bmc.credentials", "no BMC credentials")
    data["bmc"]["groups"] = {"R660": {"credentials": "idrac"}, "worker": {"credentials": "idrac"}}
    valid(data)


@covers("bmc-access")
def test_bmc_outside_oob_and_loopback(data):
    data["nodes"][3]["bmc"]["address"] = "10.20.0.99"
    expect(data, "nodes[3].bmc.address", "outside the OOB network")
    data["nodes"][3]["bmc"]["address"] = "127.0.0.1:8443"
    expect(data, "nodes[3].bmc.address", "loopback", "cluster.lab")


@covers("bmc-access")
def test_ca_file_is_checked_as_text_not_on_this_machine(data, tmp_path):
    for node in data["nodes"]:
        node["bmc"].pop("fingerprint")
    expect(data, "nodes[0].bmc", "no way to verify the TLS certificate", "set ca_file or fingerprint")
    data["bmc"]["defaults"]["ca_file"] = "certs/ca.pem"  # does not exist: preflight's business, not a rule's
    assert not (tmp_path / "certs").exists()
    valid(data, tmp_path / "cluster.yml")


@covers("credential-sources")
def test_password_file_is_checked_as_text_not_on_this_machine(data, tmp_path):
    secret = tmp_path / "bmc.secret"
    data["credentials"]["idrac"] = {"username": "root", "password_file": "bmc.secret"}
    source = tmp_path / "cluster.yml"
    valid(data, source)  # the file does not exist
    secret.write_text("calvin\n")
    os.chmod(secret, 0o644)
    valid(data, source)  # nor does its mode matter to validation
    data["credentials"]["idrac"]["password_file"] = "."
    expect(data, "credentials.idrac.password_file", "is not a file path", "name the file")


@covers("credential-sources")
def test_password_env_is_not_read_by_validation(data, monkeypatch):
    monkeypatch.delenv("RACKCTL_BMC_PASSWORD")
    result = valid(data)
    assert not [w for w in result.warnings if "RACKCTL_BMC_PASSWORD" in f"{w.message} {w.fix}"]


@covers("software-versions")
def test_unknown_profile(data):
    data["cluster"]["software_profile"] = "dell-dvd"
    expect(data, "cluster.software_profile", "unknown profile", "did you mean 'dell-dvd-2024'?")


@covers("software-versions")
def test_design_guide_profile_flags_its_corrections(data):
    data["cluster"]["software_profile"] = "dell-dvd-2024"
    warnings = [w.message for w in valid(data).warnings]
    assert any("525.60.13" in w for w in warnings)
    assert any("defaultRuntime to docker" in w for w in warnings)
    assert any("23.04 has no TensorRT-LLM backend" in w for w in warnings)


@covers("software-versions")
def test_kubeadm_api_contradicts_kubernetes(data):
    data["cluster"]["versions"] = {"kubernetes": "1.27.6", "kubeadm_api": "kubeadm.k8s.io/v1beta4"}
    expect(data, "cluster.versions.kubeadm_api", "uses kubeadm.k8s.io/v1beta3")


@covers("software-versions")
def test_operator_default_driver_too_old_for_triton(data):
    data["cluster"]["software_profile"] = "dell-dvd-2024"
    data["cluster"]["versions"] = {"nvidia_driver": "525.60.13"}
    expect(data, "cluster.versions.nvidia_driver", "older than 525.85", "Triton 24.02")


@covers("software-versions")
def test_triton_must_match_trtllm(data):
    data["cluster"]["versions"] = {"triton": "24.10"}
    expect(data, "cluster.versions.triton", "does not match TensorRT-LLM 1.1.0", "25.12")


@covers("software-versions")
def test_triton_without_trtllm_backend(data):
    data["cluster"]["versions"] = {"triton": "23.04", "trtllm": "0.8.0"}
    problems = [p for p in problems_of(data) if p.path == "cluster.versions.triton"]
    assert any("has no TensorRT-LLM backend" in p.message for p in problems)


@covers("software-versions")
def test_a_release_after_the_engine_backend_is_paired_by_its_container_and_driver_checked(data):
    # trtllm 26.07 names the Triton container itself: it pairs with Triton 26.07 and nothing else
    data["cluster"]["versions"] = {"triton": "26.07", "trtllm": "26.07", "nvidia_driver": "580.95.05"}
    result = valid(data)
    assert not [w for w in result.warnings if w.path == "cluster.versions.trtllm"]
    # its notes name no driver: at CUDA 13's minor-version compatibility floor it runs, with a warning
    [warning] = [w for w in result.warnings if w.path == "cluster.versions.nvidia_driver"]
    assert "Triton 26.07 (CUDA 13.3.1)" in warning.message and "name no driver" in warning.message
    data["cluster"]["versions"] = {"triton": "25.12", "trtllm": "26.07"}
    expect(data, "cluster.versions.triton", "does not match TensorRT-LLM 26.07", "set triton: '26.07'")
    data["cluster"]["versions"] = {"triton": "26.07", "trtllm": "26.07", "nvidia_driver": "575.57.08"}
    expect(data, "cluster.versions.nvidia_driver", "575.57.08 is too old for Triton 26.07", "580 or later")


@covers("software-versions")
def test_unknown_version_key(data):
    data["cluster"]["versions"] = {"kubernets": "1.30.1"}
    expect(data, "cluster.versions.kubernets", "did you mean 'kubernetes'?")


@covers("fabric-manager")
def test_fabric_manager_groups_and_custom_nvswitch(data):
    from bootstrap.inband.render import groups

    inv = valid(data).inventory
    assert groups(inv)["fabric_manager"] == ["gpu-xe9680-01"]
    data["hardware_models"] = {
        "odd": {
            "redfish_model": "X",
            "roles": ["worker"],
            "gpu_types": ["L40S"],
            "gpu_counts": [4],
            "nvswitch": True,
        }
    }
    expect(data, "hardware_models.odd.nvswitch", "NVSwitch with non-SXM GPUs")


@covers("supported-versions")
def test_a_kubernetes_release_past_its_end_of_life_is_a_warning_naming_the_field(data):
    """1.33 ended 2026-06-28: the file stays valid and the warning names the field, the date and the fix."""
    data["cluster"]["versions"] = {"kubernetes": "1.33.5"}
    result = valid(data)
    found = [w for w in result.warnings if w.path == "cluster.versions.kubernetes"]
    assert len(found) == 1 and "end of life on 2026-06-28" in found[0].message
    assert "1.33.5:" in found[0].message and "profile current: 1.37.2" in found[0].fix


@covers("supported-versions")
def test_a_gpu_operator_past_support_and_a_profiles_old_release_are_warnings(data):
    data["cluster"]["versions"] = {"gpu_operator": "v25.10.0"}
    found = [w for w in valid(data).warnings if w.path == "cluster.versions.gpu_operator"]
    assert len(found) == 1 and "past NVIDIA's support" in found[0].message and "v26.7.0" in found[0].fix
    data["cluster"]["versions"] = {}
    data["cluster"]["software_profile"] = "dell-dvd-2024"  # 1.27.6, v22.9.2: both long past
    warnings = {w.path: w for w in valid(data).warnings}
    assert "(from profile dell-dvd-2024)" in warnings["cluster.versions.kubernetes"].message
    assert "past NVIDIA's support" in warnings["cluster.versions.gpu_operator"].message


@covers("supported-versions")
def test_the_default_profile_is_supported(data):
    """The shipped default carries no end-of-life warning (on the day its dates were read)."""
    from datetime import date

    from bootstrap.inventory.profiles import PROFILES
    from bootstrap.inventory.rules import support_findings

    current = PROFILES["current"].versions
    assert list(support_findings(current, date(2026, 11, 27), "current", set())) == []
    later = [f.problem.path for f in support_findings(current, date(2027, 10, 28), "current", set())]
    assert later == ["cluster.versions.kubernetes"]  # 1.37's own end of life


@covers("operator-driver-image")
def test_an_os_without_published_driver_images_refuses_the_operator_driver(data):
    """Debian 12: NVIDIA publishes no driver image, so the operator's driver is refused naming the field and
    both fixes; the host driver path on every GPU model is accepted."""
    data["cluster"]["versions"] = {"os": "debian-12"}
    problem = expect(data, "cluster.versions.os", "nvcr.io/nvidia/driver:<version>-debian12", "R760xa, XE9680")
    assert "nvidia.profiles.R760xa.driver: host" in problem.fix
    data["nvidia"] = {"profiles": {"R760xa": {"driver": "host"}}}
    expect(data, "cluster.versions.os", "XE9680 use it")
    data["nvidia"]["profiles"]["XE9680"] = {"driver": "host"}
    valid(data)
    data["cluster"]["versions"] = {"os": "ubuntu-22.04"}
    data["nvidia"] = {}
    valid(data)


def test_every_rule_has_a_test():
    assert set(RULES) - COVERED == set(), "rules without a test"


def test_rules_directory_relative_paths(data, tmp_path):
    """Paths in the inventory resolve against the inventory file, not the working directory."""
    source = Path(tmp_path) / "sub" / "cluster.yml"
    inv = valid(data, source).inventory
    assert inv.resolve_path(Path("x.pem")) == (tmp_path / "sub" / "x.pem").resolve()


def _model(name: str, product: str, tp: int = 1) -> dict:
    return {
        "name": name,
        "trtllm_version": "1.1.0",
        "hf_model_dir": "/models/llama",
        "tokenizer_dir": "/models/llama",
        "engine_dir": "/models/engines/llama",
        "tensor_parallelism": tp,
        "deployment": {"gpu_product": product},
    }


@covers("served-models")
def test_model_names_unique_and_gpu_product_present(data):
    data["models"] = [_model("llama", "NVIDIA-L40S"), _model("llama", "NVIDIA-H100-80GB-HBM3", tp=8)]
    expect(data, "models[1].name", "also models[0]", "rename one")
    data["models"] = [_model("llama", "NVIDIA-H100-PCIe")]
    expect(data, "models[0].deployment.gpu_product", "no node has 'NVIDIA-H100-PCIe' GPUs")
    data["models"] = [_model("llama", "NVIDIA-L40S", tp=8)]
    expect(data, "models[0].tensor_parallelism", "needs 8 GPUs", "at most 4")
    data["models"] = [_model("llama", "NVIDIA-L40S", tp=4), _model("big", "NVIDIA-H100-80GB-HBM3", tp=8)]
    assert [m.name for m in valid(data).inventory.models] == ["llama", "big"]


def _served(name: str, hf_model_dir: str, source_dir: str | None = None, **storage: str) -> dict:
    model = {
        "name": name,
        "trtllm_version": "1.1.0",
        "layout": "llmapi",
        "hf_model_dir": hf_model_dir,
        "tensor_parallelism": 2,
        "deployment": {"gpu_product": "NVIDIA-L40S", "storage": storage},
    }
    return model | ({"source_dir": source_dir} if source_dir else {})


@covers("model-storage")
def test_model_directories_on_the_nodes_are_each_their_own(data):
    data["models"] = [_served("a", "/models/llama"), _served("b", "/models/llama/lora")]
    expect(data, "models[1].hf_model_dir", "/mnt/nvme/rackctl-models/llama/lora", "models[0]'s", "nest", "beside")
    data["models"] = [_served("a", "/models/llama", "/srv/a"), _served("b", "/models/llama", "/srv/b")]
    expect(data, "models[1].source_dir", "share the node directory", "/srv/a, /srv/b", "the same source_dir")
    # One directory served twice (other settings) from one source, or models side by side: fine.
    data["models"] = [
        _served("a", "/models/llama", "/srv/a"),
        _served("b", "/models/llama", "/srv/a"),
        _served("c", "/models/llama-2"),
        _served("d", "/models/llama", kind="nfs", nfs_server="10.30.0.5", nfs_path="/ifs/m"),
    ]
    assert [m.name for m in valid(data).inventory.models] == ["a", "b", "c", "d"]


@covers("model-storage")
def test_an_nfs_export_by_address_is_on_the_storage_network(data):
    data["models"] = [_served("a", "/models/llama", kind="nfs", nfs_server="10.20.0.5", nfs_path="/ifs/m")]
    [warning] = [w for w in valid(data).warnings if w.path == "models[0].deployment.storage.nfs_server"]
    assert "10.20.0.5 is not on the storage network 10.30.0.0/24" in warning.message
    assert warning.fix == "use the export's address on the storage network"
    for server in ("10.30.0.5", "powerscale.storage.example.com"):
        data["models"][0]["deployment"]["storage"]["nfs_server"] = server
        assert not [w for w in valid(data).warnings if w.path.startswith("models[0]")]


@covers("model-containers")
def test_the_driver_is_checked_against_each_models_own_container(data):
    data["models"][1]["trtllm_version"] = "26.07"  # the cluster stays on Triton 25.12 (profile current)
    [warning] = [w for w in valid(data).warnings if w.path.startswith("models[")]
    assert warning.path == "models[1].trtllm_version"
    assert "26.07-trtllm-python-py3" in warning.message and "name no driver" in warning.message
    # the design guide's stack (driver 535.161.08) cannot start the 25.12 and 26.07 containers
    data["cluster"]["software_profile"] = "dell-dvd-2024"
    found = {w.path: w for w in valid(data).warnings if w.path.startswith("models[")}
    assert set(found) == {"models[0].trtllm_version", "models[1].trtllm_version"}
    assert "25.12-trtllm-python-py3, which would not start" in found["models[0].trtllm_version"].message
    assert "535.161.08 is too old for Triton 26.07" in found["models[1].trtllm_version"].message
    assert "pin cluster.versions.nvidia_driver to 580 or later" in found["models[1].trtllm_version"].fix
    # a model in the cluster's own container is left to the software-versions rule
    data["cluster"]["software_profile"] = "current"
    data["models"][1]["trtllm_version"] = "1.1.0"
    assert not [w for w in valid(data).warnings if w.path.startswith("models[")]


@covers("model-containers")
def test_a_1_0_or_1_2_model_is_checked_against_the_container_that_carries_it(data):
    # 1.2.1 runs in 26.04-trtllm-python-py3 (CUDA 13.1.0.036, driver 590.44.01 in Triton's matrix): the
    # profile's 580.95.05 runs it only through CUDA 13's minor-version compatibility, a warning
    data["models"][1]["trtllm_version"] = "1.2.1"
    [warning] = [w for w in valid(data).warnings if w.path.startswith("models[")]
    assert warning.path == "models[1].trtllm_version"
    assert "26.04-trtllm-python-py3" in warning.message and "minor-version compatibility" in warning.message
    # 1.0.0 runs in 25.09 (CUDA 12.9.1.010, driver 575.57.08): 580.95.05 is newer, nothing to say
    data["models"][1]["trtllm_version"] = "1.0.0"
    assert not [w for w in valid(data).warnings if w.path.startswith("models[")]
    # the design guide's 535.161.08 is below 25.12's floor (models[0]); for 25.09 it is above CUDA 12's 525
    data["cluster"]["software_profile"] = "dell-dvd-2024"
    found = {w.path: w for w in valid(data).warnings if w.path.startswith("models[")}
    assert "25.09-trtllm-python-py3" in found["models[1].trtllm_version"].message
    assert "would not start" not in found["models[1].trtllm_version"].message


@covers("firmware-baseline")
def test_firmware_baseline(data):
    data["firmware"] = {"baseline": {"R66O": {"bios": "1.6.2"}}}
    expect(data, "firmware.baseline.R66O", "unknown hardware model", "did you mean 'R660'?")
    data["firmware"] = {"baseline": {"R660": {"bios": "latest"}}}
    expect(data, "firmware.baseline.R660.bios", "not a version")
    data["firmware"] = {"baseline": {"R660": {"bios": "1.6.2", "idrac": "7.00.00.00"}}}
    assert valid(data).inventory.firmware.baseline["R660"].bios == "1.6.2"


@covers("bmc-address-vs-host-ips")
def test_bmc_address_equal_to_another_nodes_pxe_ip(data):
    data["nodes"][2]["bmc"]["address"] = "https://10.10.0.21:443"
    expect(data, "nodes[2].bmc.address", "10.10.0.21", "nodes[0].interfaces[0].ip", "pxe", "own address")


@covers("bmc-address-vs-host-ips")
def test_bmc_address_equal_to_own_management_ip(data):
    data["nodes"][1]["bmc"]["address"] = "10.20.0.22"
    expect(data, "nodes[1].bmc.address", "its own management address")


@covers("network-attachments")
def test_vlan_mtu_and_bond_members_must_fit_their_networks(data):
    stor = _iface(data, 3, "storage")
    stor["vlan"] = 31
    expect(data, "nodes[3].interfaces[2].vlan", "stor0 tags VLAN 31", "storage network is VLAN 30", "drop the vlan")
    del data["networks"]["storage"]["vlan"]
    expect(data, "nodes[3].interfaces[2].vlan", "storage network has no VLAN", "set networks.storage.vlan: 31")
    del stor["vlan"]
    stor["mtu"] = 1500
    expect(data, "nodes[3].interfaces[2].mtu", "MTU 1500, smaller than the storage network's MTU 9000", "raise")
    stor["mtu"] = 9000
    data["nodes"][3]["interfaces"] += [
        {"name": "stor1", "fqdd": "NIC.Slot.1-2-1", "mtu": 1500},
        {"name": "stor2", "fqdd": "NIC.Slot.1-3-1", "ip": "10.30.0.99", "network": "storage"},
    ]
    data["nodes"][3]["bonds"] = [
        {"name": "bond0", "members": ["stor1", "stor2"], "network": "storage", "ip": "10.30.0.98"},
        {"name": "bond1", "members": ["stor1"], "network": "storage"},
    ]
    found = [str(p) for p in problems_of(data) if p.path.startswith("nodes[3].bonds")]
    text = "\n".join(found)
    assert "bond member stor1 has MTU 1500, smaller than the storage network's MTU 9000" in text
    assert "bond member stor2 has its own network/ip (storage, 10.30.0.99)" in text
    assert "stor1 is a member of bond0 and bond1" in text


@covers("cluster-dns-upstream")
def test_no_name_server_for_the_nodes_is_a_warning_naming_coredns(data):
    """Static addresses give the nodes no resolver but cluster.dns_servers; CoreDNS then has no upstream (the
    real cluster test met it: "plugin/forward: no valid upstream addresses found")."""
    assert not [w for w in valid(data).warnings if w.path == "cluster.dns_servers"]  # the example lists one
    data["cluster"]["dns_servers"] = []
    (found,) = [w for w in valid(data).warnings if w.path == "cluster.dns_servers"]
    assert "no valid upstream addresses" in found.message and "cluster.dns_servers" in found.fix


@covers("software-versions")
def test_a_kubelet_from_1_38_with_a_containerd_below_2_0_is_refused_naming_the_containerd_pin(data):
    data["cluster"]["versions"] = {"kubernetes": "1.38.0", "containerd": "1.7.28"}
    expect(
        data,
        "cluster.versions.containerd",
        "containerd 1.7.28 cannot run Kubernetes 1.38.0's kubelet",
        "CRI RuntimeConfig",
        "set containerd to a 2.0 or later release",
    )
    data["cluster"]["versions"] = {"kubernetes": "1.38.0", "containerd": "2.1.4"}
    assert not [p for p in problems_of(data) if p.path == "cluster.versions.containerd"]
    data["cluster"]["versions"] = {"kubernetes": "1.37.2", "containerd": "1.7.28"}  # 1.37 still falls back
    assert not [p for p in problems_of(data) if p.path == "cluster.versions.containerd"]


def _sizing(**instances: int) -> dict:
    """A sizing section (what ``rackctl size --write`` stores) running ``instances`` of each ``model_precision``
    (``llama_2_13b_awq=3``: three instances of llama-2-13b at awq), one instance per node."""
    keys = [(name.rsplit("_", 1)[0].replace("_", "-"), name.rsplit("_", 1)[1]) for name in instances]
    nodes = []
    for (model, precision), count in zip(keys, instances.values(), strict=True):
        for _ in range(count):
            inst = {"model": model, "precision": precision, "tensor_parallel": 1, "gpus": [0]}
            nodes.append({"node": len(nodes), "instances": [inst], "gpus_free": 3})
    requirements = [{"model": m, "precision": p, "concurrent_users": 10} for m, p in dict.fromkeys(keys)]
    placement = {
        "server": "r760xa",
        "servers_needed": len(nodes),
        "gpus_used": len(nodes),
        "gpus_total": 4 * len(nodes),
    }
    return {"requirements": {"models": requirements}, "placement": placement | {"nodes": nodes}}


@covers("autoscaling")
def test_autoscaling_needs_monitoring(data):
    data["models"][0]["deployment"]["autoscaling"] = {"max_replicas": 2}
    data["monitoring"] = {"enabled": False}
    expect(data, "models[0].deployment.autoscaling", "monitoring.enabled is false", "set monitoring.enabled: true")
    data["monitoring"] = {"enabled": True}
    valid(data)


@covers("autoscaling")
def test_max_replicas_comes_from_the_sizing_placement_or_is_required(data):
    from bootstrap.inventory.autoscaling import autoscaled

    data["models"][0]["deployment"]["autoscaling"] = {}
    expect(data, "models[0].deployment.autoscaling.max_replicas", "no sizing: section", "set max_replicas")
    data["sizing"] = _sizing(llama_2_13b_awq=3, llama_2_70b_fp8=1)
    scaling = autoscaled(valid(data).inventory)
    assert list(scaling) == ["llama-2-13b-awq"]
    assert (scaling["llama-2-13b-awq"].min_replicas, scaling["llama-2-13b-awq"].max_replicas) == (1, 3)
    assert "3 instance(s) of llama-2-13b awq" in scaling["llama-2-13b-awq"].max_from
    # the field wins over the placement
    data["models"][0]["deployment"]["autoscaling"] = {"min_replicas": 2, "max_replicas": 5}
    assert autoscaled(valid(data).inventory)["llama-2-13b-awq"].max_replicas == 5
    # a minimum above what sizing places is refused, naming both
    data["models"][0]["deployment"]["autoscaling"] = {"min_replicas": 4}
    expect(data, "models[0].deployment.autoscaling.min_replicas", "min_replicas 4", "3 instance(s)", "3 or less")


@covers("autoscaling")
def test_an_ambiguous_or_missing_sizing_model_requires_max_replicas(data):
    data["models"][0]["deployment"]["autoscaling"] = {}
    # the sizing models are not the served model
    data["sizing"] = _sizing(mistral_7b_fp8=2)
    expect(data, "models[0].deployment.autoscaling.max_replicas", "no sizing model is 'llama-2-13b-awq'", "mistral-7b")
    # one sizing model, two served models that are it: whose instances is not guessed
    data["sizing"] = _sizing(llama_2_13b_awq=2)
    data["models"][1] = data["models"][0] | {"name": "llama-2-13b", "precision": "AWQ"}
    expect(data, "models[0].deployment.autoscaling.max_replicas", "also 'llama-2-13b'", "ambiguous", "set max_replicas")
    # a served name without the precision, two precisions sized, and its own precision among neither
    data["models"] = [data["models"][1] | {"precision": "FP16"}]
    data["sizing"] = _sizing(llama_2_13b_awq=2, llama_2_13b_fp8=1)
    expect(data, "models[0].deployment.autoscaling.max_replicas", "awq, fp8", "ambiguous")
    # ... its own precision picks one
    data["models"][0]["precision"] = "FP8"
    from bootstrap.inventory.autoscaling import autoscaled

    assert autoscaled(valid(data).inventory)["llama-2-13b"].max_replicas == 1


@covers("software-versions")
def test_a_release_pairs_with_every_container_that_carries_it(data):
    # Triton's matrix: 1.1.0 is in 25.12, 26.01 and 26.02; 1.2.1 in 26.04 to 26.07
    for triton, trtllm in (("26.01", "1.1.0"), ("26.02", "1.1.0"), ("26.04", "1.2.1"), ("26.07", "1.2.1")):
        data["cluster"]["versions"] = {"triton": triton, "trtllm": trtllm, "nvidia_driver": "595.91.07"}
        result = valid(data)
        assert not [p for p in result.warnings if p.path in ("cluster.versions.triton", "cluster.versions.trtllm")]
    data["cluster"]["versions"] = {"triton": "25.12", "trtllm": "1.2.1"}
    expect(data, "cluster.versions.triton", "containers carrying it: 26.04, 26.05, 26.06, 26.07", "set triton: '26.04'")
    data["cluster"]["versions"] = {"triton": "25.12", "trtllm": "1.2.0"}
    expect(data, "cluster.versions.triton", "its container is 26.03-trtllm-python-py3", "set triton: '26.03'")
