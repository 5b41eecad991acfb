#!/usr/bin/env bash
# A/B two milliscale binaries on the main job and on bench-tail.sh's
# configurations, alternating A and B run by run, on sim seeds 1..SEEDS.
# Each configuration and seed runs A then B (or B then A on even seeds, so
# neither always runs first); the summary prints, per configuration, the
# median over seeds of B/A for throughput and commit p50, p99, and the
# store's own append p50/p99 beside them (the floor each run met).
# `memory-8` runs the log on a store without latency, where the
# pre-commit path's own cost shows.
# Usage: scripts/ab-tail.sh BIN_A BIN_B [SEEDS] [SECONDS]
# FIRST=N starts at seed N (seeds N..N+SEEDS-1); ONLY="name ..." runs only
# those configurations (main, milliscale-2, unpaced-8, milliscale-open, ...).
set -euo pipefail
A=$1 B=$2
seeds=${3:-3}
first=${FIRST:-1}
only=${ONLY:-}
secs=${4:-10}
out=$(mktemp -d)
echo "A=$A B=$B seeds=$first..$((first + seeds - 1)) seconds=$secs; raw reports in $out"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
ycsb=(bench ycsb --workload a --duration-s "$secs" --warmup-s 2 --json --records 1000000)
unpaced=(--log-lanes 3 --flush-policy adaptive --flush-pace off)
paper=(--log-lanes 1 --flush-policy timeout --hedging off --log-streams per-group --log-thread-slice-ms off)
run() { # name seed args...
    local name=$1 seed=$2
    shift 2
    if [ -n "$only" ] && [[ " $only " != *" $name "* ]]; then return; fi
    local first=$A second=$B fa=A fb=B
    if [ $((seed % 2)) = 0 ]; then first=$B second=$A fa=B fb=A; fi
    "$first" "$@" --seed "$seed" > "$out/$name-$seed-$fa.json"
    "$second" "$@" --seed "$seed" > "$out/$name-$seed-$fb.json"
}
for seed in $(seq "$first" $((first + seeds - 1))); do
    # The main job: the README's command, its defaults.
    run main "$seed" bench ycsb --json
    for t in 2 8; do
        common=("${ycsb[@]}" --threads "$t" --store sim://s3x)
        run "milliscale-$t" "$seed" "${common[@]}"
        run "unpaced-$t" "$seed" "${common[@]}" "${unpaced[@]}"
        run "paper-$t" "$seed" "${common[@]}" "${paper[@]}"
    done
    common=("${ycsb[@]}" --threads 8 --rate 60000)
    run milliscale-open "$seed" "${common[@]}"
    # The pre-commit path alone: a store with no latency, 8 workers in 4
    # groups on 2 cores, where a lock on the buffer's path shows.
    run memory-8 "$seed" "${ycsb[@]}" --threads 8 --store memory://
    echo "seed $seed done"
done
python3 - "$out" <<'EOF'
import json, os, statistics, sys
d = sys.argv[1]
rows = {}
for f in sorted(os.listdir(d)):
    if not f.endswith('.json'):
        continue
    name, seed, ab = f[:-5].rsplit('-', 2)
    r = json.load(open(os.path.join(d, f)))
    app = (r.get('log') or {}).get('store_append') or {}
    rows.setdefault(name, {}).setdefault(int(seed), {})[ab] = (
        r['txn_per_s'], r['commit_latency']['p50_us'] / 1e3, r['commit_latency']['p99_us'] / 1e3,
        app['p50_us'] / 1e3 if app else None, app['p99_us'] / 1e3 if app else None)
print('| configuration | seed | txn/s A | B | commit p50 ms A | B | p99 ms A | B | append p50 / p99 ms A | B |')
print('|---|---:|---:|---:|---:|---:|---:|---:|---|---|')
summary = []
for name, seeds in rows.items():
    ratios = [[], [], []]
    for seed, v in sorted(seeds.items()):
        if 'A' not in v or 'B' not in v:
            continue
        a, b = v['A'], v['B']
        def fl(x): return '-' if x is None else f'{x:.1f}'
        print(f'| {name} | {seed} | {a[0]:,.0f} | {b[0]:,.0f} | {a[1]:.2f} | {b[1]:.2f} | {a[2]:.2f} | {b[2]:.2f} | {fl(a[3])} / {fl(a[4])} | {fl(b[3])} / {fl(b[4])} |')
        for k in range(3):
            ratios[k].append(b[k] / a[k] if a[k] else float('nan'))
    summary.append((name, ratios))
print()
print('| configuration | txn/s B/A median (min-max) | commit p50 B/A | commit p99 B/A |')
print('|---|---|---|---|')
for name, ratios in summary:
    cells = [f'{statistics.median(r):.3f} ({min(r):.3f}-{max(r):.3f})' for r in ratios]
    print(f'| {name} | ' + ' | '.join(cells) + ' |')
EOF
