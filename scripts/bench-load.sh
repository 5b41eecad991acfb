#!/usr/bin/env bash
# The bill against the load: milliscale and SlateDB 0.18 in open loop at
# the same offered rates, YCSB-A, 200,000 records, on sim://s3x, seeds
# 1..SEEDS. Prints one row per configuration and rate with the medians
# over seeds of throughput, commit p50 and p99, the store's own append
# p50 and p99 (milliscale), requests and dollars, and the ratios the
# log's goals are stated in (dollars an hour and p99 against SlateDB with
# a 10 ms flush at the same rate; dollars per transaction against
# SlateDB's cheapest per-transaction figure at any rate and setting).
# Usage: scripts/bench-load.sh [SEEDS] [SECONDS] [RATES]
# Env: BIN (default target/release/milliscale), ONLY="name ..." (ms,
# ms-fast, slatedb-10ms, slatedb-100ms), FAST="flags" (the documented
# lower-latency setting; default --flush-max-wait-ms 8).
set -euo pipefail
seeds=${1:-3}
secs=${2:-10}
rates=${3:-"1000 3000 10000 60000"}
bin=${BIN:-target/release/milliscale}
only=${ONLY:-}
fast=${FAST:---flush-max-wait-ms 8}
out=$(mktemp -d)
echo "bin=$bin seeds=1..$seeds seconds=$secs rates=$rates fast=($fast); raw reports in $out"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), commit $(git rev-parse --short HEAD)"
common=(bench ycsb --workload a --records 200000 --duration-s "$secs" --warmup-s 2 --json --store sim://s3x)
run() { # name rate seed args...
    local name=$1 rate=$2 seed=$3
    shift 3
    if [ -n "$only" ] && [[ " $only " != *" $name "* ]]; then return; fi
    # A run that fails (SlateDB far past what it can serve) is left out.
    timeout $((secs * 6 + 120)) "$bin" "${common[@]}" --rate "$rate" --seed "$seed" "$@" \
        > "$out/$name-$rate-$seed.json" 2> "$out/$name-$rate-$seed.err" || rm -f "$out/$name-$rate-$seed.json"
}
for seed in $(seq 1 "$seeds"); do
    for rate in $rates; do
        run ms "$rate" "$seed"
        # shellcheck disable=SC2086
        run ms-fast "$rate" "$seed" $fast
        # SlateDB tops out near 3,000 a second here: past 10,000 its
        # backlog only grows.
        if [ "$rate" -le 10000 ]; then
            run slatedb-10ms "$rate" "$seed" --engine slatedb --slatedb-flush-ms 10
            run slatedb-100ms "$rate" "$seed" --engine slatedb --slatedb-flush-ms 100
        fi
    done
    echo "seed $seed done"
done
python3 - "$out" <<'PY'
import json, os, statistics, sys
d = sys.argv[1]
rows = {}
for f in sorted(os.listdir(d)):
    if not f.endswith('.json'):
        continue
    name, rate, seed = f[:-5].rsplit('-', 2)
    r = json.load(open(os.path.join(d, f)))
    log = r.get('log') or {}
    app = log.get('store_append') or {}
    reqs = sum((log.get('requests_per_s') or {}).values())
    rows.setdefault((name, int(rate)), []).append(dict(
        tps=r['txn_per_s'], p50=r['commit_latency']['p50_us'] / 1e3,
        p99=r['commit_latency']['p99_us'] / 1e3,
        a50=app.get('p50_us', 0) / 1e3, a99=app.get('p99_us', 0) / 1e3,
        reqs=reqs, usd_h=log.get('usd_per_hour', 0.0),
        usd_txn=log.get('usd_per_hour', 0.0) / 3600 / max(r['txn_per_s'], 1e-9)))
med = {k: {m: statistics.median(x[m] for x in v) for m in v[0]} for k, v in rows.items()}
cheapest = min((v['usd_txn'] for (n, _), v in med.items() if n.startswith('slatedb') and v['usd_txn'] > 0),
               default=None)
print('| configuration | offered txn/s | seeds | txn/s | commit p50 ms | p99 ms | one append p50 / p99 ms | requests/s | $ per hour | $ per million txn | $/h / SlateDB 10 ms | p99 / SlateDB 10 ms | $/txn / SlateDB cheapest |')
print('|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|')
for (name, rate), v in sorted(med.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    s = med.get(('slatedb-10ms', rate))
    vs = lambda a, b: f'{a / b:.2f}x' if b else '-'
    app = f"{v['a50']:.1f} / {v['a99']:.1f}" if v['a50'] else '-'
    print(f"| {name} | {rate:,} | {len(rows[(name, rate)])} | {v['tps']:,.0f} | {v['p50']:.1f} | {v['p99']:.1f} | {app} | "
          f"{v['reqs']:.1f} | {v['usd_h']:.3f} | {v['usd_txn'] * 1e6:.4f} | "
          f"{vs(v['usd_h'], s['usd_h']) if s else '-'} | {vs(v['p99'], s['p99']) if s else '-'} | "
          f"{vs(v['usd_txn'], cheapest) if cheapest else '-'} |")
if cheapest:
    print(f'\nSlateDB cheapest $ per million txn (median over seeds, any rate and setting): {cheapest * 1e6:.4f}')
PY
