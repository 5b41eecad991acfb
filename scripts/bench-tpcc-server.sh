#!/usr/bin/env bash
# TPC-C through `milliscale serve` from another process, against the
# embedded engine, on sim://s3x?seed=S, for seeds 1..SEEDS: per seed the
# embedded run (--threads 2 workers, pipelined commit), then a fresh server
# driven by `bench tpcc --server` with each count of SESSIONS (interactive
# transactions, a round trip per read or write, each commit waited for).
# Random warehouse per transaction (the paper's choice), the standard mix.
# PIPELINED=1 in the environment: the server's commits pipelined too
# (`--pipelined`: a terminal goes on at pre-commit, as the embedded
# workers do; latency still to the durable answer); GET_MANY=1: a body's
# reads of several keys of a table in one call (`--get-many`).
# Usage: scripts/bench-tpcc-server.sh [SEEDS] [SECONDS] [WAREHOUSES] [SESSIONS...]
set -euo pipefail
seeds=${1:-3}
secs=${2:-10}
wh=${3:-2}
shift $(( $# < 3 ? $# : 3 ))
sessions=("${@:-4 16}")
read -r -a sessions <<< "${sessions[*]}"
source "$(dirname "$0")/bench-common.sh"  # bin, out; builds; prints the machine
pipelined=()
[ -n "${PIPELINED:-}" ] && pipelined=(--pipelined)
[ -n "${GET_MANY:-}" ] && pipelined+=(--get-many)
echo "seeds=1..$seeds seconds=$secs warehouses=$wh sessions=${sessions[*]} ${pipelined[*]}; raw reports in $out"
common=(bench tpcc --warehouses "$wh" --threads 2 --duration-s "$secs" --warmup-s 2 --json)
for seed in $(seq 1 "$seeds"); do
    "$bin" "${common[@]}" --seed "$seed" --store "sim://s3x?seed=$seed" > "$out/embedded-$seed.json"
    for n in "${sessions[@]}"; do
        "$bin" serve --store "sim://s3x?seed=$seed" --listen 127.0.0.1:0 > "$out/serve.out" 2> "$out/serve-$n-$seed.err" &
        pid=$!
        for _ in $(seq 1 80); do grep -q '^listening' "$out/serve.out" && break; sleep 0.25; done
        addr=$(sed -n 's/^listening on //p' "$out/serve.out")
        "$bin" "${common[@]}" --seed "$seed" --server "$addr" --sessions "$n" "${pipelined[@]}" > "$out/server-$n-$seed.json"
        kill "$pid"
        wait "$pid" 2>/dev/null || true
    done
done
python3 - "$out" "$seeds" "${sessions[@]}" <<'PY'
import json, statistics, sys
out, seeds, sessions = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print('| seed | run | txn/s | tpmC | abort rate | NewOrder p50 ms | Payment p50 ms | server CPU µs/txn | load s | txn/s / embedded |')
print('|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|')
ratios = {n: [] for n in sessions}
for s in range(1, seeds + 1):
    emb = json.load(open(f'{out}/embedded-{s}.json'))
    runs = [('embedded', emb)] + [(f'server, {n} sessions', json.load(open(f'{out}/server-{n}-{s}.json'))) for n in sessions]
    for name, r in runs:
        x, lk = r['extra'], r['latency_by_kind']
        ratio = r['txn_per_s'] / emb['txn_per_s']
        cpu = x.get('server_cpu_us_per_txn')
        print(f"| {s} | {name} | {r['txn_per_s']:,.0f} | {x['tpmC']:,.0f} | {r['abort_rate']:.1%} | "
              f"{lk['new-order']['p50_us'] / 1e3:.2f} | {lk['payment']['p50_us'] / 1e3:.2f} | "
              f"{'' if cpu is None else f'{cpu:,.0f}'} | {x.get('load_s', 0):.1f} | {ratio:.3f}x |")
        if name != 'embedded':
            ratios[name.split(', ')[1].split()[0]].append(ratio)
print()
for n, v in ratios.items():
    print(f'server, {n} sessions: median {statistics.median(v):.3f}x the embedded throughput')
PY
