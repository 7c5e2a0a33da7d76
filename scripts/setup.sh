#!/usr/bin/env bash
# Set up everything rackctl, its tests and its lab need on a fresh Debian/Ubuntu machine:
# Debian packages (scripts/apt-packages.txt) and a virtualenv in .venv with rackctl and its lab (lab/)
# installed editable.
# Idempotent: a second run only checks. Used by `make setup` (and so by `make test` and `make demo`).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# Debian's python3.11: the tritonserver python backend stub embeds Debian's libpython3.11, so the venv
# that runs model code must be built from /usr/bin/python3.11 (see docs/architecture.md, "Triton").
packages=(python3 python3-venv python3-dev gcc)
while read -r pkg rest; do
  [ -n "$pkg" ] && [ "${pkg#\#}" = "$pkg" ] || continue
  # "PKG unless-command CMD": only where CMD is not on PATH already (e.g. a kubectl from another package,
  # such as the Google Cloud CLI's, which conflicts with Debian's kubernetes-client)
  if [ "${rest%% *}" = "unless-command" ] && command -v "${rest#unless-command }" >/dev/null; then continue; fi
  packages+=("$pkg")
done < scripts/apt-packages.txt
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=/usr/bin/python3.11
[ -x "$PY" ] || PY=/usr/bin/python3
stamp=.venv/.rackctl-setup
want="$(cat pyproject.toml lab/pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv from $PY"
  "$PY" -m venv .venv
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  # the test extra names every extra of the product (cluster, triton, load-check): the suite runs them all
  echo "setup: installing rackctl with its extras, its lab (lab/) and the test dependencies into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[test]" -e ./lab
  echo "$want" > "$stamp"
fi
echo "setup: ok ($(.venv/bin/rackctl --version))"
