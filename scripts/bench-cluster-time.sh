#!/usr/bin/env bash
# What a cluster's point in time costs (design record 0012, "A cluster's
# past"): three `serve --cluster` shards with a window, on file:// stores,
# run Retwis for DURATION seconds; at half time a point is taken. Then
# `cluster restore --at` and `cluster clone --at` that point, each timed
# (their --json reports: the log each shard read, how far, the rows), and
# the clone's shards started once (their first open loads the sources'
# objects). Prints one JSON object per step.
#   bash scripts/bench-cluster-time.sh [DURATION_S] [KEYS]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${MILLISCALE_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/milliscale}
duration=${1:-20}
keys=${2:-100000}
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait; rm -rf "$dir"' EXIT
map="file://$dir/map"
shards=(); restored=(); cloned=()
for s in 0 1 2; do
  shards+=(--shard "127.0.0.1:775$s=file://$dir/s$s")
  restored+=(--to-shard "$s=file://$dir/r$s" --addr "$s=127.0.0.1:776$s")
  cloned+=(--to-shard "$s=file://$dir/c$s" --addr "$s=127.0.0.1:777$s")
done
"$B" cluster init --map "$map" --even-table retwis "${shards[@]}" > /dev/null
for s in 0 1 2; do
  "$B" serve --cluster "$map" --shard $s --store "file://$dir/s$s" --retention 1h > "$dir/serve$s.log" 2>&1 &
done
sleep 2
half=$((duration / 2))
"$B" bench retwis --server 127.0.0.1:7750 --clients 8 --keys "$keys" --warmup-s 0 --duration-s "$half" --json > "$dir/first.json"
point=$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)
"$B" bench retwis --server 127.0.0.1:7751 --clients 8 --keys "$keys" --warmup-s 0 --duration-s "$half" --seed 2 --json > "$dir/second.json"
sleep 3
echo "{\"step\": \"load\", \"duration_s\": $duration, \"keys\": $keys, \"store_bytes\": $(du -sb "$dir" | cut -f1)}"
t0=$(date +%s.%N)
"$B" cluster restore --map "$map" --at "$point" --to-map "file://$dir/r" "${restored[@]}" --json > "$dir/restore.json"
t1=$(date +%s.%N)
echo "{\"step\": \"restore\", \"s\": $(echo "$t1 - $t0" | bc), \"report\": $(cat "$dir/restore.json")}"
"$B" cluster clone --map "$map" --at "$point" --to-map "file://$dir/c" "${cloned[@]}" --json > "$dir/clone.json" 2> "$dir/clone.err"
t2=$(date +%s.%N)
echo "{\"step\": \"clone\", \"s\": $(echo "$t2 - $t1" | bc), \"clone_bytes\": $(du -sbc "$dir"/c? | tail -1 | cut -f1), \"report\": $(cat "$dir/clone.json")}"
for s in 0 1 2; do
  "$B" serve --cluster "file://$dir/c" --shard $s --store "file://$dir/c$s" > "$dir/clone$s.log" 2>&1 &
done
t3=$(date +%s.%N)
for port in 7770 7771 7772; do
  until "$B" cluster status --server "127.0.0.1:$port" > /dev/null 2>&1; do sleep 0.1; done
done
t4=$(date +%s.%N)
echo "{\"step\": \"clone_first_open\", \"s\": $(echo "$t4 - $t3" | bc)}"
