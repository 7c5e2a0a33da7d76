"""Model delivery over real SSH: two sshd "GPU nodes" reached as rackctl reaches nodes (pinned known_hosts,
admin key, the environment's proxy), a real multi-file model directory; every byte is checked on the node."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bootstrap.cli import cli, triton_deliver
from bootstrap.inband.access import node_access
from bootstrap.inventory.loader import load_inventory
from bootstrap.provision.hostkeys import ensure_host_key, known_hosts_path, write_known_hosts
from bootstrap.triton.deliver import SourceFile, deliver_model, deliver_node, plan_model, source_files
from tests.ansible.test_playbook_stage import RelayEnvironment
from tests.sshnode import start_ssh_node
from tests.triton.test_model_files import hf_checkpoint

EXAMPLE = Path(__file__).parents[2] / "inventory" / "examples" / "dvd-inference.yml"
RELAY = Path(__file__).resolve().parents[1] / "sshrelay.py"
NODES = ("gpu-l40s-01", "gpu-l40s-02")
MODEL = "llama-2-13b-awq"


def model_dir(path: Path) -> Path:
    """A real multi-file model directory: config, tokenizer, two 3 MB shards, a nested file."""
    ckpt = hf_checkpoint(path, quant="awq")
    for shard in ckpt.glob("*.safetensors"):
        shard.write_bytes(os.urandom(3 * 1024 * 1024))
    (ckpt / "extra").mkdir()
    (ckpt / "extra" / "generation_config.json").write_text('{"max_new_tokens": 512}')
    return ckpt


def inventory_file(tmp_path: Path, source: Path, node_dir: Path) -> Path:
    """The design example with a second L40S node; the 13B model delivered from ``source``."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["cluster"]["install_method"] = "image"  # root logs in (the test's sshd runs as root); sudo otherwise
    first = next(n for n in data["nodes"] if n["hostname"] == NODES[0])
    second = copy.deepcopy(first)
    second |= {"hostname": NODES[1], "service_tag": "GL02R76"}
    second["bmc"] = {**first["bmc"], "address": "10.10.0.16", "fingerprint": "AB:" + first["bmc"]["fingerprint"][3:]}
    for nic, ip in zip(second["interfaces"], ("10.10.0.26", "10.20.0.26", "10.30.0.26"), strict=True):
        nic["ip"] = ip
    data["nodes"].append(second)
    model = next(m for m in data["models"] if m["name"] == MODEL)
    model["source_dir"] = str(source)
    model["deployment"]["storage"] = {"kind": "node", "node_dir": str(node_dir)}
    path = tmp_path / "cluster.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def rack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    client = tmp_path / "admin" / "id_ed25519"
    client.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(client)], check=True)
    source = model_dir(tmp_path / "build-host" / "Llama-2-13b-chat-hf")
    node_dir = tmp_path / "nvme"  # both sshd run here: one directory per node below it
    path = inventory_file(tmp_path, source, node_dir / "@node")
    inventory = load_inventory(path)
    state = tmp_path / "state"
    pins = {h: (ensure_host_key(state, h), [str(inventory.node(h).address_on("pxe"))]) for h in NODES}
    write_known_hosts(known_hosts_path(state), pins)
    sshds = {h: start_ssh_node(tmp_path / h, host_key=pins[h][0].private_path, client_key=client) for h in NODES}
    port_map = tmp_path / "ports.json"
    port_map.write_text(json.dumps({pins[h][1][0]: sshds[h].port for h in NODES}))
    env = RelayEnvironment(client, port_map)
    yield {"inventory": inventory, "state": state, "env": env, "source": source, "path": path, "tmp": tmp_path}
    for sshd in sshds.values():
        sshd.stop()


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _plan(rack: dict[str, Any]):
    inventory = rack["inventory"]
    return plan_model(inventory, next(m for m in inventory.models if m.name == MODEL))


def _deliver(rack: dict[str, Any], progress=None) -> dict[str, Any]:
    """Deliver the model; each node's copy goes to its own directory (``@node`` = the node, for two sshd on one
    machine): the access map's per-node dest is what the real nodes would all share."""
    inventory = rack["inventory"]
    spec = next(m for m in inventory.models if m.name == MODEL)
    plan = plan_model(inventory, spec)
    access = node_access(inventory, rack["state"], rack["env"])
    seen: dict[str, int] = {}

    def count(node: str, n: int) -> None:
        seen[node] = seen.get(node, 0) + n
        if progress:
            progress(node, seen[node])

    results = {}
    for node in plan.nodes:
        per_node = plan.__class__(plan.model, plan.source, plan.dest.replace("@node", node), (node,))
        (results[node],) = deliver_model(per_node, access, count)
    return {"plan": plan, "results": results, "progress": seen}


def test_the_plan_names_the_serving_nodes_and_the_destination(rack):
    plan = _plan(rack)
    assert plan.nodes == NODES
    assert plan.dest == str(rack["tmp"] / "nvme" / "@node" / "Llama-2-13b-chat-hf")


def test_copy_then_nothing_then_only_the_corrupted_file(rack):
    source = rack["source"]
    want = _tree(source)
    first = _deliver(rack)
    total = sum(f.size for f in source_files(source))
    for node in NODES:
        result = first["results"][node]
        assert result.error is None, result
        assert _tree(Path(result.dest)) == want  # every file, byte for byte, on every node
        assert result.sent_bytes == total and first["progress"][node] == total
    # A second run sends nothing.
    second = _deliver(rack)
    for result in second["results"].values():
        assert (result.sent_bytes, result.sent_files, result.unchanged) == (0, [], len(want))
    # A file damaged on one node (same size, same mtime) is found and sent again, only there.
    damaged = Path(first["results"][NODES[1]].dest) / "model-00001-of-00002.safetensors"
    stat = damaged.stat()
    with damaged.open("r+b") as f:
        f.seek(1000)
        f.write(b"\xff" * 16)
    os.utime(damaged, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    third = _deliver(rack)
    assert third["results"][NODES[0]].sent_files == []
    assert third["results"][NODES[1]].sent_files == ["model-00001-of-00002.safetensors"]
    assert _tree(Path(third["results"][NODES[1]].dest)) == want


class Interrupted(Exception):
    pass


def test_an_interrupted_copy_resumes_where_it_stopped(rack):
    source = rack["source"]
    total = sum(f.size for f in source_files(source))
    cut = 4 * 1024 * 1024  # inside the second shard

    def stop(node: str, sent: int) -> None:
        if sent >= cut:
            raise Interrupted(node)

    with pytest.raises(Interrupted):
        _deliver(rack, progress=stop)
    dest = Path(str(_plan(rack).dest).replace("@node", NODES[0]))
    assert list(dest.rglob("*.rackctl-part"))  # the bytes of the file in flight stayed
    again = _deliver(rack)
    result = again["results"][NODES[0]]
    assert result.error is None
    resumed = sum(result.resumed_from.values())
    assert resumed > 0
    sizes = {f.rel: f.size for f in source_files(source)}
    held = sum(size for rel, size in sizes.items() if rel not in result.sent_files)
    # The rest of each interrupted file, and the files never started; nothing twice.
    assert result.sent_bytes + resumed + held == total and result.sent_bytes < total
    assert _tree(dest) == _tree(source)
    assert not list(dest.rglob("*.rackctl-part"))


def _cli(rack: dict[str, Any], monkeypatch: pytest.MonkeyPatch, *extra: str) -> tuple[int, dict[str, Any]]:
    monkeypatch.setattr(triton_deliver, "environment_for", lambda inventory: rack["env"])
    args = ["triton", "deliver", "-i", str(rack["path"]), "--state-dir", str(rack["state"]), "--json", *extra]
    result = CliRunner().invoke(cli, args)
    assert "Traceback" not in result.output
    return result.exit_code, json.loads(result.stdout)


def test_cli_plan_then_copy_then_nothing(rack, monkeypatch: pytest.MonkeyPatch):
    """Both sshd share this machine's directory, as the plan's one dest: one node copies, the other (after
    it, one session per destination at a time) finds every file in place."""
    rack["path"].write_text(rack["path"].read_text().replace("/@node", ""))
    total = sum(f.size for f in source_files(rack["source"]))
    code, plan = _cli(rack, monkeypatch, "--plan", "--model", MODEL)
    assert code == 0 and plan["plan"] is True
    [model] = plan["models"]
    assert model["nodes"] == list(NODES) and model["bytes"] == total and model["files"] == 5
    dest = Path(model["dest"])
    assert not dest.exists()  # the plan copies nothing
    code, done = _cli(rack, monkeypatch, "--model", MODEL)
    assert code == 0, done
    results = done["models"][0]["results"]
    assert sum(r["sent_bytes"] for r in results) == total and all(r["ok"] for r in results)
    assert _tree(dest) == _tree(rack["source"])
    code, again = _cli(rack, monkeypatch, "--model", MODEL)
    assert code == 0 and [r["sent_bytes"] for r in again["models"][0]["results"]] == [0, 0]


def test_cli_limit_copies_to_the_selected_nodes_only(rack, monkeypatch: pytest.MonkeyPatch):
    """--limit: the plan and the copy name only the selected serving node; a selection that serves no model
    and an unknown name are refused naming --limit, before any copy."""
    rack["path"].write_text(rack["path"].read_text().replace("/@node", ""))
    code, plan = _cli(rack, monkeypatch, "--plan", "--model", MODEL, "--limit", NODES[1])
    assert code == 0, plan
    assert plan["models"][0]["nodes"] == [NODES[1]]
    code, done = _cli(rack, monkeypatch, "--model", MODEL, "--limit", NODES[1])
    assert code == 0, done
    [result] = done["models"][0]["results"]
    assert result["node"] == NODES[1] and result["ok"] and result["sent_bytes"] > 0
    assert _tree(Path(plan["models"][0]["dest"])) == _tree(rack["source"])
    for limit in ("head-01", "gpu-l40s-1"):
        code, doc = _cli(rack, monkeypatch, "--model", MODEL, "--limit", limit)
        assert code == 2 and doc["errors"][0]["path"] == "--limit", doc
    assert all(n in doc["errors"][0]["fix"] for n in ("gpu-l40s-01",))  # the closest name offered
    code, doc = _cli(rack, monkeypatch, "--model", MODEL, "--limit", "cp-*")
    assert code == 2 and doc["errors"][0]["fix"] == f"select a node serving a model: {', '.join(NODES)}"


def test_cli_refuses_files_that_do_not_fit_before_copying(rack, monkeypatch: pytest.MonkeyPatch):
    rack["path"].write_text(rack["path"].read_text().replace("precision: AWQ", "precision: FP8"))
    code, doc = _cli(rack, monkeypatch, "--model", MODEL)
    assert code == 2 and doc["ok"] is False
    [error] = doc["errors"]
    assert error["path"] == f"models[{MODEL}].precision"
    assert "precision FP8 declared but the files are AWQ-quantized" in error["message"]
    assert error["fix"] == "declare precision: AWQ"
    assert not (rack["tmp"] / "nvme").exists()  # nothing was copied anywhere


def test_a_file_that_arrives_different_is_never_put_in_place(rack):
    """The node checks each file's sha256 before it takes its name: a file whose bytes are not the ones
    listed (changed on the build host mid-run) is removed, sent once more, then reported."""
    plan = _plan(rack)
    access = node_access(rack["inventory"], rack["state"], rack["env"])[NODES[0]]
    listing = source_files(rack["source"])
    lying = [SourceFile(f.rel, f.size, "0" * 64) if f.rel == "tokenizer.json" else f for f in listing]
    dest = str(plan.dest).replace("@node", NODES[0])
    result = deliver_node(access, dest, rack["source"], lying, lambda node, n: None)
    assert result.resent_after_mismatch == ["tokenizer.json"]
    assert result.error == "sha256 mismatch on arrival, twice: tokenizer.json"
    assert not (Path(dest) / "tokenizer.json").exists()
    assert not list(Path(dest).rglob("*.rackctl-part"))
    assert _tree(Path(dest)) == {rel: sha for rel, sha in _tree(rack["source"]).items() if rel != "tokenizer.json"}
