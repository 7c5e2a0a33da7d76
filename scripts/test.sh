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
# The native cluster's components (tests/ansible/test_kubernetes_cluster_real.py, marker native_cluster) and
# the lab's Kubernetes packages' (tests/mirror/test_lab_kubernetes_packages.py: kubelet, crictl) build
# in the background beside the tests; those tests wait on each program's cache lock, so a build still going
# is waited for, never raced. The native cluster's module runs first on its worker (after test_nspawn's
# minute), so on a cold machine that worker waits for this build while the other runs the VM tests: not
# niced, it is the critical path then. Cached after the first run like every component.
# The autoscaling group last (Prometheus, its operator and reloader, KEDA's operator and metrics server: the
# Triton test's last part, about 15 minutes after the module starts, waits on them; a cold build of the group
# takes about 18 minutes on 2 cores, mostly KEDA's scalers' SDKs; docs/lab-kubernetes.md).
NATIVE=(kubelet crictl kube-controller-manager kube-scheduler containerd containerd-shim-runc-v2 ctr pause etcdctl
  kube-proxy coredns flanneld flannel bridge host-local loopback portmap local-path-provisioner autoscaling)
mkdir -p .rackctl
echo "== Kubernetes 1.37.2 for the native cluster test, in the background (log: .rackctl/components-native.log)"
.venv/bin/rackctl lab components --kubernetes 1.37.2 "${NATIVE[@]/#/--only=}" \
  > .rackctl/components-native.log 2>&1 &
NATIVE_BUILD=$!
export RACKCTL_REQUIRE_COMPONENTS=1
# Two workers (pytest-xdist): one takes the tests on nspawn machines (marks native_cluster, machine) as one
# group, the other the VM labs' (mark vm) as another, each in order, beside each other; whichever is done
# first takes the rest (tests/installed_lab.py, one_worker_per_machine_group). RACKCTL_TEST_WORKERS=0 runs
# it all in this process.
WORKERS="${RACKCTL_TEST_WORKERS:-2}"
XDIST=()
if [ "$WORKERS" != 0 ]; then XDIST=(-n "$WORKERS" --dist loadgroup --no-loadscope-reorder); fi
echo "== pytest (${WORKERS} workers)"
status=0
.venv/bin/pytest -q --durations=25 "${XDIST[@]}" "$@" || status=$?
if ! wait "$NATIVE_BUILD"; then
  echo "the native cluster's components did not build:" >&2
  tail -20 .rackctl/components-native.log >&2
  status=1
fi
exit "$status"
