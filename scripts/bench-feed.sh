#!/usr/bin/env bash
# Change feeds beside the writer (design record 0014; `bench ycsb --feeds`):
# YCSB-A on sim://s3x, RECORDS records, seeds 1..SEEDS, in one process.
# Per seed, alternating (the order rotating by seed):
# - none: the writer alone;
# - feeds: the writer and 4 feeds, each consumed on a thread;
# - lag: the writer, a replica and 1 feed, both lag probes (the writer's
#   gCSN to the replica's visibility, watched without asking it to poll,
#   as a feed's consumer watches; and to the feed's resolved point)
#   beside the store's own single-read percentiles;
# - pinned / pinned+4: the writer's threads on core 0, alone or with 4
#   feeds on core 1 (as consumers on another machine would leave it).
# Prints, per run: writer txn/s, feed and replica lag p50/p99, the store's
# read p50/p99, and the first feed's catch-up rate (the load's log).
# Usage: scripts/bench-feed.sh [SEEDS] [SECONDS] [RECORDS]
set -euo pipefail
seeds=${1:-3}
secs=${2:-10}
records=${3:-200000}
source "$(dirname "$0")/bench-common.sh"  # bin, out; builds; prints the machine
echo "seeds=1..$seeds seconds=$secs records=$records; raw reports in $out"
ycsb=(bench ycsb --workload a --duration-s "$secs" --warmup-s 2 --json --records "$records" --store sim://s3x)
variants=(none feeds lag pinned pinned+4)
echo "| seed | run | writer txn/s | feed lag p50 / p99 ms | replica lag p50 / p99 ms | store read p50 / p99 ms | catch-up changes/s | feeds delivered txn/s |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for seed in $(seq 1 "$seeds"); do
    for i in "${!variants[@]}"; do
        v=${variants[$(( (i + seed - 1) % ${#variants[@]} ))]}
        case $v in
            none) extra=() ;;
            feeds) extra=(--feeds 4) ;;
            lag) extra=(--feeds 1 --replica --replica-readers 0 --replica-passive-probe) ;;
            pinned) extra=(--feeds 0 --feeds-pin) ;;
            pinned+4) extra=(--feeds 4 --feeds-pin) ;;
        esac
        $bin "${ycsb[@]}" --seed "$seed" "${extra[@]}" > "$out/$v-$seed.json"
        python3 - "$out/$v-$seed.json" "$seed" "$v" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
x = r.get("extra", {})
def pair(a, b):
    return f"{x[a]:.1f} / {x[b]:.1f}" if a in x and b in x else "-"
tput = r["txn_per_s"]
print(f"| {sys.argv[2]} | {sys.argv[3]} | {tput:,.0f} | {pair('feed_lag_p50_ms', 'feed_lag_p99_ms')} | "
      f"{pair('replica_lag_p50_ms', 'replica_lag_p99_ms')} | {pair('store_read_p50_ms', 'store_read_p99_ms')} | "
      f"{x.get('feed_catch_up_changes_per_s', 0):,.0f} | {x.get('feed_delivered_txn_per_s', 0):,.0f} |")
PY
    done
done
