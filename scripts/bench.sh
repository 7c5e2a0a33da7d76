#!/usr/bin/env bash
# Run every benchmark in bench/ (quick sizes; pass --full for the issue-sized runs where supported).
set -uo pipefail
cd "$(dirname "$0")/.."
rc=0
for script in bench/bench_*.py; do
  echo "== $script"
  .venv/bin/python "$script" "$@" || rc=1
done
exit $rc
