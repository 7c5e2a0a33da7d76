"""Run ``community.general.redfish_info`` with ``ansible-playbook`` against a set of BMCs.

Used by the peer test and the fleet benchmark. Credentials go into a 0600 host-vars file in a private
temporary directory that is removed afterwards; the playbook prints nothing secret.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from redfish_tools.connection import BmcTarget

PLAYBOOK = """\
- name: Redfish inventory with community.general.redfish_info
  hosts: bmcs
  gather_facts: false
  tasks:
    - name: Read inventory, one category at a time
      community.general.redfish_info:
        category: "{{ item.category }}"
        command: "{{ item.command }}"
        baseuri: "{{ rf_baseuri }}"
        username: "{{ rf_username }}"
        password: "{{ rf_password }}"
        validate_certs: "{{ rf_ca_path is not none }}"
        ca_path: "{{ rf_ca_path }}"
        timeout: 60
      loop: "{{ rf_queries }}"
      loop_control:
        label: "{{ item.category }}"
      register: rf
    - name: Save the facts
      ansible.builtin.copy:
        content: "{{ rf.results | map(attribute='redfish_facts') | list | combine | to_json }}"
        dest: "{{ rf_outdir }}/{{ inventory_hostname }}.json"
        mode: "0600"
"""

Queries = list[dict[str, Any]]

#: What a "full discovery" asks of redfish_info (comparable with ``rackctl discover``).
SYSTEM_COMMANDS = ["GetSystemInventory", "GetCpuInventory", "GetMemoryInventory", "GetNicInventory",
                   "GetStorageControllerInventory", "GetDiskInventory"]  # fmt: skip
FULL: Queries = [
    {"category": "Systems", "command": SYSTEM_COMMANDS},
    {"category": "Chassis", "command": ["GetChassisInventory"]},
    {"category": "Manager", "command": ["GetManagerInventory"]},
    {"category": "Update", "command": ["GetFirmwareInventory"]},
]  # fmt: skip
#: Only what the peer test compares: service tag and MACs.
MINIMAL: Queries = [{"category": "Systems", "command": ["GetSystemInventory", "GetNicInventory"]}]


@dataclass
class PeerRun:
    facts: dict[str, dict[str, Any]]
    wall_s: float
    cpu_s: float
    returncode: int
    output_tail: str


def ansible_available() -> bool:
    """Whether ansible-playbook and the community.general collection are installed next to this Python."""
    bindir = Path(sys.executable).parent
    if not (bindir / "ansible-playbook").exists() and not shutil.which("ansible-playbook"):
        return False
    try:
        import ansible_collections.community.general  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def run_redfish_info(targets: list[BmcTarget], *, forks: int = 50, queries: Queries = MINIMAL) -> PeerRun:
    """Run the playbook over ``targets``; returns each host's ``redfish_facts`` and the time taken."""
    bindir = Path(sys.executable).parent
    playbook_bin = bindir / "ansible-playbook"
    exe = str(playbook_bin) if playbook_bin.exists() else (shutil.which("ansible-playbook") or "ansible-playbook")
    with tempfile.TemporaryDirectory(prefix="rackctl-peer-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o700)
        outdir = work / "out"
        outdir.mkdir()
        hosts: dict[str, Any] = {}
        for t in targets:
            hosts[t.name] = {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "rf_baseuri": t.url.removeprefix("https://"),
                "rf_username": t.username,
                "rf_password": t.password.get_secret_value(),
                "rf_ca_path": str(t.ca_file) if t.ca_file else None,
                "rf_outdir": str(outdir),
                "rf_queries": queries,
            }
        inv = work / "hosts.yml"
        inv.write_text(yaml.safe_dump({"all": {"children": {"bmcs": {"hosts": hosts}}}}))
        os.chmod(inv, 0o600)
        (work / "play.yml").write_text(PLAYBOOK)
        env = dict(os.environ)
        env.update(
            {
                "ANSIBLE_HOST_KEY_CHECKING": "False",
                "ANSIBLE_RETRY_FILES_ENABLED": "False",
                "ANSIBLE_LOCAL_TEMP": str(work / "tmp"),
                "ANSIBLE_STDOUT_CALLBACK": "default",
                "ANSIBLE_NOCOLOR": "1",
                "PATH": f"{bindir}:{env.get('PATH', '')}",
            }
        )
        before = os.times()
        start = time.monotonic()
        proc = subprocess.run(
            [exe, "-i", str(inv), "-f", str(forks), str(work / "play.yml")],
            capture_output=True,
            text=True,
            env=env,
            cwd=work,
            check=False,
        )
        wall = time.monotonic() - start
        after = os.times()
        cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
        facts = {p.stem: json.loads(p.read_text()) for p in outdir.glob("*.json")}
        tail = (proc.stdout + proc.stderr)[-3000:]
        for t in targets:
            tail = tail.replace(t.password.get_secret_value(), "<redacted>")
        return PeerRun(facts, wall, cpu, proc.returncode, tail)


def service_tag_and_macs(facts: dict[str, Any]) -> tuple[str | None, dict[str, str]]:
    """(service tag, {NIC id: MAC}) from one host's ``redfish_facts``."""
    tag = None
    for entry in facts.get("system", {}).get("entries", []):
        if isinstance(entry, list) and len(entry) == 2:
            tag = entry[1].get("SKU") or tag
    macs: dict[str, str] = {}
    for entry in facts.get("nic", {}).get("entries", []):
        if isinstance(entry, list) and len(entry) == 2:
            for nic in entry[1]:
                if nic.get("MACAddress"):
                    macs[str(nic.get("Id"))] = str(nic["MACAddress"]).lower()
    return tag, macs
