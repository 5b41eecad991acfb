#!/usr/bin/env bash
# milliscale against SlateDB 0.18 (issue 6, acceptance 3): YCSB-A on the
# same store (sim://s3x, in process), each commit acknowledged when it is
# durable on the store. SlateDB runs at flush_interval 1, 10 and 100 ms.
# Usage: scripts/bench-peer.sh [SECONDS] [RECORDS] [CLIENTS]
set -euo pipefail
secs=${1:-10}
records=${2:-200000}
clients=${3:-64}
bin=target/release/milliscale
cargo build --release -q -p milliscale-cli
out=$(mktemp -d)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); commit $(git rev-parse --short=12 HEAD)"
echo "seconds=$secs records=$records slatedb clients=$clients; raw reports in $out"
common=(bench ycsb --workload a --records "$records" --duration "$secs" --warmup 2 --store sim://s3x --json)
$bin "${common[@]}" --threads 8 > "$out/milliscale.json"
$bin "${common[@]}" --threads 8 --hedge-appends > "$out/milliscale-hedged.json"
for ms in 1 10 100; do
    $bin "${common[@]}" --engine slatedb --clients "$clients" --slatedb-flush-ms $ms > "$out/slatedb-$ms.json"
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
rows = [("milliscale (8 threads, pipelined)", "milliscale"),
        ("milliscale --hedge-appends", "milliscale-hedged")] + [
    (f"SlateDB flush_interval {ms} ms", f"slatedb-{ms}") for ms in (1, 10, 100)]
print("\n| engine | txn/s | commit p50 ms | commit p99 ms | txn p99 ms | abort rate | store requests/s | $ per 1,000 txn |")
print("|---|---:|---:|---:|---:|---:|---|---:|")
res = {}
for label, f in rows:
    r = json.load(open(f"{out}/{f}.json"))
    res[f] = r
    c, t = r["commit_latency"], r["txn_latency"]
    reqs = ", ".join(f"{k} {v:.0f}" for k, v in sorted(r["log"]["requests_per_s"].items()))
    print(f"| {label} | {r['txn_per_s']:,.0f} | {c['p50_us']/1e3:.1f} | {c['p99_us']/1e3:.1f} | {t['p99_us']/1e3:.1f} | {r['abort_rate']:.4f} | {reqs} | {r['log']['usd_per_1000_txn']:.6f} |")
best = max((res[f"slatedb-{ms}"] for ms in (1, 10, 100)), key=lambda r: r["txn_per_s"])
m = res["milliscale"]
print(f"\n- throughput: milliscale / best SlateDB = {m['txn_per_s'] / best['txn_per_s']:.1f}x "
      f"(best SlateDB: flush_interval {best['config']['flush_interval_ms']} ms)")
print(f"- p99 commit latency: milliscale / that SlateDB = {m['commit_latency']['p99_us'] / best['commit_latency']['p99_us']:.2f}")
PY
