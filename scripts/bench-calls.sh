#!/usr/bin/env bash
# What a call costs through `milliscale serve`, and interactive YCSB-A
# (10 keys a transaction, each read and, in a read-modify-write one,
# patched, as `bench ycsb --interactive` runs them) against the embedded
# engine: this working tree's binary and, for an A/B, OLD_BIN (another
# commit's `milliscale`), alternating, the order rotating with the seed, a
# fresh `serve --store sim://s3x?seed=S` per run, seeds 1..SEEDS.
#
# Runs (each binary's, where it has them):
# - embedded, embedded-2: the main job (2 threads), before and after; the
#   ratios are against their mean;
# - interactive: `bench ycsb --server --interactive`, SESSIONS sessions
#   (on the connection's CallStream where the binary has it, else unary
#   calls: old-interactive is the unary calls' figure);
# - interactive-pipelined, interactive-get-many,
#   interactive-get-many-pipelined (new binary only);
# - one-shot-pipelined: each transaction one message, answered at
#   pre-commit;
# - call: one Get at a time in an open read-only transaction (new binary;
#   with --unary as calls), and old-ping (Status calls): what a call
#   costs.
# Prints per run and the medians: throughput, commit p50, server and
# client CPU per transaction, and the ratio to the embedded runs.
# Usage: OLD_BIN=path scripts/bench-calls.sh [SEEDS] [SECONDS] [SESSIONS] [RECORDS]
set -euo pipefail
seeds=${1:-3}
secs=${2:-8}
sessions=${3:-256}
records=${4:-1000000}
source "$(dirname "$0")/bench-common.sh"  # bin, out; builds; prints the machine
old=${OLD_BIN:-}
echo "seeds=1..$seeds seconds=$secs sessions=$sessions records=$records; old binary: ${old:-none}; raw reports in $out"
common=(bench ycsb --workload a --records "$records" --duration-s "$secs" --warmup-s 2 --json)
run() { # binary label seed mode-args...
    local b=$1 label=$2 seed=$3
    shift 3
    if [ "$1" = embedded ]; then
        "$b" "${common[@]}" --seed "$seed" --threads 2 --store sim://s3x > "$out/$label-$seed.json"
        return
    fi
    "$b" serve --store "sim://s3x?seed=$seed" --listen 127.0.0.1:0 > "$out/serve.out" 2> "$out/serve-$label-$seed.err" &
    local pid=$!
    for _ in $(seq 1 80); do grep -q '^listening' "$out/serve.out" && break; sleep 0.25; done
    local addr
    addr=$(sed -n 's/^listening on //p' "$out/serve.out")
    "$b" "${common[@]}" --seed "$seed" --threads 2 --client-threads 1 --server "$addr" --sessions "$sessions" "$@" > "$out/$label-$seed.json"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}
runs=(
    "new:embedded:embedded"
    "new:interactive:--interactive"
    "new:interactive-pipelined:--interactive --pipelined"
    "new:interactive-get-many:--interactive --get-many"
    "new:interactive-get-many-pipelined:--interactive --get-many --pipelined"
    "new:one-shot-pipelined:--pipelined"
    "new:call:--call"
    "new:call-unary:--call --unary"
    "new:embedded-2:embedded"
)
if [ -n "$old" ]; then
    runs+=(
        "old:old-interactive:--interactive"
        "old:old-one-shot-pipelined:--pipelined"
        "old:old-ping:--ping"
    )
fi
for seed in $(seq 1 "$seeds"); do
    n=${#runs[@]}
    for i in $(seq 0 $((n - 1))); do
        IFS=: read -r which label args <<< "${runs[$(( (i + (seed - 1) * 4) % n ))]}"
        b=$bin
        [ "$which" = old ] && b=$old
        # shellcheck disable=SC2086
        run "$b" "$label" "$seed" $args
    done
    echo "seed $seed done"
done
python3 - "$out" "$seeds" <<'PY'
import glob, json, os, statistics, sys
d, seeds = sys.argv[1], int(sys.argv[2])
labels = sorted({os.path.basename(f).rsplit('-', 1)[0] for f in glob.glob(f'{d}/*.json')})
def load(name, s):
    r = json.load(open(f'{d}/{name}-{s}.json'))
    x = r.get('extra', {})
    return dict(tps=r['txn_per_s'], p50=r['commit_latency']['p50_us'] / 1e3,
                scpu=x.get('server_cpu_us_per_txn'), ccpu=x.get('client_cpu_us_per_txn'))
def emb(s):
    return (load('embedded', s)['tps'] + load('embedded-2', s)['tps']) / 2
print('| seed | run | txn/s | commit p50 ms | server CPU µs/txn | client CPU µs/txn | txn/s / embedded |')
print('|---:|---|---:|---:|---:|---:|---:|')
med = {}
for s in range(1, seeds + 1):
    for n in labels:
        r = load(n, s)
        cpu = lambda v: '' if v is None else f'{v:.1f}'
        ratio = r['tps'] / emb(s)
        med.setdefault(n, []).append((ratio, r['scpu'] or 0, r['ccpu'] or 0))
        print(f"| {s} | {n} | {r['tps']:,.0f} | {r['p50']:.2f} | {cpu(r['scpu'])} | {cpu(r['ccpu'])} | {ratio:.3f}x |")
print()
print('| run | txn/s / embedded (median, range) | server + client CPU µs/txn (median) |')
print('|---|---:|---:|')
for n, v in med.items():
    rs = [x[0] for x in v]
    print(f'| {n} | {statistics.median(rs):.3f}x ({min(rs):.3f}-{max(rs):.3f}) | '
          f'{statistics.median(x[1] for x in v):.1f} + {statistics.median(x[2] for x in v):.1f} |')
PY
