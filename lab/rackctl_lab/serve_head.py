"""The lab head node's services for as long as a lab run needs them: mirror (nginx), registry, time.

``python -m rackctl_lab.serve_head -i inventory/lab.yml --state-dir .rackctl/lab`` starts
:class:`~rackctl_lab.head_services.LabHeadServices` and :class:`~rackctl_lab.head_time.LabTimeServer`
in the lab's namespace (``lab up`` first), writes ``<lab-dir>/head-services.ready`` once they answer,
and serves until SIGTERM or SIGINT, then stops them by PID and removes the file. ``make demo`` runs it in
the background around ``rackctl mirror images`` and ``rackctl up``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from bootstrap.inventory import load_inventory
from rackctl_lab import paths
from rackctl_lab.environment import LabEnvironment
from rackctl_lab.head_services import LabHeadServices
from rackctl_lab.head_time import LabTimeServer

READY = "head-services.ready"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rackctl_lab.serve_head", description=__doc__.split("\n")[0])
    parser.add_argument("-i", "--inventory", type=Path, required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--lab-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    lab_dir = paths.lab_dir(args.lab_dir)
    inventory = load_inventory(args.inventory)
    network = LabEnvironment(lab_dir).network
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    ready = lab_dir / READY
    with LabHeadServices(inventory, args.state_dir, lab_dir, network) as services, LabTimeServer(network, lab_dir):
        ready.write_text(f"mirror {services.mirror_uri}\nregistry {services.registry_address}\ntime {network.ip}\n")
        print(f"serving: mirror {services.mirror_uri}, registry {services.registry_address}, time {network.ip}")
        sys.stdout.flush()
        try:
            stop.wait()
        finally:
            ready.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
