"""``rackctl --help`` wall time, cold, in a fresh process each time, against the 0.3 s target.

Peers measured in the same run: the floor (``python -c pass`` from the same interpreter) and another
Python CLI of the same stack (``ansible-playbook --help``). Prints the median and max of N runs each and
the ratios. ``--runs N`` (default 15).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
TARGET_S = 0.3


def timed(argv: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - start)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--full", action="store_true", help="accepted for `make bench` symmetry (same as default)")
    args = parser.parse_args()
    cases = {
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
        "rackctl --help": [str(BIN / "rackctl"), "--help"],
        "rackctl up --help": [str(BIN / "rackctl"), "up", "--help"],
        "ansible-playbook --help (peer)": [str(BIN / "ansible-playbook"), "--help"],
    }
    results = {name: timed(argv, args.runs) for name, argv in cases.items()}
    floor = statistics.median(results["python -c pass (floor)"])
    peer = statistics.median(results["ansible-playbook --help (peer)"])
    print(f"{'command':34} {'median s':>9} {'max s':>7} {'x floor':>8} {'x peer':>7}")
    for name, times in results.items():
        med = statistics.median(times)
        print(f"{name:34} {med:9.3f} {max(times):7.3f} {med / floor:8.1f} {med / peer:7.2f}")
    help_s = statistics.median(results["rackctl --help"])
    verdict = "meets" if help_s < TARGET_S else "MISSES"
    print(f"rackctl --help median {help_s:.3f} s {verdict} the {TARGET_S} s target ({help_s / TARGET_S:.2f} of it)")
    return 0 if help_s < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
