"""``max_parallel``: at most that many nodes install at once, the rest queue, results come back per node.

The per-node flow is replaced by a timed stand-in (a test double: what is under test is the scheduling
in ``provision_all``, not the flow, which the lab tests run for real).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from bootstrap.environment import BootSite
from bootstrap.inventory import load_inventory
from bootstrap.provision.flow import Artefacts, FlowSettings, NodeRun, ProvisionSession

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "examples" / "dvd-inference.yml"


class CountingSession(ProvisionSession):
    def __init__(self, hostnames: list[str], limit: int) -> None:
        super().__init__(
            load_inventory(EXAMPLE),
            hostnames,
            state_dir=Path("/nonexistent"),
            artefacts=Artefacts(),
            site=BootSite("10.0.0.1", "eth0"),
            settings=FlowSettings(max_parallel=limit),
        )
        self.lock = threading.Lock()
        self.running = 0
        self.peak = 0

    def provision_node(self, hostname, steps=None, on_phase=None) -> NodeRun:  # type: ignore[override]
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        time.sleep(0.05)
        with self.lock:
            self.running -= 1
        return NodeRun(hostname, ok=hostname != "n3", phase="identity", message="" if hostname != "n3" else "boom")


def test_at_most_max_parallel_nodes_install_at_once_and_every_node_is_reported() -> None:
    hosts = [f"n{i}" for i in range(10)]
    session = CountingSession(hosts, limit=3)
    done: list[str] = []
    results = session.provision_all(on_done=lambda run: done.append(run.hostname))
    assert session.peak == 3
    assert list(results) == hosts and sorted(done) == sorted(hosts)
    assert not results["n3"].ok and all(results[h].ok for h in hosts if h != "n3")


def test_fewer_nodes_than_the_limit_all_start_together() -> None:
    session = CountingSession(["a", "b"], limit=32)
    session.provision_all()
    assert session.peak == 2
