#!/usr/bin/env python3
"""Tables for BENCHMARKS.md from scripts/bench-tpcc.sh's JSON reports."""
import json
import statistics
import sys

out, rounds = sys.argv[1], int(sys.argv[2])


def load(name):
    with open(f"{out}/{name}.json") as f:
        return json.load(f)


def appends(r):
    return r["log"]["requests_per_s"].get("append", 0.0)


print("\n### Variants on sim://s3x (per round)\n")
print("| round | variant | txn/s | tpmC | append req/s | commit p50 ms | commit p99 ms | abort rate |")
print("|---:|---|---:|---:|---:|---:|---:|---:|")
cuts, tputs, sums = [], [], {"m": [0.0, 0.0], "s": [0.0, 0.0]}
for r in range(1, rounds + 1):
    m, s = load(f"variant-milliscale-{r}"), load(f"variant-s3x-{r}")
    for name, x in (("milliscale", m), ("s3x", s)):
        c = x["commit_latency"]
        print(f"| {r} | {name} | {x['txn_per_s']:,.0f} | {x['extra']['tpmC']:,.0f} | {appends(x):.1f} "
              f"| {c['p50_us']/1e3:.1f} | {c['p99_us']/1e3:.1f} | {x['abort_rate']:.4f} |")
    cuts.append(1 - appends(m) / appends(s))
    for k, x in (("m", m), ("s", s)):
        sums[k][0] += x["txn_per_s"]
        sums[k][1] += appends(x)
    tputs.append(m["txn_per_s"] / s["txn_per_s"])
print()
print(f"- append requests/s cut by milliscale: per round {', '.join(f'{c:.1%}' for c in cuts)}; median {statistics.median(cuts):.1%}")
print(f"- throughput ratio milliscale/s3x: per round {', '.join(f'{t:.3f}' for t in tputs)}; median {statistics.median(tputs):.3f}")
print(f"- over all rounds together: append requests/s cut {1 - sums['m'][1] / sums['s'][1]:.1%}, "
      f"throughput ratio {sums['m'][0] / sums['s'][0]:.3f}")

print("\n### Delta against full-record logging, NewOrder + Payment (per round)\n")
print("| round | logging | txn/s | log bytes per logged txn |")
print("|---:|---|---:|---:|")
ratios = []
for r in range(1, rounds + 1):
    d, f = load(f"logging-delta-{r}"), load(f"logging-full-{r}")
    for name, x in (("delta", d), ("full-record", f)):
        print(f"| {r} | {name} | {x['txn_per_s']:,.0f} | {x['log']['bytes_per_logged_txn']:,.0f} |")
    ratios.append(d["log"]["bytes_per_logged_txn"] / f["log"]["bytes_per_logged_txn"])
print()
print(f"- delta / full log bytes: per round {', '.join(f'{x:.3f}' for x in ratios)}; median {statistics.median(ratios):.3f}")
