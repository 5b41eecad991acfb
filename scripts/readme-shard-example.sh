#!/usr/bin/env bash
# Run README.md's sharded example (the sh block between the shard-example
# markers) as it is written, with the release build's `milliscale` and the
# given Python (with the package installed) first on the PATH, in a
# scratch directory. Fails if the block fails, the Python transfer did not
# span two shards, the bank's 50 transfers were not all acknowledged, or
# the fourth shard was not added, a range split and one moved to it
# under the bank's transfers; stops
# whatever it left running.
#   bash scripts/readme-shard-example.sh [PYTHON_BIN_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_TARGET_DIR:-$PWD/target}/release:${1:+$1:}$PATH"
block=$(awk '/<!-- shard-example -->/{on=1; next} /<!-- \/shard-example -->/{on=0} on' README.md |
  sed '/^```/d')
[ -n "$block" ] || { echo "README.md has no shard example" >&2; exit 1; }
out=$(mktemp)
scratch=$(mktemp -d)
set +e
(cd "$scratch" && bash -euo pipefail -c "trap 'kill \$(jobs -p) 2>/dev/null; wait' EXIT
$block") >"$out" 2>&1
rc=$?
set -e
cat "$out"
rm -rf "$scratch"
[ "$rc" -eq 0 ] || { echo "README's shard example failed ($rc)" >&2; exit 1; }
grep -qx 'moved across shards \[0, 2\]' "$out" && grep -qx "b'90' b'10'" "$out" ||
  { echo "README's shard example did not move money across two shards from Python" >&2; exit 1; }
grep -qx '50' "$out" && grep -q '^retwis: ' "$out" ||
  { echo "README's shard example did not acknowledge 50 transfers and run Retwis" >&2; exit 1; }
grep -q 'version 2: shard 3 added' "$out" && grep -q 'a range begins at accounts=m' "$out" &&
  grep -Eq '^shard 3 .*127\.0\.0\.1:7704' "$out" ||
  { echo "README's shard example did not add shard 3 and split a range" >&2; exit 1; }
grep -q 'moved range bank=raaaaaaaaaaaaaaaa .* to shard 3: map version 4' "$out" && grep -qx '100' "$out" &&
  grep -Eq '^shard 3 .*ranges from bank/raaaaaaaaaaaaaaaa' "$out" ||
  { echo "README's shard example did not move a range to shard 3 under the bank" >&2; exit 1; }
echo "README's shard example ran"
