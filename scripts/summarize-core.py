#!/usr/bin/env python3
"""Summarize scripts/bench-core.sh output as markdown tables (medians over rounds)."""
import json
import statistics
import sys
from pathlib import Path

out, rounds = Path(sys.argv[1]), int(sys.argv[2])


def load(name):
    return [json.loads((out / f"{name}.r{r}.json").read_text()) for r in range(1, rounds + 1)]


def med(xs):
    return statistics.median(xs)


first = load("c-uniform-engine")[0]
env = first["env"]
print(f"Machine: {env['cores']} cores, {env['cpu']}, {env['os']}; commit `{env['commit']}`; "
      f"{rounds} alternating rounds, medians shown.\n")

print("### Ordered index candidates (2 threads)\n")
print("| candidate | keys | insert Mop/s | lookup Mop/s | scan-100 Kop/s | RSS growth MiB |")
print("|---|---:|---:|---:|---:|---:|")
for r in json.loads((out / "index.json").read_text()):
    print(f"| {r['candidate']} | {r['keys']:,} | {r['insert_mops']:.2f} | {r['lookup_mops']:.2f} | "
          f"{r['scan100_kops']:.1f} | {r['rss_mib_growth']:.0f} |")

print("\n### YCSB, 1M records, 2 threads, 10 ops/txn, snapshot isolation, no log\n")
print("| workload | dist | engine | txn/s | ops/s | abort rate | txn p50 µs | txn p99 µs |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for name in ["c-uniform-engine", "c-uniform-raw", "c-zipfian-engine", "c-zipfian-raw",
             "a-uniform-engine", "a-zipfian-engine"]:
    rs = load(name)
    w, d, e = name.split("-")
    print(f"| {w.upper()} | {d} | {'raw index' if e == 'raw' else 'milliscale'} | "
          f"{med([r['txn_per_s'] for r in rs]):,.0f} | {med([r['ops_per_s'] for r in rs]):,.0f} | "
          f"{med([r['abort_rate'] for r in rs]):.4f} | {med([r['txn_latency']['p50_us'] for r in rs]):.1f} | "
          f"{med([r['txn_latency']['p99_us'] for r in rs]):.1f} |")

print("\n### Engine vs raw index, YCSB-C (ratio of ops/s within each round)\n")
print("| dist | median ratio | min | max | per round |")
print("|---|---:|---:|---:|---|")
for d in ["uniform", "zipfian"]:
    e, r = load(f"c-{d}-engine"), load(f"c-{d}-raw")
    ratios = [a["ops_per_s"] / b["ops_per_s"] for a, b in zip(e, r)]
    print(f"| {d} | {med(ratios):.2f} | {min(ratios):.2f} | {max(ratios):.2f} | "
          f"{', '.join(f'{x:.2f}' for x in ratios)} |")
