#!/usr/bin/env bash
# Build kube-apiserver 1.20.2 from Debian bookworm's `kubernetes` source package with Go 1.15
# (bullseye's golang-1.15-go; bookworm's Go 1.19 miscompiles the vendored reflect2), offline
# (GOPROXY=off, vendor/). Test/lab tool: the tests in tests/cluster/test_real_apiserver.py run the
# result against `render cluster` output. Cached by source version + Go version, so a second run is
# instant. Prints the binary's path on stdout as its last line.
#
#   scripts/build-kube-apiserver.sh            # install deps if needed, build or reuse the cache
#   RACKCTL_CACHE=/some/dir scripts/build-kube-apiserver.sh
set -euo pipefail

SRC_VERSION=1.20.2
GO_PKG=golang-1.15-go
CACHE_ROOT="${RACKCTL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rackctl}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi

log() { echo "build-kube-apiserver: $*" >&2; }

ensure_bullseye_go() {
    # bullseye source + pin: ONLY golang-1.15* may come from bullseye (priority -1 for everything else).
    local list=/etc/apt/sources.list.d/rackctl-bullseye.sources
    local pin=/etc/apt/preferences.d/rackctl-bullseye-golang
    local changed=0
    if [ ! -f "$list" ]; then
        printf '%s\n' "Types: deb" "URIs: http://deb.debian.org/debian" "Suites: bullseye" \
            "Components: main" "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" \
            | $SUDO tee "$list" >/dev/null
        changed=1
    fi
    if [ ! -f "$pin" ]; then
        $SUDO tee "$pin" >/dev/null <<'PIN'
Package: *
Pin: release n=bullseye
Pin-Priority: -1

Package: golang-1.15*
Pin: release n=bullseye
Pin-Priority: 500
PIN
        changed=1
    fi
    if [ ! -x /usr/lib/go-1.15/bin/go ]; then
        if [ "$changed" = 1 ] || [ ! -d /var/lib/apt/lists ] || ! apt-cache policy "$GO_PKG" | grep -q Candidate; then
            $SUDO apt-get update -qq >&2
        fi
        log "installing $GO_PKG from bullseye"
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$GO_PKG" >&2
    fi
}

ensure_build_deps() {
    local missing=()
    for p in dpkg-dev rsync make etcd-server; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        log "installing ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
    fi
    if ! grep -rqs '^deb-src\|^Types:.*deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        # apt refuses a deb-src entry whose Signed-By differs from the matching deb entry's: copy its choice.
        local signed=()
        if grep -rqs '^Signed-By:.*debian-archive-keyring' /etc/apt/sources.list.d/ \
            || grep -qs 'signed-by=' /etc/apt/sources.list; then
            signed=("Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg")
        fi
        printf '%s\n' "Types: deb-src" "URIs: http://deb.debian.org/debian" "Suites: bookworm" \
            "Components: main" "${signed[@]}" \
            | $SUDO tee /etc/apt/sources.list.d/rackctl-bookworm-src.sources >/dev/null
        $SUDO apt-get update -qq >&2
    fi
}

ensure_bullseye_go
ensure_build_deps
GO_VERSION="$(/usr/lib/go-1.15/bin/go version | awk '{print $3}')"
OUT_DIR="$CACHE_ROOT/kube-apiserver-$SRC_VERSION-$GO_VERSION"
BIN="$OUT_DIR/kube-apiserver"
if [ -x "$BIN" ]; then
    log "cached: $BIN"
    echo "$BIN"
    exit 0
fi

WORK="$CACHE_ROOT/build-kubernetes-$SRC_VERSION"
mkdir -p "$WORK" "$OUT_DIR"
start=$(date +%s)
if [ ! -d "$WORK/src" ]; then
    log "apt-get source kubernetes (bookworm: 1.20.5+really1.20.2)"
    rm -rf "$WORK/tmp" && mkdir -p "$WORK/tmp"
    (cd "$WORK/tmp" && apt-get source -qq --download-only kubernetes >&2 \
        && dpkg-source -x --no-check ./*.dsc src >&2)
    mv "$WORK/tmp/src" "$WORK/src"
    rm -rf "$WORK/tmp"
fi
log "make WHAT=cmd/kube-apiserver (nice -n 19, GOPROXY=off, $GO_VERSION)"
(
    cd "$WORK/src"
    export PATH="/usr/lib/go-1.15/bin:$PATH" GOPROXY=off GOFLAGS=-mod=vendor GO111MODULE=on
    # (hack/lib/golang.sh keeps its own Go build cache under _output/.)
    export KUBE_GIT_VERSION="v$SRC_VERSION" KUBE_GIT_TREE_STATE=clean
    nice -n 19 make WHAT=cmd/kube-apiserver >&2
)
built="$(find "$WORK/src/_output" -type f -name kube-apiserver -perm -u+x | head -n1)"
if [ -z "$built" ]; then
    log "no kube-apiserver binary under $WORK/src/_output"
    exit 1
fi
cp "$built" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
log "built in $(($(date +%s) - start)) s: $BIN"
echo "$BIN"
