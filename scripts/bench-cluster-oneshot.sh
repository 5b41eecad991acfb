#!/usr/bin/env bash
# The same one-shot YCSB-A transaction (10 keys: a get and a patch of
# each, or 10 gets) through `milliscale serve` with `Client::execute`, and
# through a one-shard cluster (`serve --cluster`) with `Cluster::execute`,
# the shard running each batch whole (`ShardExecute`, a message on the
# connection's `ShardStream`; and again with --unary, a call each). Same sessions,
# records, store and seed, one after the other (order alternating with
# the seed), SERIALIZABLE (a cluster's only level), seeds 1..SEEDS; the database on the simulated S3 Express
# store in the server's process (sim://s3x?seed=SEED), the map in a
# directory. Prints each run and the ratio cluster / serve per seed, with
# the server's and the client's CPU per transaction.
# WORKLOAD (default a) and OPS (operations per transaction, default 10)
# in the environment change the transaction: WORKLOAD=c OPS=1, one get in
# a call, measures what a call costs beside its work.
# Usage: scripts/bench-cluster-oneshot.sh [SEEDS] [SECONDS] [SESSIONS] [RECORDS]
set -euo pipefail
seeds=${1:-3}
secs=${2:-8}
sessions=${3:-256}
records=${4:-100000}
workload=${WORKLOAD:-a}
ops=${OPS:-10}
source "$(dirname "$0")/bench-common.sh"  # bin, out; builds; prints the machine
echo "seeds=1..$seeds seconds=$secs sessions=$sessions records=$records workload=$workload ops=$ops; raw reports in $out"
common=(bench ycsb --workload "$workload" --ops-per-txn "$ops" --isolation serializable --records "$records"
        --duration-s "$secs" --warmup-s 2 --json --threads 2 --client-threads 1 --sessions "$sessions")
started() { # file: wait for the server's "listening on" line; print the address
    for _ in $(seq 1 120); do grep -q '^listening' "$1" && break; sleep 0.25; done
    sed -n 's/^listening on //p' "$1" | head -1
}
serve() { # seed
    "$bin" serve --store "sim://s3x?seed=$1" --listen 127.0.0.1:0 > "$out/serve.out" 2> "$out/serve-$1.err" &
    local pid=$!
    local addr
    addr=$(started "$out/serve.out")
    "$bin" "${common[@]}" --seed "$1" --server "$addr" > "$out/serve-$1.json"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}
cluster() { # seed [name extra-args...]: name "cluster" (shard calls on a stream) unless given
    local seed=$1 name=${2:-cluster} dir port
    shift; shift || true
    dir=$(mktemp -d)
    port=$(python3 "$(dirname "$0")/free-port.py")
    "$bin" cluster init --map "file://$dir/map" --shard "127.0.0.1:$port=sim://s3x?seed=$seed" > /dev/null
    "$bin" serve --cluster "file://$dir/map" --shard 0 --store "sim://s3x?seed=$seed" > "$out/shard.out" 2> "$out/$name-$seed.err" &
    local pid=$!
    started "$out/shard.out" > /dev/null
    "$bin" "${common[@]}" --seed "$seed" --server "127.0.0.1:$port" --cluster "$@" > "$out/$name-$seed.json"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    rm -rf "$dir"
}
for seed in $(seq 1 "$seeds"); do
    if [ $((seed % 2)) = 1 ]; then
        serve "$seed"; cluster "$seed"; cluster "$seed" cluster-unary --unary
    else
        cluster "$seed" cluster-unary --unary; cluster "$seed"; serve "$seed"
    fi
    echo "seed $seed done"
done
python3 - "$out" "$seeds" <<'PY'
import json, statistics, sys
d, seeds = sys.argv[1], int(sys.argv[2])
def load(name, s):
    r = json.load(open(f'{d}/{name}-{s}.json'))
    c, x = r['commit_latency'], r.get('extra', {})
    return dict(tps=r['txn_per_s'], p50=c['p50_us'] / 1e3, p99=c['p99_us'] / 1e3, aborted=r['aborted'],
                scpu=x['server_cpu_us_per_txn'], ccpu=x['client_cpu_us_per_txn'])
print('| seed | through | txn/s | commit p50 ms | commit p99 ms | aborts | server CPU µs/txn | client CPU µs/txn | cluster / serve |')
print('|---:|---|---:|---:|---:|---:|---:|---:|---:|')
ratios, unary = [], []
for s in range(1, seeds + 1):
    a, b, u = load('serve', s), load('cluster', s), load('cluster-unary', s)
    ratios.append(b['tps'] / a['tps'])
    unary.append(u['tps'] / a['tps'])
    for n, r, q in (('serve', a, ''), ('cluster (shard calls as calls)', u, f"{unary[-1]:.3f}x"),
                    ('cluster', b, f"{ratios[-1]:.3f}x")):
        print(f"| {s} | {n} | {r['tps']:,.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {r['aborted']} | {r['scpu']:.1f} | {r['ccpu']:.1f} | {q} |")
print(f'\ncluster / serve throughput: median {statistics.median(ratios):.3f}x (per seed: {", ".join(f"{r:.3f}" for r in ratios)})')
print(f'with the shard calls as calls: median {statistics.median(unary):.3f}x (per seed: {", ".join(f"{r:.3f}" for r in unary)})')
PY
