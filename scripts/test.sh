#!/usr/bin/env bash
# The test command (README, CI): set up, lint (ruff, ansible-lint production profile), then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "== ruff"
.venv/bin/ruff check bootstrap redfish_tools tests bench
echo "== ansible-lint (production profile)"
PATH="$PWD/.venv/bin:$PATH" .venv/bin/ansible-lint --profile production --offline -q playbooks roles
echo "== pytest"
.venv/bin/pytest -q "$@"
