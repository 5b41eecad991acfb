#!/usr/bin/env python3
"""Medians over repetitions of `milliscale bench ycsb --json` reports, and
the paper's comparisons , from a directory of NAME.repN.json."""
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

runs = defaultdict(list)
for f in sorted(Path(sys.argv[1]).glob("*.rep*.json")):
    try:
        runs[f.name.split(".rep")[0]].append(json.loads(f.read_text()))
    except json.JSONDecodeError:
        print(f"skipped {f.name}: not a finished report", file=sys.stderr)


def med(name, fn):
    vals = [fn(r) for r in runs.get(name, [])]
    return statistics.median(vals) if vals else float("nan")


def appends(r):
    log = r.get("log") or {}
    req = log.get("requests_per_s", {})
    return req.get("append", 0.0) + req.get("put_if_absent", 0.0)


cols = [
    ("txn/s", lambda r: r["txn_per_s"]),
    ("commit avg ms", lambda r: r["commit_latency"]["mean_us"] / 1e3),
    ("p50 ms", lambda r: r["commit_latency"]["p50_us"] / 1e3),
    ("p99 ms", lambda r: r["commit_latency"]["p99_us"] / 1e3),
    ("p99.9 ms", lambda r: r["commit_latency"]["p999_us"] / 1e3),
    ("appends/s", appends),
    ("dep. waited %", lambda r: 100.0 * (r.get("log") or {}).get("dependency_waited", 0)
        / max(1, (r.get("log") or {}).get("released", 0))),
    ("$/1k txn", lambda r: (r.get("log") or {}).get("usd_per_1000_txn", 0.0)),
]
print()
print("Medians of", max((len(v) for v in runs.values()), default=0), "repetitions.")
print()
print("| configuration | " + " | ".join(c for c, _ in cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for name in runs:
    cells = []
    for c, fn in cols:
        v = med(name, fn)
        cells.append(f"{v:.8f}" if c.startswith("$") else f"{v:,.1f}")
    print(f"| {name} | " + " | ".join(cells) + " |")


def change(a, b, fn):
    x, y = med(a, fn), med(b, fn)
    return (x / y - 1.0) * 100.0 if y else float("nan")


print()
print("milliscale vs s3x (negative = milliscale lower):")
print()
print("| workload | p99.9 | avg | appends/s | throughput |")
print("|---|---|---|---|---|")
for w in ["a-uniform", "a-zipfian", "b-uniform", "b-zipfian"]:
    m, s = f"{w}-milliscale", f"{w}-s3x"
    if m in runs and s in runs:
        print(f"| {w} | {change(m, s, cols[4][1]):+.1f}% | {change(m, s, cols[1][1]):+.1f}% "
              f"| {change(m, s, appends):+.1f}% | {change(m, s, cols[0][1]):+.1f}% |")
print()
print("logging overhead (throughput with sim://s3x / --store none, medians):")
print()
for w in ["a-uniform", "a-zipfian"]:
    if f"{w}-none" in runs:
        ratio = med(f"{w}-milliscale", cols[0][1]) / med(f"{w}-none", cols[0][1])
        print(f"- {w}: {ratio:.3f}")
