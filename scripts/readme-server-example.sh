#!/usr/bin/env bash
# Run README.md's server example (the sh block between the
# server-example markers) as it is written, with the release build's
# `milliscale` and the given Python first on the PATH. Fails if the block
# fails; stops whatever it left running.
#   bash scripts/readme-server-example.sh [PYTHON_BIN_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_TARGET_DIR:-$PWD/target}/release:${1:+$1:}$PATH"
block=$(awk '/<!-- server-example -->/{on=1; next} /<!-- \/server-example -->/{on=0} on' README.md |
  sed '/^```/d')
[ -n "$block" ] || { echo "README.md has no server example" >&2; exit 1; }
out=$(mktemp)
# The block runs in its own shell; its background jobs are that shell's
# children, stopped at the end whatever happened.
set +e
bash -euo pipefail -c "trap 'kill \$(jobs -p) 2>/dev/null; wait' EXIT
$block" >"$out" 2>&1
rc=$?
set -e
cat "$out"
[ "$rc" -eq 0 ] || { echo "README's server example failed ($rc)" >&2; exit 1; }
grep -q "(b'alice', b'v1')" "$out" && grep -q "(b'carol', b'v3')" "$out" ||
  { echo "README's server example did not print the rows" >&2; exit 1; }
grep -q "^change [0-9]* \[(b'carol', b'v3')\]" "$out" ||
  { echo "README's server example: the change feed did not print carol's commit" >&2; exit 1; }
echo "README's server example ran"
