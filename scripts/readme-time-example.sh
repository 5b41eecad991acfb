#!/usr/bin/env bash
# Run README.md's time example (the sh block between the time-example
# markers: a table dropped by mistake and restored) as it is written, with the release build's
# `milliscale` and the given Python first on the PATH. Fails if the block
# fails; stops whatever it left running.
#   bash scripts/readme-time-example.sh [PYTHON_BIN_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_TARGET_DIR:-$PWD/target}/release:${1:+$1:}$PATH"
block=$(awk '/<!-- time-example -->/{on=1; next} /<!-- \/time-example -->/{on=0} on' README.md |
  sed '/^```/d')
[ -n "$block" ] || { echo "README.md has no time example" >&2; exit 1; }
out=$(mktemp)
# The block runs in its own shell; its background jobs are that shell's
# children, stopped at the end whatever happened.
set +e
bash -euo pipefail -c "trap 'kill \$(jobs -p) 2>/dev/null || true; wait' EXIT
$block" >"$out" 2>&1
rc=$?
set -e
cat "$out"
[ "$rc" -eq 0 ] || { echo "README's time example failed ($rc)" >&2; exit 1; }
grep -qx ' *100' "$out" ||
  { echo "README's time example did not bring the 100 orders back" >&2; exit 1; }
echo "README's time example ran"
