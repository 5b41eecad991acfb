#!/usr/bin/env bash
# milliscale against SlateDB 0.18: YCSB-A on the
# same store (sim://s3x, in process), each commit acknowledged when it is
# durable on the store. SlateDB runs at flush_interval 1, 10 and 100 ms.
# milliscale runs with 8 threads (4 log buffers; pipelined), the same with
# hedged appends, and with 2 threads (this machine's default: one per
# core, so one log buffer). Every configuration runs once per sim seed
# (1..SEEDS), so the latency tail is not one seed's draw. The store's own
# latency for one append comes first: no commit can be faster.
# Usage: scripts/bench-peer.sh [SECONDS] [RECORDS] [CLIENTS] [SEEDS]
set -euo pipefail
secs=${1:-10}
records=${2:-200000}
clients=${3:-64}
seeds=${4:-3}
source "$(dirname "$0")/bench-common.sh"  # bin, out; builds; prints the machine
echo "seconds=$secs records=$records slatedb clients=$clients seeds=1..$seeds; raw reports in $out"
$bin bench store --store sim://s3x --size 64K --count 20000 --threads 8 --json > "$out/store.json"
common=(bench ycsb --workload a --records "$records" --duration-s "$secs" --warmup-s 2 --store sim://s3x --json)
for seed in $(seq 1 "$seeds"); do
    $bin "${common[@]}" --seed "$seed" --threads 8 > "$out/milliscale-$seed.json"
    $bin "${common[@]}" --seed "$seed" --threads 8 --hedge-appends > "$out/milliscale-hedged-$seed.json"
    $bin "${common[@]}" --seed "$seed" --threads 2 > "$out/milliscale-2t-$seed.json"
    for ms in 1 10 100; do
        $bin "${common[@]}" --seed "$seed" --engine slatedb --clients "$clients" \
            --slatedb-flush-ms $ms > "$out/slatedb-$ms-$seed.json"
    done
done
python3 - "$out" "$seeds" <<'PY'
import json, statistics, sys
out, seeds = sys.argv[1], range(1, int(sys.argv[2]) + 1)
s = json.load(open(f"{out}/store.json"))["measured"]
print(f"\nOne append of 64 KiB to sim://s3x (bench store, 20,000 appends): "
      f"p50 {s['p50_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms, p99.9 {s['p999_ms']:.1f} ms")
rows = [("milliscale, 8 threads (4 log buffers)", "milliscale"),
        ("milliscale, 8 threads, --hedge-appends", "milliscale-hedged"),
        ("milliscale, 2 threads (1 log buffer)", "milliscale-2t")] + [
    (f"SlateDB, flush_interval {ms} ms", f"slatedb-{ms}") for ms in (1, 10, 100)]
res = {f: [json.load(open(f"{out}/{f}-{seed}.json")) for seed in seeds] for _, f in rows}
print("\n| engine | seed | txn/s | commit p50 ms | commit p99 ms | abort rate | store requests/s | $ per 1,000 txn |")
print("|---|---:|---:|---:|---:|---:|---|---:|")
for label, f in rows:
    for seed, r in zip(seeds, res[f]):
        c = r["commit_latency"]
        reqs = ", ".join(f"{k} {v:.0f}" for k, v in sorted(r["log"]["requests_per_s"].items()))
        print(f"| {label} | {seed} | {r['txn_per_s']:,.0f} | {c['p50_us']/1e3:.1f} | {c['p99_us']/1e3:.1f} "
              f"| {r['abort_rate']:.4f} | {reqs} | {r['log']['usd_per_1000_txn']:.6f} |")
med = lambda f, get: statistics.median(get(r) for r in res[f])
tps = lambda r: r["txn_per_s"]
p99 = lambda r: r["commit_latency"]["p99_us"] / 1e3
print("\n| engine | median txn/s | median commit p50 ms | median commit p99 ms |")
print("|---|---:|---:|---:|")
for label, f in rows:
    print(f"| {label} | {med(f, tps):,.0f} | {med(f, lambda r: r['commit_latency']['p50_us'] / 1e3):.1f} | {med(f, p99):.1f} |")
best = max((f"slatedb-{ms}" for ms in (1, 10, 100)), key=lambda f: med(f, tps))
print(f"\nSlateDB's best (median throughput): {best}. Against it, per seed:")
for _, f in rows[:3]:
    t = [a["txn_per_s"] / b["txn_per_s"] for a, b in zip(res[f], res[best])]
    p = [p99(a) / p99(b) for a, b in zip(res[f], res[best])]
    print(f"- {f}: throughput {', '.join(f'{x:.1f}x' for x in t)}; "
          f"p99 commit latency {', '.join(f'{x:.2f}x' for x in p)}")
PY
