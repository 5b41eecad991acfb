#!/usr/bin/env bash
# The async API against the blocking one, on the main job (YCSB-A, 1M
# records, 2 threads, sim://s3x), seeds 1..SEEDS, alternating:
# - blocking: one thread per worker (the main job as it is);
# - async-2: the same two workers as tokio tasks on a 2-thread runtime,
#   through the async API, holding their acks as the threads do (a
#   large ack window), so only the API and the runtime differ;
# - async-1000: 1,000 tasks on the same 2 threads, each awaiting every
#   commit before its next transaction (a service's request handlers);
# - async-1000-w8: the same tasks, each holding up to 8 acks before it
#   awaits the oldest (a client that pipelines its commits).
# Prints per seed and as medians: throughput and commit p50/p99, each as a
# ratio to the blocking run of the same seed.
# The four run in an order that rotates with the seed.
# Usage: scripts/bench-async.sh [SEEDS] [SECONDS]
set -euo pipefail
seeds=${1:-3}
secs=${2:-10}
source "$(dirname "$0")/bench-common.sh"  # bin, out; builds; prints the machine
echo "seeds=1..$seeds seconds=$secs; raw reports in $out"
common=(bench ycsb --workload a --threads 2 --duration-s "$secs" --warmup-s 2 --json --store sim://s3x)
run() { # name seed
    case $1 in
        blocking) "$bin" "${common[@]}" --seed "$2" > "$out/blocking-$2.json" ;;
        async-2) "$bin" "${common[@]}" --seed "$2" --tasks 2 --ack-window 1000000 > "$out/async-2-$2.json" ;;
        async-1000) "$bin" "${common[@]}" --seed "$2" --tasks 1000 --ack-window 1 > "$out/async-1000-$2.json" ;;
        async-1000-w8) "$bin" "${common[@]}" --seed "$2" --tasks 1000 --ack-window 8 > "$out/async-1000-w8-$2.json" ;;
    esac
}
# The order rotates from seed to seed: on this machine a run's throughput
# drifts with the runs before it.
names=(blocking async-2 async-1000 async-1000-w8)
for seed in $(seq 1 "$seeds"); do
    for i in 0 1 2 3; do
        run "${names[$(( (i + seed - 1) % 4 ))]}" "$seed"
    done
    echo "seed $seed done"
done
python3 - "$out" "$seeds" <<'PY'
import json, statistics, sys
d, seeds = sys.argv[1], int(sys.argv[2])
def load(name, s):
    r = json.load(open(f'{d}/{name}-{s}.json'))
    c = r['commit_latency']
    return r['txn_per_s'], c['p50_us'] / 1e3, c['p99_us'] / 1e3
print('| seed | run | txn/s | commit p50 ms | p99 ms | txn/s / blocking | p50 / blocking | p99 / blocking |')
print('|---:|---|---:|---:|---:|---:|---:|---:|')
ratios = {'async-2': [[], [], []], 'async-1000': [[], [], []], 'async-1000-w8': [[], [], []]}
for s in range(1, seeds + 1):
    b = load('blocking', s)
    print(f'| {s} | blocking | {b[0]:,.0f} | {b[1]:.2f} | {b[2]:.2f} | | | |')
    for name in ratios:
        a = load(name, s)
        r = [a[k] / b[k] for k in range(3)]
        for k in range(3):
            ratios[name][k].append(r[k])
        print(f'| {s} | {name} | {a[0]:,.0f} | {a[1]:.2f} | {a[2]:.2f} | {r[0]:.3f}x | {r[1]:.3f}x | {r[2]:.3f}x |')
for name, r in ratios.items():
    m = [statistics.median(x) for x in r]
    print(f'\n{name}: medians throughput {m[0]:.3f}x, commit p50 {m[1]:.3f}x, p99 {m[2]:.3f}x the blocking run')
PY
