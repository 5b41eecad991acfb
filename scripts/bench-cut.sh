#!/usr/bin/env bash
# The paper's request cut: milliscale's defaults against the paper's s3x
# variant (per-thread logging, one append per flush) at the paper's
# setting, YCSB-A uniform, 8 threads, RECORDS records, sim://s3x, seeds
# 1..SEEDS, alternating. Prints per seed and as medians: throughput, log
# appends a second, commit p99.9, and the cuts (appends and p99.9 below
# the variant's, throughput as a ratio).
# Usage: scripts/bench-cut.sh [SEEDS] [SECONDS] [RECORDS]
set -euo pipefail
seeds=${1:-3}
secs=${2:-10}
records=${3:-30000000}
bin=${BIN:-target/release/milliscale}
out=$(mktemp -d)
echo "bin=$bin seeds=1..$seeds seconds=$secs records=$records; raw reports in $out"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), commit $(git rev-parse --short HEAD)"
common=(bench ycsb --workload a --dist uniform --threads 8 --records "$records" --duration-s "$secs" --warmup-s 2 --json --store sim://s3x)
for seed in $(seq 1 "$seeds"); do
    "$bin" "${common[@]}" --seed "$seed" > "$out/milliscale-$seed.json"
    "$bin" "${common[@]}" --seed "$seed" --variant s3x > "$out/s3x-$seed.json"
    echo "seed $seed done"
done
python3 - "$out" "$seeds" <<'PY'
import json, statistics, sys
d, seeds = sys.argv[1], int(sys.argv[2])
def load(name, s):
    r = json.load(open(f'{d}/{name}-{s}.json'))
    log = r['log']
    appends = sum(v for k, v in log['requests_per_s'].items() if k in ('append', 'put', 'put_if_absent'))
    return r['txn_per_s'], appends, r['commit_latency']['p999_us'] / 1e3, log.get('flush_interval_ms', 0)
print('| seed | txn/s milliscale | s3x | log writes/s milliscale | s3x | commit p99.9 ms milliscale | s3x | appends cut | p99.9 cut | throughput ratio |')
print('|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
cuts = [[], [], []]
for s in range(1, seeds + 1):
    m, x = load('milliscale', s), load('s3x', s)
    c = (1 - m[1] / x[1], 1 - m[2] / x[2], m[0] / x[0])
    for k in range(3):
        cuts[k].append(c[k])
    print(f'| {s} | {m[0]:,.0f} | {x[0]:,.0f} | {m[1]:.0f} | {x[1]:.0f} | {m[2]:.1f} | {x[2]:.1f} | {c[0]:.1%} | {c[1]:.1%} | {c[2]:.3f}x |')
print(f'\nmedians: appends {statistics.median(cuts[0]):.1%} below the s3x variant (goal >= 45%), '
      f'p99.9 {statistics.median(cuts[1]):.1%} below (goal >= 60%), throughput {statistics.median(cuts[2]):.3f}x (goal >= 0.95x)')
PY
