#!/usr/bin/env bash
# Engine-core benchmarks for BENCHMARKS.md :
#  - ordered-index candidates at 1M and 10M keys;
#  - YCSB-C and YCSB-A, uniform and zipfian, 1M records, 2 threads, no log;
#  - the same YCSB-C lookups on the raw index.
# This VM is noisy, so configurations run in alternating rounds and the
# summary reports medians and within-round ratios.
#
# Usage: scripts/bench-core.sh [ROUNDS] [SECONDS]   (defaults 5 and 5)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
SECS=${2:-5}
OUT=target/bench-core
mkdir -p "$OUT"
rm -f "$OUT"/*.json
cargo build --release --quiet
BIN=target/release/milliscale

echo "index candidates (1M, 10M keys)..." >&2
$BIN bench index --keys 1000000,10000000 --threads 2 --phase-secs 3 --json > "$OUT/index.json"

run() { # name args...
  local name=$1; shift
  $BIN bench ycsb --records 1000000 --threads 2 --duration-s "$SECS" --warmup-s 1 --json "$@" \
    > "$OUT/$name.r$round.json"
}
for round in $(seq 1 "$ROUNDS"); do
  echo "ycsb round $round/$ROUNDS..." >&2
  run c-uniform-engine --workload c --dist uniform
  run c-uniform-raw    --workload c --dist uniform --engine raw-index
  run c-zipfian-engine --workload c --dist zipfian
  run c-zipfian-raw    --workload c --dist zipfian --engine raw-index
  run a-uniform-engine --workload a --dist uniform
  run a-zipfian-engine --workload a --dist zipfian
done
python3 scripts/summarize-core.py "$OUT" "$ROUNDS"
