"""Peer check: Ansible's community.general.redfish_info reads the same service tags and MACs as
``rackctl discover`` from the same emulated iDRACs."""

from __future__ import annotations

import pytest
from rf_lab import FAST, Lab

from rackctl_lab.peer.ansible_redfish_info import ansible_available, run_redfish_info, service_tag_and_macs
from redfish_tools.discover import discover
from redfish_tools.fleet import run_fleet

pytestmark = pytest.mark.skipif(not ansible_available(), reason="ansible (community.general) not installed")


def test_redfish_info_agrees_with_rackctl_discover(lab: Lab) -> None:
    names = ["head-01", "gpu-l40s-01", "gpu-xe9680-01"]
    targets = [lab.target(n) for n in names]
    ours = {r.name: r.value for r in run_fleet(targets, discover, policy=FAST)}
    peer = run_redfish_info(targets, forks=3)
    assert peer.returncode == 0, peer.output_tail
    for name in names:
        tag, macs = service_tag_and_macs(peer.facts[name])
        assert tag == ours[name].service_tag == lab.specs[name].service_tag
        assert macs == ours[name].macs()
        assert macs  # compared something
    for name in names:
        assert lab.rack.open_sessions(name) == 0
