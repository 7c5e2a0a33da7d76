"""The product's own Kubectl in a process of its own, for the real cluster test.

``python -m tests.ansible.kubectl_process SPEC.json`` makes the product's :class:`Kubectl` of the spec's state
directory's kubeconfig (the spec's ``drain_timeout_s``) and calls its methods in order (``"calls": [[method,
arg..., {keyword: arg}], ...]``, the keywords optional), each outcome printed as JSON: what the method
returned, or the words of the :class:`KubeError` it raised. The test starts it inside the lab bridge's
namespace, where the API VIP is, with the lab's kubectl on PATH.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bootstrap.kube import KUBECONFIG
from bootstrap.kube.api import KubeError
from bootstrap.kube.client import Kubectl


def main(spec_path: str) -> int:
    """The product's Kubectl methods called in order; each outcome printed as JSON."""
    spec = json.loads(Path(spec_path).read_text())
    client = Kubectl(Path(spec["state"]) / KUBECONFIG, drain_timeout_s=float(spec.get("drain_timeout_s", 120)))
    outcomes: list[dict[str, Any]] = []
    for method, *args in spec["calls"]:
        kwargs = args.pop() if args and isinstance(args[-1], dict) else {}
        try:
            outcomes.append({"call": method, "ok": True, "result": getattr(client, method)(*args, **kwargs)})
        except KubeError as exc:
            outcomes.append({"call": method, "ok": False, "error": exc.message})
    print(json.dumps(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
