#!/usr/bin/env bash
# The test command (README, CI): set up, then the guards and the tests, each of which must pass:
# ruff (lint and format), import-linter contracts (product never imports the lab, redfish_tools never imports
# bootstrap, no import cycles), mypy (bootstrap, redfish_tools), ansible-lint (production profile), pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
PY_TREES=(bootstrap redfish_tools lab tests bench)
echo "== ruff check"
.venv/bin/ruff check "${PY_TREES[@]}"
echo "== ruff format --check"
.venv/bin/ruff format --check "${PY_TREES[@]}"
echo "== import-linter"
.venv/bin/lint-imports
echo "== mypy"
.venv/bin/mypy
echo "== ansible-lint (production profile)"
PATH="$PWD/.venv/bin:$PATH" .venv/bin/ansible-lint --profile production --offline -q playbooks roles
echo "== Kubernetes 1.37.2 for the tests' real API server, etcd, kubectl, kubeadm (built once, then cached)"
.venv/bin/rackctl lab components --kubernetes 1.37.2 \
  --only kube-apiserver --only etcd --only kubectl --only kubeadm
export RACKCTL_REQUIRE_COMPONENTS=1
echo "== pytest"
.venv/bin/pytest -q --durations=25 "$@"
