#!/usr/bin/env bash
# Molecule scenarios of the node roles (roles/<role>/molecule/default) against the lab's installed nodes,
# with molecule's delegated driver: molecule creates and destroys nothing. The nodes are reached through
# the Ansible inventory rackctl renders (pinned host keys, the lab's admin key and namespace relay), the
# one the network stage uses. Each scenario: syntax, prepare (role package_source), converge,
# idempotence (a second converge must change nothing), verify.
#
# Needs the lab up with its nodes installed and the head node serving (mirror, registry, time), e.g.
# the state `rackctl up` leaves (make demo), or the installed_lab test fixture (tests/inband).
# Usage: scripts/molecule.sh [role ...]        (default: every role that has a molecule/ directory)
#   RACKCTL_STATE_DIR   the run's state dir   (default .rackctl/lab, as make demo)
#   RACKCTL_LAB_DIR     the lab's directory   (default .lab)
#   RACKCTL_INVENTORY   the cluster inventory (default inventory/lab.yml)
#   RACKCTL_MOLECULE_HOSTS  the hosts pattern (default all:!head: the lab's head node is this machine)
#   RACKCTL_PYTHON      the Python with rackctl, ansible and molecule (default .venv/bin/python)
#   RACKCTL_MOLECULE_COMMAND  the molecule command (default test; verify checks nodes already converged)
#   RACKCTL_ANSIBLE_STRATEGY  mitogen (default) or linear, as for rackctl's own runs
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${RACKCTL_PYTHON:-.venv/bin/python}"
PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"  # absolute: each scenario runs from its role
export RACKCTL_STATE_DIR="${RACKCTL_STATE_DIR:-$PWD/.rackctl/lab}"
export RACKCTL_LAB_DIR="${RACKCTL_LAB_DIR:-$PWD/.lab}"
INV="${RACKCTL_INVENTORY:-inventory/lab.yml}"
# molecule runs ansible-config & co: the ones beside this Python, venv activated or not
export PATH="$(cd "$(dirname "$PY")" && pwd):$PATH"
"$PY" -m molecule --version >/dev/null 2>&1 || { echo "molecule: not installed (pip install -e '.[test]')" >&2; exit 3; }
"$PY" -m bootstrap inventory render -i "$INV" --state-dir "$RACKCTL_STATE_DIR" >/dev/null
export RACKCTL_INVENTORY_DIR="$RACKCTL_STATE_DIR/ansible/inventory"
# the strategy rackctl's own runs use (RACKCTL_ANSIBLE_STRATEGY, default Mitogen's: one Python per host for
# the run instead of one per task, which is what a task costs on a TCG VM): the scenarios run as the stage does
settings="$("$PY" -c 'import shlex, sys
from bootstrap.ansible_driver import strategy, strategy_env
from bootstrap.errors import RackctlError
try:
    env = strategy_env(strategy())
except RackctlError as exc:
    sys.exit(f"molecule.sh: {exc}")
for k, v in env.items(): print(f"export {k}={shlex.quote(v)}")')" || exit 2
eval "$settings"
roles=("$@")
if [ ${#roles[@]} -eq 0 ]; then
  for dir in roles/*/molecule/default; do roles+=("$(basename "$(dirname "$(dirname "$dir")")")"); done
fi
for role in "${roles[@]}"; do
  echo "== molecule ${RACKCTL_MOLECULE_COMMAND:-test}: role $role"
  (cd "roles/$role" && "$PY" -m molecule "${RACKCTL_MOLECULE_COMMAND:-test}" --scenario-name default)
done
