#!/usr/bin/env bash
# Retwis through the cluster client (`milliscale bench retwis --server`)
# on N `milliscale serve --cluster` shards on the emulator (s3x preset,
# latency seed SEED), 32 clients, SECONDS measured: throughput, abort rate
# and the CPU the shard processes and the client process spend per
# transaction (committed or aborted; the shards' from /proc over the run,
# the client's over its whole life). Uses the release build.
# Usage: scripts/bench-cluster-retwis-cpu.sh N [SEED] [SECONDS]
set -euo pipefail
B="${CARGO_TARGET_DIR:-$(cd "$(dirname "$0")/.." && pwd)/target}/release/milliscale"
N=$1; SEED=${2:-1}; SECS=${3:-6}
export AWS_ACCESS_KEY_ID=milliscale AWS_SECRET_ACCESS_KEY=milliscale-secret
D=$(mktemp -d)
port=$((9300 + RANDOM % 500))
$B emulator --port $port --preset s3x --seed $SEED --bucket bench > $D/emu.out 2> $D/emu.err &
EMU=$!
for _ in $(seq 1 40); do [ -s $D/emu.out ] && break; sleep 0.25; done; cat $D/emu.err | tail -2
at="?endpoint=http://127.0.0.1:$port"
args=()
for s in $(seq 0 $((N-1))); do args+=(--shard "127.0.0.1:$((port+10+s))=s3://bench/s$s$at"); done
$B cluster init --map "s3://bench/map$at" "${args[@]}" > /dev/null
pids=()
for s in $(seq 0 $((N-1))); do
  $B serve --cluster "s3://bench/map$at" --shard $s --store "s3://bench/s$s$at" > $D/s$s.out 2> $D/s$s.err &
  pids+=($!)
done
for s in $(seq 0 $((N-1))); do for _ in $(seq 1 80); do grep -q '^listening' $D/s$s.out && break; sleep 0.25; done; done
ticks() { local t=0; for p in "${pids[@]}"; do t=$((t + $(awk '{print $14 + $15}' /proc/$p/stat))); done; echo $t; }
before=$(ticks)
/usr/bin/time -f "%U %S %e" -o $D/time $B bench retwis --server 127.0.0.1:$((port+10)) --clients 32 --duration-s $SECS --warmup-s 1 --seed $SEED --json > $D/r.json
after=$(ticks)
python3 - "$D" "$before" "$after" "$N" <<'PY'
import json, sys
d, b, a, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
r = json.load(open(f"{d}/r.json"))
u, s, e = (float(x) for x in open(f"{d}/time").read().split())
txns = (r["committed"] + r["aborted"]) / r["duration_s"] * e
print(f"shards {n}: {r['txn_per_s']:.0f} txn/s, abort {100*r['abort_rate']:.1f}%, p50 {r['latency']['p50_ms']:.2f} ms; "
      f"shard CPU/txn {1e6*(a-b)/100/txns:.0f} us, client CPU/txn {1e6*(u+s)/txns:.0f} us")
PY
kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
kill $EMU; wait $EMU 2>/dev/null || true
