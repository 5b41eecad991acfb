#!/usr/bin/env bash
# A cluster grows under load: YCSB-A one-shot transactions (OPS keys
# each, default 1: every transaction on one shard) through the cluster
# client against 2 shards, the rebalancer on
# (splitting ranges past RECORDS/8 rows); it balances the 2 shards during
# the load and warm-up. 10 s into the measured time, `cluster add-shard`
# adds 2 shards and starts them; the rebalancer splits and moves ranges
# until the 4 are balanced (its log's `balanced` line, with each shard's
# rows). Each shard's database is on the simulated S3 Express store in its
# own process (sim://s3x?seed=SEED), the map in a directory. Per seed:
# the time from the add until balanced, the rows per shard then, the
# throughput before the add (mean per second) and the lowest second
# between the add and balanced (the dip), and whether the application saw
# an error (any error fails the benchmark's run). Seeds 1..SEEDS.
# The shards are 4 processes on this machine's cores once grown, so the
# level after the growth is the same machine's, not 4 machines'.
# Usage: scripts/bench-cluster-growth.sh [SEEDS] [SECONDS] [SESSIONS] [RECORDS]
set -euo pipefail
seeds=${1:-3}
secs=${2:-40}
sessions=${3:-64}
records=${4:-50000}
source "$(dirname "$0")/bench-common.sh"  # bin, out; builds; prints the machine
echo "seeds=1..$seeds seconds=$secs sessions=$sessions records=$records; raw reports in $out"
port() { python3 "$(dirname "$0")/free-port.py"; }
started() { # file: wait for the server's "listening on" line
    for _ in $(seq 1 120); do grep -q '^listening' "$1" && break; sleep 0.25; done
}
for seed in $(seq 1 "$seeds"); do
    dir=$(mktemp -d)
    map="file://$dir/map"
    ports=($(port) $(port) $(port) $(port))
    "$bin" cluster init --map "$map" --split zz=1 \
        --shard "127.0.0.1:${ports[0]}=sim://s3x?seed=$seed" \
        --shard "127.0.0.1:${ports[1]}=sim://s3x?seed=$((seed + 100))" > /dev/null
    "$bin" cluster rebalance on --map "$map" --split-rows $((records / 8)) > /dev/null
    pids=()
    start_shard() { # id
        "$bin" serve --cluster "$map" --shard "$1" --store "sim://s3x?seed=$((seed + 100 * $1))" \
            > "$dir/shard$1.out" 2> "$out/shard$1-$seed.err" &
        pids+=($!)
        started "$dir/shard$1.out"
    }
    start_shard 0
    start_shard 1
    "$bin" bench ycsb --workload a --ops-per-txn "${OPS:-1}" --isolation serializable --records "$records" \
        --duration-s "$secs" --warmup-s 20 --json --threads 2 --client-threads 1 \
        --sessions "$sessions" --seed "$seed" --server "127.0.0.1:${ports[0]}" --cluster \
        > "$out/growth-$seed.json" 2> "$out/bench-$seed.err" &
    bench=$!
    # The measured time starts once the load and the warm-up are over:
    # wait for the warm-up's end (the bench prints nothing before), then
    # 10 s more.
    for _ in $(seq 1 600); do
        grep -q "measuring" "$out/bench-$seed.err" 2>/dev/null && break
        sleep 0.1
    done
    sleep 10
    added=$(date +%s.%N)
    for s in 2 3; do
        "$bin" cluster add-shard --map "$map" --id "$s" --addr "127.0.0.1:${ports[$s]}" \
            --store "sim://s3x?seed=$((seed + 100 * s))" > /dev/null
        start_shard "$s"
    done
    ok=0
    wait "$bench" && ok=1
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
    python3 - "$out" "$seed" "$added" "$ok" <<'PY'
import datetime, glob, json, re, sys
out, seed, added, ok = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
if not ok:
    print(f"seed {seed}: the benchmark failed (an error reached the application): see {out}/bench-{seed}.err")
    sys.exit(0)
r = json.load(open(f"{out}/growth-{seed}.json"))
lines = []
for f in glob.glob(f"{out}/shard*-{seed}.err"):
    for l in open(f):
        if " balanced" in l:
            t = datetime.datetime.fromisoformat(l.split()[0].replace("Z", "+00:00")).timestamp()
            lines.append((t, l.strip()))
after = sorted(x for x in lines if x[0] > added)
start = float(r["extra"]["measure_started_unix_s"])
tl = r["timeline"]
add_i = int(added - start)
before = tl[:add_i]
if not after:
    print(f"seed {seed}: not balanced within the run; timeline {tl}")
    sys.exit(0)
bal_t, bal_line = after[0]
bal_i = int(bal_t - start) + 1
during = tl[add_i:bal_i] or [tl[add_i]]
mean = sum(before) / len(before)
rows = re.search(r"rows=(\{[^}]*\})", bal_line).group(1)
print(f"seed {seed}: balanced {bal_t - added:.1f} s after the add, rows {rows}; "
      f"before {mean:.0f} txn/s, lowest second during {min(during):.0f} txn/s "
      f"(dip {100 * (1 - min(during) / mean):.0f}%), after {sum(tl[bal_i:]) / max(1, len(tl[bal_i:])):.0f} txn/s; "
      f"0 errors; timeline {[int(x) for x in tl]}")
PY
    rm -rf "$dir"
done
