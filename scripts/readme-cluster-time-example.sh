#!/usr/bin/env bash
# Run README.md's cluster time example (the sh block between the
# cluster-time-example markers: a bank's cluster restored to the moment
# before a second client ran, and served read-only) as it is written, with
# the release build's `milliscale` and the given Python (with the package
# installed) first on the PATH. Fails if the block fails or the restored
# cluster does not hold the first client's 100 transfers, none of the
# second's, and the bank's total; stops whatever it left running.
#   bash scripts/readme-cluster-time-example.sh [PYTHON_BIN_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_TARGET_DIR:-$PWD/target}/release:${1:+$1:}$PATH"
block=$(awk '/<!-- cluster-time-example -->/{on=1; next} /<!-- \/cluster-time-example -->/{on=0} on' README.md |
  sed '/^```/d')
[ -n "$block" ] || { echo "README.md has no cluster time example" >&2; exit 1; }
out=$(mktemp)
set +e
bash -euo pipefail -c "trap 'kill \$(jobs -p) 2>/dev/null || true; wait' EXIT
$block" >"$out" 2>&1
rc=$?
set -e
cat "$out"
[ "$rc" -eq 0 ] || { echo "README's cluster time example failed ($rc)" >&2; exit 1; }
grep -qx 'total 1200' "$out" && grep -qx 'good 100' "$out" && grep -qx 'bad 0' "$out" ||
  { echo "README's cluster time example did not bring the cluster back to the point" >&2; exit 1; }
echo "README's cluster time example ran"
