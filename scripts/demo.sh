#!/usr/bin/env bash
# The demo: set up, start the built-in lab, run `rackctl up` against it end to end, stop the lab.
# It runs as far as the product goes today and says where it stops (see README, "Status").
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit $?
export RACKCTL_STATE_DIR="${RACKCTL_STATE_DIR:-$PWD/.rackctl/lab}"
INV=inventory/lab.yml
rackctl() { .venv/bin/rackctl "$@"; }

trap 'echo "== rackctl lab down"; rackctl lab down -i "$INV" >/dev/null || true' EXIT
echo "== rackctl lab up (network namespace + bridge, one libvirt VM per node, emulated iDRACs driving them)"
rackctl lab up -i "$INV" || exit $?
echo "== rackctl validate"
rackctl validate -i "$INV" || exit $?
echo "== rackctl plan"
rackctl plan -i "$INV" || exit $?
echo "== rackctl up"
rackctl up -i "$INV" --yes
rc=$?
if [ $rc -eq 4 ]; then
  echo "demo: rackctl up ran every implemented stage and stopped at the first one not built yet (exit 4)."
  exit 0
fi
exit $rc
