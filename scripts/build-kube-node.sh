#!/usr/bin/env bash
# Build the rest of Kubernetes 1.20.2 (kubelet, kubeadm, kubectl, kube-controller-manager,
# kube-scheduler, kube-proxy) from the source tree that scripts/build-kube-apiserver.sh unpacked, with
# the same Go 1.15 from bullseye, offline (GOPROXY=off, vendor/), under `nice -n 19`. Research/lab tool
# (docs/kubernetes.md, "kubelet and kubeadm 1.20 on the lab VMs: measured"); nothing in CI runs it.
# Incremental: the tree's Go build cache under _output/ is reused. Cached by source version + Go
# version: a second run prints the directory and exits. Prints the output directory as its last line.
#
#   scripts/build-kube-node.sh                 # needs scripts/build-kube-apiserver.sh to have run
#   RACKCTL_CACHE=/some/dir scripts/build-kube-node.sh
set -euo pipefail

SRC_VERSION=1.20.2
BINARIES=(kubelet kubeadm kubectl kube-controller-manager kube-scheduler kube-proxy)
CACHE_ROOT="${RACKCTL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rackctl}"
HERE="$(cd "$(dirname "$0")" && pwd)"

log() { echo "build-kube-node: $*" >&2; }

# The apiserver script installs Go 1.15 and unpacks the source (or returns its cache at once).
"$HERE/build-kube-apiserver.sh" >/dev/null
GO_VERSION="$(/usr/lib/go-1.15/bin/go version | awk '{print $3}')"
OUT_DIR="$CACHE_ROOT/kube-node-$SRC_VERSION-$GO_VERSION"
all_cached() {
    local b
    for b in "${BINARIES[@]}"; do [ -x "$OUT_DIR/$b" ] || return 1; done
}
if all_cached; then
    log "cached: $OUT_DIR"
    echo "$OUT_DIR"
    exit 0
fi

SRC="$CACHE_ROOT/build-kubernetes-$SRC_VERSION/src"
if [ ! -d "$SRC" ]; then
    log "no source tree at $SRC (build-kube-apiserver.sh keeps it; was it deleted after its binary was cached?)"
    exit 1
fi
mkdir -p "$OUT_DIR"
start=$(date +%s)
what="$(printf 'cmd/%s ' "${BINARIES[@]}")"
log "make WHAT=\"${what% }\" (nice -n 19, GOPROXY=off, $GO_VERSION)"
(
    cd "$SRC"
    export PATH="/usr/lib/go-1.15/bin:$PATH" GOPROXY=off GOFLAGS=-mod=vendor GO111MODULE=on
    export KUBE_GIT_VERSION="v$SRC_VERSION" KUBE_GIT_TREE_STATE=clean
    nice -n 19 make WHAT="${what% }" >&2
)
for b in "${BINARIES[@]}"; do
    built="$SRC/_output/local/bin/linux/amd64/$b"
    if [ ! -x "$built" ]; then
        log "no $b under $SRC/_output"
        exit 1
    fi
    cp "$built" "$OUT_DIR/$b.tmp" && mv "$OUT_DIR/$b.tmp" "$OUT_DIR/$b"
done
log "built in $(($(date +%s) - start)) s: $OUT_DIR ($(du -sh "$OUT_DIR" | cut -f1))"
echo "$OUT_DIR"
