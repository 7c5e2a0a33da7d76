"""Model delivery over real SSH: two sshd "GPU nodes" reached as rackctl reaches nodes (pinned known_hosts,
admin key, the environment's proxy), a real multi-file model directory; every byte is checked on the node."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bootstrap.cli import cli, triton_deliver
from bootstrap.errors import InvalidInput
from bootstrap.inband.access import node_access
from bootstrap.inventory.loader import load_inventory
from bootstrap.journal import Journal
from bootstrap.provision.hostkeys import ensure_host_key, known_hosts_path, write_known_hosts
from bootstrap.triton.deliver import (
    SourceFile,
    check_placed_node,
    deliver_model,
    deliver_node,
    plan_model,
    source_files,
)
from bootstrap.triton.manifests import build_manifests
from bootstrap.triton.render import render_model
from bootstrap.triton.weights_version import ANNOTATION, note_applied, served_specs, version_id, versioned
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


def _version_dest(rack: dict[str, Any], node: str) -> Path:
    """Where the source's current files go on ``node``: the model directory at their version."""
    return Path(versioned(_plan(rack).dest.replace("@node", node), version_id(source_files(rack["source"]))))


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
    for node, result in second["results"].items():
        assert (result.sent_bytes, result.sent_files, result.unchanged) == (0, [], len(want))
        assert second["progress"][node] == total  # progress counts what is in place: the bar ends full
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
    dest = _version_dest(rack, NODES[0])
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
    dest = Path(f"{model['dest']}@{model['version']}")
    assert model["version"] == version_id(source_files(rack["source"]))
    assert not dest.exists() and not dest.parent.exists()  # the plan copies nothing
    code, done = _cli(rack, monkeypatch, "--model", MODEL)
    assert code == 0, done
    results = done["models"][0]["results"]
    assert sum(r["sent_bytes"] for r in results) == total and all(r["ok"] for r in results)
    assert _tree(dest) == _tree(rack["source"])
    code, again = _cli(rack, monkeypatch, "--model", MODEL)
    assert code == 0 and [r["sent_bytes"] for r in again["models"][0]["results"]] == [0, 0]
    with Journal(rack["state"]) as journal:  # each copy is a journal run; the plan is none
        runs = [(r.command, r.status, r.message) for r in journal.runs()]
    assert runs == [
        (f"triton deliver {MODEL}", "completed", "sent 0.00 GB"),
        (f"triton deliver {MODEL}", "completed", f"sent {total / 1e9:.2f} GB"),
    ]


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
    assert _tree(Path(f"{plan['models'][0]['dest']}@{plan['models'][0]['version']}")) == _tree(rack["source"])
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


def test_a_file_the_source_no_longer_has_is_reported_then_pruned_on_request(rack):
    """A shard renamed on the build host leaves the old one on the node: reported, kept (the user's), and
    removed only with prune; the source's files stay."""
    first = _deliver(rack)
    dest = Path(first["results"][NODES[0]].dest)
    (rack["source"] / "model-00002-of-00002.safetensors").rename(rack["source"] / "model-00002-renamed.safetensors")
    (dest / "extra" / "notes.txt").write_text("the operator's own file")
    plan = _plan(rack)
    access = node_access(rack["inventory"], rack["state"], rack["env"])[NODES[0]]
    listing = source_files(rack["source"])
    kept = deliver_node(access, str(dest), rack["source"], listing, lambda node, n: None)
    assert kept.error is None
    assert kept.extra_files == ["extra/notes.txt", "model-00002-of-00002.safetensors"]
    assert kept.sent_files == ["model-00002-renamed.safetensors"] and kept.pruned == []
    assert (dest / "model-00002-of-00002.safetensors").exists()
    pruned = deliver_node(access, str(dest), rack["source"], listing, lambda node, n: None, prune=True)
    assert pruned.error is None and pruned.sent_files == []
    assert (pruned.pruned, pruned.extra_files) == (["extra/notes.txt", "model-00002-of-00002.safetensors"], [])
    assert _tree(dest) == _tree(rack["source"])
    assert plan.nodes == NODES


def test_cli_progress_piped_is_a_line_per_tenth_and_prune_in_the_plan(rack, monkeypatch: pytest.MonkeyPatch):
    """Piped (not a terminal), progress is stamped lines on stderr: the source's hashing, then each node's
    copy, up to its total; --json prints none; --plan --prune says what it would remove."""
    monkeypatch.setattr(triton_deliver, "environment_for", lambda inventory: rack["env"])
    rack["path"].write_text(rack["path"].read_text().replace("/@node", ""))
    total = sum(f.size for f in source_files(rack["source"]))
    base = ["triton", "deliver", "-i", str(rack["path"]), "--state-dir", str(rack["state"]), "--model", MODEL]
    plan = CliRunner().invoke(cli, [*base, "--plan", "--prune"])
    assert plan.exit_code == 0, plan.output
    assert "files a node holds there that the source lacks are removed" in plan.stdout
    version = version_id(source_files(rack["source"]))
    assert f"(version {version})" in plan.stdout
    assert all(f"{MODEL} → " not in line for line in plan.stderr.splitlines())  # hashed the source, sent nothing
    assert plan.stderr.splitlines()[-1].endswith(f"{MODEL}: sha256: 100% of {total / 1e6:.1f} MB")
    run = CliRunner().invoke(cli, base)
    assert run.exit_code == 0, run.output
    lines = run.stderr.splitlines()
    size = f"{total / 1e6:.1f} MB"
    assert any(line.endswith(f"{MODEL}: sha256: 100% of {size}") for line in lines), lines
    for node in NODES:  # the second node finds the first one's copy in place: its line ends full too
        mine = [line for line in lines if f"{MODEL} → {node}:" in line]
        assert mine[0].endswith(f": 0% of {size}") and mine[-1].endswith(f": 100% of {size}"), mine
        assert len(mine) == len(set(mine)) <= triton_deliver.STEPS + 1
    assert all(len(line) <= 80 for line in run.stderr.splitlines()), run.stderr
    quiet = CliRunner().invoke(cli, [*base, "--json"])
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_cli_checks_a_directory_placed_on_the_nodes_beforehand(rack, monkeypatch: pytest.MonkeyPatch):
    """Without source_dir nothing is copied: each serving node is asked whether the directory is there with
    a config.json; missing: exit 1 naming it, nothing created; placed: exit 0 with what each node holds."""
    data = yaml.safe_load(rack["path"].read_text())
    del next(m for m in data["models"] if m["name"] == MODEL)["source_dir"]
    rack["path"].write_text(yaml.safe_dump(data, sort_keys=False))
    code, plan = _cli(rack, monkeypatch, "--plan", "--model", MODEL)
    [model] = plan["models"]
    assert code == 0 and model["source"] is None and model["nodes"] == list(NODES)
    assert "checked" not in model  # the plan contacts no node
    code, missing = _cli(rack, monkeypatch, "--model", MODEL)
    assert code == 1 and missing["ok"] is False
    dest = Path(model["dest"])  # both sshd run on this machine: one directory for the two nodes
    want = f"{dest} does not exist (set source_dir, or place the files)"
    assert [(c["node"], c["error"]) for c in missing["models"][0]["checked"]] == [(n, want) for n in NODES]
    assert not dest.exists()  # the check creates nothing
    with Journal(rack["state"]) as journal:
        [run] = journal.runs()
    assert (run.command, run.status) == (f"triton deliver {MODEL}", "failed")
    assert run.message == "; ".join(f"{MODEL} on {n}: {want}" for n in NODES)
    dest.parent.mkdir(parents=True)
    subprocess.run(["cp", "-r", str(rack["source"]), str(dest)], check=True)
    code, placed = _cli(rack, monkeypatch, "--model", MODEL)
    total = sum(f.size for f in source_files(rack["source"]))
    assert code == 0, placed
    assert [(c["ok"], c["files"], c["bytes"]) for c in placed["models"][0]["checked"]] == [(True, 5, total)] * 2
    (dest / "config.json").unlink()
    access = node_access(rack["inventory"], rack["state"], rack["env"])[NODES[1]]
    check = check_placed_node(access, str(dest))
    assert (check.files, check.error) == (4, f"{dest} has no config.json: not a model directory")


def test_a_stopped_run_ends_every_node_at_its_next_block_and_the_next_run_resumes(rack):
    """What Ctrl-C does (the stop event set once 4 MB are in flight): each node's copy ends, reported, with
    its part kept; nothing half-written under a real name; the next run sends only the rest."""
    inventory = rack["inventory"]
    plan = _plan(rack)
    one = plan.__class__(plan.model, plan.source, plan.dest.replace("@node", NODES[0]), (NODES[0],))
    dest = _version_dest(rack, NODES[0])
    access = node_access(inventory, rack["state"], rack["env"])
    stop = threading.Event()
    seen = [0]

    def count(node: str, n: int) -> None:
        seen[0] += n
        if seen[0] >= 4 * 1024 * 1024:
            stop.set()

    [stopped] = deliver_model(one, access, count, stop=stop)
    assert stopped.error == "stopped; the next run resumes from what reached the node"
    source = _tree(rack["source"])
    assert all(source[rel] == sha for rel, sha in _tree(dest).items() if not rel.endswith(".rackctl-part"))
    assert len(list(dest.rglob("*.rackctl-part"))) == 1
    [resumed] = deliver_model(one, access, lambda node, n: None)
    assert resumed.error is None and len(resumed.resumed_from) == 1
    assert _tree(dest) == source


def test_a_damaged_part_on_the_node_is_found_on_arrival_and_the_file_sent_whole(rack):
    """A part whose bytes are not the file's (the disk, or another writer): the resumed file's sha256 does
    not match, so the part is removed and the whole file sent again; it never takes the real name."""
    plan = _plan(rack)
    dest = Path(plan.dest.replace("@node", NODES[0]))
    dest.mkdir(parents=True)
    (dest / ".model-00001-of-00002.safetensors.rackctl-part").write_bytes(b"\x00" * 1024 * 1024)
    access = node_access(rack["inventory"], rack["state"], rack["env"])[NODES[0]]
    result = deliver_node(access, str(dest), rack["source"], source_files(rack["source"]), lambda node, n: None)
    assert result.error is None
    assert result.resumed_from == {"model-00001-of-00002.safetensors": 1024 * 1024}
    assert result.resent_after_mismatch == ["model-00001-of-00002.safetensors"]
    assert _tree(dest) == _tree(rack["source"])


def test_the_pod_reads_the_delivered_files_where_its_config_points(rack, monkeypatch: pytest.MonkeyPatch):
    """The rendered model.yaml names a path in the pod; the Deployment's weights volume maps it to a node
    path (hostPath below mountPath); delivered, that node path is the version delivery made, holding the
    source's files byte for byte: the render and delivery agree on the version."""
    rack["path"].write_text(rack["path"].read_text().replace("/@node", ""))
    code, done = _cli(rack, monkeypatch, "--model", MODEL)
    assert code == 0, done
    declared = next(m for m in load_inventory(rack["path"]).models if m.name == MODEL)
    [spec] = served_specs([declared], rack["state"])
    model_yaml = yaml.safe_load(render_model(spec).files["tensorrt_llm/1/model.yaml"])
    pod_path = model_yaml["llm_args"]["model"]
    assert model_yaml["llm_args"]["tokenizer"] == pod_path  # the tokenizer came in the same directory
    deployment = next(o for o in build_manifests(spec)["deployment.yaml"] if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "weights"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "weights"]
    assert mount["readOnly"] is True and pod_path.startswith(mount["mountPath"] + "/")
    on_node = Path(volume["hostPath"]["path"] + pod_path.removeprefix(mount["mountPath"]))
    [model] = done["models"]
    assert str(on_node) == f"{model['dest']}@{model['version']}" == model["results"][0]["dest"]
    assert deployment["spec"]["template"]["metadata"]["annotations"][ANNOTATION] == model["version"]
    assert _tree(on_node) == _tree(rack["source"])


def test_a_git_clone_or_a_cache_snapshot_delivers_the_model_and_only_the_model(rack):
    """A git clone's .git (git-lfs keeps a second copy of each weight there) is not sent; a Hugging Face
    cache snapshot's links to its blobs are sent as the files they name; a link to nothing is refused."""
    source = rack["source"]
    want = _tree(source)
    lfs = source / ".git" / "lfs" / "objects" / "ab"
    lfs.mkdir(parents=True)
    (lfs / "abcdef").write_bytes((source / "model-00001-of-00002.safetensors").read_bytes())
    blobs = rack["tmp"] / "hub" / "blobs"
    blobs.mkdir(parents=True)
    shard = source / "model-00002-of-00002.safetensors"
    shard.rename(blobs / "0123abcd")
    shard.symlink_to(blobs / "0123abcd")
    listing = source_files(source)
    assert [f.rel for f in listing] == sorted(want) and {f.rel: f.sha256 for f in listing} == want
    plan = _plan(rack)
    dest = Path(plan.dest.replace("@node", NODES[0]))
    access = node_access(rack["inventory"], rack["state"], rack["env"])[NODES[0]]
    result = deliver_node(access, str(dest), source, listing, lambda node, n: None)
    assert result.error is None and _tree(dest) == want
    assert not (dest / ".git").exists() and not (dest / shard.name).is_symlink()
    (source / "dangling.json").symlink_to(rack["tmp"] / "absent")
    with pytest.raises(InvalidInput) as refused:
        source_files(source)
    assert refused.value.problems[0].path == str(source / "dangling.json")


def _new_version(source: Path) -> str:
    """New files on the build host: one shard's bytes changed, the nested file gone; the shard's name."""
    shard = source / "model-00002-of-00002.safetensors"
    shard.write_bytes(os.urandom(3 * 1024 * 1024))
    (source / "extra" / "generation_config.json").unlink()
    return shard.name


def _versions_beside(dest: Path) -> set[str]:
    """The version ids of the model directories beside ``dest`` (``<model dir>@<id>``) on the node."""
    base = dest.name.rsplit("@", 1)[0]
    return {p.name.rsplit("@", 1)[1] for p in dest.parent.iterdir() if p.is_dir() and p.name.startswith(base + "@")}


def test_new_files_are_a_new_version_beside_the_old_one_which_stays_intact(rack):
    """A second delivery of changed files makes a new version directory on each node holding exactly the
    new files; the old version (what running pods read) keeps every file, byte for byte; only the changed
    file crosses the network. The same files again: the same version, nothing sent, no new directory."""
    first = _deliver(rack)
    old_tree = _tree(rack["source"])
    changed = _new_version(rack["source"])
    second = _deliver(rack)
    for node in NODES:
        before, after = first["results"][node], second["results"][node]
        assert after.error is None, after
        assert after.dest != before.dest and after.version != before.version
        assert _tree(Path(after.dest)) == _tree(rack["source"])  # the removed file is not carried over
        assert _tree(Path(before.dest)) == old_tree
        assert after.sent_files == [changed] and after.extra_files == []
        assert after.versions_kept == [after.version, before.version] and after.versions_old == []
    third = _deliver(rack)
    for node in NODES:
        again = third["results"][node]
        assert (again.dest, again.sent_bytes, again.sent_files) == (second["results"][node].dest, 0, [])
        assert _versions_beside(Path(again.dest)) == {first["results"][node].version, again.version}


def test_cli_plan_and_prune_keep_the_version_in_use_and_the_previous(rack, monkeypatch: pytest.MonkeyPatch):
    """v1 on every node is what the render points at; v2 and v3 reach one node only (--limit): the render
    refuses (source_dir no longer lists v1's files, and no newer version is on every node). The plan of v4
    names it, what is sent and which versions go, touching nothing; --prune then removes v2 and keeps v4,
    v3 (the previous) and v1 (in use). Once every node holds v4 the render points at it, and v1 is old:
    reported, removed only with --prune, and not while the triton stage's last apply names it."""
    rack["path"].write_text(rack["path"].read_text().replace("/@node", ""))
    declared = next(m for m in load_inventory(rack["path"]).models if m.name == MODEL)
    shard = rack["source"] / "model-00001-of-00002.safetensors"
    ids = []
    for limit in ((), ("--limit", NODES[1]), ("--limit", NODES[1])):
        code, done = _cli(rack, monkeypatch, "--model", MODEL, *limit)
        assert code == 0, done
        ids.append(done["models"][0]["version"])
        if len(ids) == 1:
            [served] = served_specs([declared], rack["state"])
            assert served.hf_model_dir == f"{declared.hf_model_dir}@{ids[0]}"
            _new_version(rack["source"])
        shard.write_bytes(os.urandom(3 * 1024 * 1024))
    with pytest.raises(InvalidInput) as refused:
        served_specs([declared], rack["state"])
    [problem] = refused.value.problems
    assert problem.path == f"models[{MODEL}].source_dir" and f"delivered version {ids[0]}" in problem.message
    assert problem.fix == f"run `rackctl triton deliver --model {MODEL}`, then render again"
    changed = shard.name
    v4 = version_id(source_files(rack["source"]))
    code, plan = _cli(rack, monkeypatch, "--plan", "--prune", "--model", MODEL, "--limit", NODES[1])
    assert code == 0, plan
    [model] = plan["models"]
    [node_plan] = model["node_plans"]
    assert model["version"] == v4 and node_plan["send_files"] == [changed]
    assert (node_plan["versions_kept"], node_plan["versions_removed"]) == ([v4, ids[2], ids[0]], [ids[1]])
    dest = Path(model["dest"])
    assert _versions_beside(Path(f"{dest}@{v4}")) == set(ids)  # the plan changed nothing
    code, pruned = _cli(rack, monkeypatch, "--prune", "--model", MODEL, "--limit", NODES[1])
    assert code == 0, pruned
    [result] = pruned["models"][0]["results"]
    assert (result["versions_kept"], result["versions_removed"]) == ([v4, ids[2], ids[0]], [ids[1]])
    assert result["sent_files"] == [changed]
    assert _versions_beside(Path(result["dest"])) == {v4, ids[2], ids[0]}
    code, everywhere = _cli(rack, monkeypatch, "--model", MODEL)
    assert code == 0 and [r["sent_bytes"] for r in everywhere["models"][0]["results"]] == [0, 0]
    [served] = served_specs([declared], rack["state"])
    assert served.hf_model_dir == f"{declared.hf_model_dir}@{v4}"
    code, kept = _cli(rack, monkeypatch, "--model", MODEL)
    assert [(r["versions_kept"], r["versions_old"]) for r in kept["models"][0]["results"]] == [
        ([v4, ids[2]], [ids[0]])
    ] * 2
    note_applied(rack["state"], MODEL, ids[0])  # the triton stage applied v1 last: the cluster runs it
    code, done = _cli(rack, monkeypatch, "--prune", "--model", MODEL, "--limit", NODES[0])
    [result] = done["models"][0]["results"]
    assert code == 0 and (result["versions_kept"], result["versions_removed"]) == ([v4, ids[2], ids[0]], [])
    for applied in (ids[2], v4):  # the cluster rolled on to v3, then v4: v1 is no longer in use
        note_applied(rack["state"], MODEL, applied)
    code, done = _cli(rack, monkeypatch, "--prune", "--model", MODEL, "--limit", NODES[0])
    assert code == 0 and done["models"][0]["results"][0]["versions_removed"] == [ids[0]]
    assert _versions_beside(Path(result["dest"])) == {v4, ids[2]}
