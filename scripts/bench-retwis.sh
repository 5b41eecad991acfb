#!/usr/bin/env bash
# Retwis across a cluster (`milliscale bench retwis`), on the emulator
# (s3x preset, latency seed = the run's seed): each shard a
# `milliscale serve --cluster` process with its database under its own
# prefix of the bucket, the shard map beside them, the clients in one
# process (the cluster client).
# Both processes' kinds share the machine's 2 cores. Per seed 1..SEEDS:
# - abort rate against contention α at ε = 53 µs (PTP) and 1.5 ms (NTP),
#   3 shards: the shape of MILANA's Fig. 7;
# - an ε sweep at α = 0.99;
# - local validation of read-only transactions off, against on;
# - 1, 2 and 3 shards (ε = 53 µs, α = 0.75), with the shard processes'
#   CPU and the client process's per transaction;
# - YCSB-T (4 read-modify-writes per transaction) on 3 shards;
# - the α sweep at 53 µs and 1.5 ms again with the shards' logs in memory
#   (`memory://`, no durability): a log write of microseconds, as
#   MILANA's DRAM backend, instead of an object-store append.
# The keys are in the table `retwis`, split evenly over the shards.
# Prints one table row per run and the medians.
# Usage: scripts/bench-retwis.sh [SEEDS] [SECONDS] [CLIENTS]
set -euo pipefail
seeds=${1:-3}
secs=${2:-6}
clients=${3:-32}
source "$(dirname "$0")/bench-common.sh"  # bin, out, with_emulator; builds
echo "seeds=1..$seeds seconds=$secs clients=$clients; raw reports in $out"
free_port() { python3 "$(dirname "$0")/free-port.py"; }
pids=()
start_shards() { # N TAG [memory]: publish a map of N shards under TAG and start them
    local n=$1 tag=$2 logs=${3:-} args=() stores=()
    map="s3://bench/$tag?endpoint=$ep"
    for s in $(seq 0 $((n - 1))); do
        local store="s3://bench/$tag/shard$s?endpoint=$ep"
        [ "$logs" = memory ] && store="memory://"
        local addr="127.0.0.1:$(free_port)"
        [ "$s" = 0 ] && server="$addr"
        args+=(--shard "$addr=$store")
        stores+=("$store")
    done
    "$bin" cluster init --map "$map" "${args[@]}" > /dev/null
    pids=()
    for s in $(seq 0 $((n - 1))); do
        "$bin" serve --cluster "$map" --shard "$s" --store "${stores[$s]}" \
            > "$out/shard-$tag-$s.out" 2> "$out/shard-$tag-$s.err" &
        pids+=($!)
    done
    for s in $(seq 0 $((n - 1))); do
        for _ in $(seq 1 80); do grep -q '^listening' "$out/shard-$tag-$s.out" && break; sleep 0.25; done
    done
}
stop_shards() {
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
}
shard_ticks() { # CPU clock ticks of the running shards, in all
    local t=0
    for p in "${pids[@]}"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
    echo "$t"
}
run() { # NAME SEED ARGS...: one bench run against the current map
    local name=$1 seed=$2
    shift 2
    local before
    before=$(shard_ticks)
    /usr/bin/time -f "%U %S %e" -o "$out/$name-$seed.time" \
        "$bin" bench retwis --server "$server" --clients "$clients" --duration-s "$secs" --warmup-s 1 \
        --seed "$seed" --json "$@" > "$out/$name-$seed.json"
    echo "$(( $(shard_ticks) - before ))" > "$out/$name-$seed.ticks"
}
one_seed() {
    local seed=$1
    start_shards 3 "s$seed-three"
    for alpha in 0.5 0.75 0.99; do
        for eps in 53 1500; do
            run "alpha$alpha-eps$eps" "$seed" --alpha "$alpha" --epsilon-us "$eps"
        done
    done
    for eps in 0 500 5000; do
        run "alpha0.99-eps$eps" "$seed" --alpha 0.99 --epsilon-us "$eps"
    done
    run "lv-off" "$seed" --alpha 0.75 --epsilon-us 53 --no-local-validation
    run "ycsb-t" "$seed" --alpha 0.75 --epsilon-us 53 --mix ycsb-t --ops 4
    stop_shards
    for n in 1 2; do
        start_shards "$n" "s$seed-n$n"
        run "shards$n" "$seed" --alpha 0.75 --epsilon-us 53
        stop_shards
    done
    start_shards 3 "s$seed-memory" memory
    for alpha in 0.5 0.75 0.99; do
        for eps in 53 1500; do
            run "memory-alpha$alpha-eps$eps" "$seed" --alpha "$alpha" --epsilon-us "$eps"
        done
    done
    stop_shards
}
for seed in $(seq 1 "$seeds"); do
    with_emulator "$seed" one_seed "$seed"
    echo "seed $seed done"
done
python3 - "$out" "$seeds" <<'PY'
import json, statistics, sys
d, seeds = sys.argv[1], int(sys.argv[2])
def load(name, s):
    return json.load(open(f'{d}/{name}-{s}.json'))
names = [f'alpha{a}-eps{e}' for a in ('0.5', '0.75', '0.99') for e in (53, 1500)]
names += ['alpha0.99-eps0', 'alpha0.99-eps500', 'alpha0.99-eps5000', 'lv-off', 'ycsb-t', 'shards1', 'shards2']
names += [f'memory-alpha{a}-eps{e}' for a in ('0.5', '0.75', '0.99') for e in (53, 1500)]
print('| seed | run | α | ε µs | shards | local validation | txn/s | abort rate | p50 ms | read-only p50 ms | single-shard p50 ms | cross-shard p50 ms |')
print('|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|')
shards = {'shards1': 1, 'shards2': 2}
for s in range(1, seeds + 1):
    for n in names:
        r = load(n, s)
        print(f"| {s} | {n} | {r['alpha']} | {r['epsilon_us']} | {shards.get(n, 3)} | "
              f"{'on' if r['local_validation'] else 'off'} | {r['txn_per_s']:,.0f} | {100 * r['abort_rate']:.2f}% | "
              f"{r['latency']['p50_ms']:.2f} | {r['read_only']['p50_ms']:.2f} | "
              f"{r['single_shard']['p50_ms']:.2f} | {r['cross_shard']['p50_ms']:.2f} |")
med = lambda xs: statistics.median(xs)
print()
for logs in ('', 'memory-'):
    for a in ('0.5', '0.75', '0.99'):
        ptp = [load(f'{logs}alpha{a}-eps53', s)['abort_rate'] for s in range(1, seeds + 1)]
        ntp = [load(f'{logs}alpha{a}-eps1500', s)['abort_rate'] for s in range(1, seeds + 1)]
        fewer = [1 - p / n if n else 0 for p, n in zip(ptp, ntp)]
        print(f'{logs or "s3x-"}logs α {a}: abort rate median {100 * med(ptp):.2f}% at 53 µs, {100 * med(ntp):.2f}% at 1.5 ms: '
              f'{100 * med(fewer):.0f}% fewer aborts with PTP (per seed: {", ".join(f"{100 * f:.0f}%" for f in fewer)})')
for e in (0, 53, 500, 1500, 5000):
    xs = [load(f'alpha0.99-eps{e}', s)['abort_rate'] for s in range(1, seeds + 1)]
    print(f'α 0.99, ε {e} µs: abort rate median {100 * med(xs):.2f}%')
on = [load('alpha0.75-eps53', s) for s in range(1, seeds + 1)]
off = [load('lv-off', s) for s in range(1, seeds + 1)]
tp = [a['txn_per_s'] / b['txn_per_s'] for a, b in zip(on, off)]
lat = [a['latency']['mean_ms'] / b['latency']['mean_ms'] for a, b in zip(on, off)]
ro = [a['read_only']['p50_ms'] / b['read_only']['p50_ms'] for a, b in zip(on, off)]
print(f'local validation on/off: throughput {med(tp):.2f}x ({", ".join(f"{x:.2f}" for x in tp)}), '
      f'mean latency {med(lat):.2f}x, read-only p50 {med(ro):.2f}x')
single = [r['single_shard']['p50_ms'] for r in on]
cross = [r['cross_shard']['p50_ms'] for r in on]
print(f'read-write p50: single-shard {med(single):.2f} ms, cross-shard {med(cross):.2f} ms '
      f'({med([c / x for c, x in zip(cross, single)]):.2f}x)')
def cpu(name, s):
    r = load(name, s)
    txns = max(r['committed'] + r['aborted'], 1) / r['duration_s'] * (float(open(f'{d}/{name}-{s}.time').read().split()[2]))
    shard_s = int(open(f'{d}/{name}-{s}.ticks').read()) / 100
    u, sy, _ = (float(x) for x in open(f'{d}/{name}-{s}.time').read().split())
    return 1e6 * shard_s / txns, 1e6 * (u + sy) / txns
for n, name in ((1, 'shards1'), (2, 'shards2'), (3, 'alpha0.75-eps53')):
    xs = [load(name, s)['txn_per_s'] for s in range(1, seeds + 1)]
    c = [cpu(name, s) for s in range(1, seeds + 1)]
    print(f'{n} shard(s): median {med(xs):,.0f} txn/s; CPU per transaction (committed or aborted, over the '
          f'whole process lives): shards {med([x[0] for x in c]):.0f} µs, client {med([x[1] for x in c]):.0f} µs')
ycsbt = [load('ycsb-t', s) for s in range(1, seeds + 1)]
print(f'YCSB-T (4 ops), 3 shards: median {med([r["txn_per_s"] for r in ycsbt]):,.0f} txn/s, abort rate '
      f'{100 * med([r["abort_rate"] for r in ycsbt]):.1f}%, p50 {med([r["latency"]["p50_ms"] for r in ycsbt]):.2f} ms')
PY
