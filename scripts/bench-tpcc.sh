#!/usr/bin/env bash
# TPC-C comparisons, in alternating rounds:
#  - variants: milliscale (shared log buffers, record-level tracking)
#    against s3x (a buffer per thread, transaction-level tracking), both on
#    sim://s3x: append requests/s and throughput;
#  - logging: delta against full-record, NewOrder + Payment only: log
#    bytes per logged transaction.
# Usage: scripts/bench-tpcc.sh [ROUNDS] [SECONDS] [WAREHOUSES] [THREADS]
set -euo pipefail
rounds=${1:-3}
secs=${2:-20}
wh=${3:-10}
threads=${4:-8}
source "$(dirname "$0")/bench-common.sh"  # bin, out; builds; prints the machine
echo "rounds=$rounds seconds=$secs warehouses=$wh threads=$threads; raw reports in $out"
for r in $(seq 1 "$rounds"); do
    for v in milliscale s3x; do
        $bin bench tpcc --variant $v --warehouses "$wh" --threads "$threads" \
            --duration-s "$secs" --warmup-s 2 --json > "$out/variant-$v-$r.json"
    done
    for l in delta full; do
        flag=""
        [ $l = full ] && flag=--full-record-logging
        $bin bench tpcc --mix 50,50,0,0,0 $flag --warehouses "$wh" --threads "$threads" \
            --duration-s "$secs" --warmup-s 2 --json > "$out/logging-$l-$r.json"
    done
done
python3 scripts/summarize-tpcc.py "$out" "$rounds"
