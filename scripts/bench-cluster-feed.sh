#!/usr/bin/env bash
# A cluster's change feed (design record 0014, "A cluster"): N `milliscale
# serve --cluster` shards on the emulator (s3x preset, latency seed SEED),
# Retwis through the cluster client (8 clients, SECONDS), and a consumer,
# `milliscale changes --map`, in a process of its own reading the shards'
# logs from the emulator. Per transaction delivered: how long after its
# commit timestamp it came; per resolved timestamp: how far behind the
# clock it was (one machine's clock for all: the shards', the clients',
# the consumer's); the first and last 2 s left out. Then the shards are
# left idle for 5 s: how far the resolved timestamp falls behind while
# idle (the clients are gone then). The store's own request latencies are
# the s3x preset's (docs/latency-model.md). Uses the release build.
# Usage: scripts/bench-cluster-feed.sh [N] [SEED] [SECONDS]
set -euo pipefail
B="${MILLISCALE_BIN:-${CARGO_TARGET_DIR:-$(cd "$(dirname "$0")/.." && pwd)/target}/release/milliscale}"
N=${1:-3}; SEED=${2:-1}; SECS=${3:-10}
export AWS_ACCESS_KEY_ID=milliscale AWS_SECRET_ACCESS_KEY=milliscale-secret
D=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; rm -rf "$D"' EXIT
port=$((9300 + RANDOM % 500))
$B emulator --port $port --preset s3x --seed "$SEED" --bucket bench > "$D/emu.out" 2> "$D/emu.err" &
for _ in $(seq 1 40); do [ -s "$D/emu.out" ] && break; sleep 0.25; done
at="?endpoint=http://127.0.0.1:$port"
args=()
for s in $(seq 0 $((N-1))); do args+=(--shard "127.0.0.1:$((port+10+s))=s3://bench/s$s$at"); done
$B cluster init --map "s3://bench/map$at" "${args[@]}" > /dev/null
for s in $(seq 0 $((N-1))); do
  $B serve --cluster "s3://bench/map$at" --shard "$s" --store "s3://bench/s$s$at" > "$D/s$s.out" 2> "$D/s$s.err" &
done
for s in $(seq 0 $((N-1))); do for _ in $(seq 1 80); do grep -q '^listening' "$D/s$s.out" && break; sleep 0.25; done; done
start=$(date +%s)
# Each line timed as it arrives (the consumer flushes at each resolved
# timestamp, the transactions it passed printed just before it).
$B changes --map "s3://bench/map$at" --poll-min-ms 1 --for $((SECS + 12)) \
  | python3 -c 'import sys, time
for line in sys.stdin: print(int(time.time() * 1e6), line, end="", flush=True)' > "$D/feed.tsv" &
feed=$!
$B bench retwis --server 127.0.0.1:$((port+10)) --clients 8 --duration-s "$SECS" --warmup-s 0 --seed "$SEED" --json > "$D/r.json"
stop=$(date +%s.%N)
wait $feed || true
python3 - "$D" "$start" "$stop" "$SEED" "$N" <<'PY'
import json, sys
d, start, stop, seed, n = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
r = json.load(open(f"{d}/r.json"))
lag, res, idle, txns = [], [], [], 0
for line in open(f"{d}/feed.tsv"):
    at, body = line.split(" ", 1)
    at, v = int(at) / 1e6, json.loads(body)
    if "resolved" in v:
        behind = (at - v["resolved"] / 1e6) * 1e3
        if start + 2 < at < stop - 2:
            res.append(behind)
        elif at > stop + 1:
            idle.append(behind)
    else:
        txns += 1
        if start + 2 < at < stop - 2:
            lag.append((at - v["ts"] / 1e6) * 1e3)
pct = lambda xs, p: round(sorted(xs)[min(len(xs) - 1, int(p * len(xs)))]) if xs else None
print(json.dumps({"seed": int(seed), "shards": int(n), "txn_per_s": round(r["txn_per_s"]),
    "delivered": txns, "delivery_ms_p50": pct(lag, .5), "delivery_ms_p99": pct(lag, .99),
    "resolved_behind_ms_p50": pct(res, .5), "resolved_behind_ms_p99": pct(res, .99),
    "idle_resolved_behind_ms_max": max(idle) if idle else None}))
PY
