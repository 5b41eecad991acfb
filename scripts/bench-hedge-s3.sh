#!/usr/bin/env bash
# Hedged appends through a real S3 client: YCSB-A on `s3://` against the
# emulator with the s3x latency preset, over loopback HTTP. The S3 store
# hedges inside its own tokio runtime (`ObjectStore::append_hedged`), so a
# hedge costs the flusher no thread hand-off. Each run gets a fresh
# emulator with latency seed 1..SEEDS, the same seed with `--hedging off`
# and with the default (`auto`, which hedges in the s3 client), so both
# meet the same latency draws.
# Usage: scripts/bench-hedge-s3.sh [SEEDS] [SECONDS] [RECORDS]
set -euo pipefail
seeds=${1:-3}
secs=${2:-8}
records=${3:-200000}
source "$(dirname "$0")/bench-common.sh"  # bin, out; builds; prints the machine
echo "seeds=1..$seeds seconds=$secs records=$records; raw reports in $out"
ycsb() { # threads name [flags...], against the emulator at $ep
    local threads=$1 name=$2
    shift 2
    $bin bench ycsb --workload a --records "$records" --duration-s "$secs" --warmup-s 2 \
        --threads "$threads" --store "s3://bench/run?endpoint=$ep" --json "$@" > "$out/$name.json"
}
run() { # seed threads name [flags...]
    local seed=$1
    shift
    with_emulator "$seed" ycsb "$@"
}
for seed in $(seq 1 "$seeds"); do
    for threads in 2 8; do
        run "$seed" "$threads" "t$threads-plain-$seed" --hedging off
        run "$seed" "$threads" "t$threads-hedged-$seed"
    done
done
python3 - "$out" "$seeds" <<'PY'
import json, sys
out, seeds = sys.argv[1], range(1, int(sys.argv[2]) + 1)
print("\n| threads | seed | appends | txn/s | commit p50 ms | commit p99 ms | commit p99.9 ms | hedged appends/s |")
print("|---:|---:|---|---:|---:|---:|---:|---:|")
for threads in (2, 8):
    for seed in seeds:
        for kind in ("plain", "hedged"):
            r = json.load(open(f"{out}/t{threads}-{kind}-{seed}.json"))
            c = r["commit_latency"]
            print(f"| {threads} | {seed} | {kind} | {r['txn_per_s']:,.0f} | {c['p50_us']/1e3:.1f} "
                  f"| {c['p99_us']/1e3:.1f} | {c['p999_us']/1e3:.1f} | {r['log'].get('hedged_appends_per_s', 0):.1f} |")
PY
