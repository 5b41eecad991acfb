#!/usr/bin/env python3
"""Compare milliscale binaries on the engine's benchmarks, alternating.

Usage: scripts/ab-bins.py [--pairs N] [--jobs c,a,b,main] BASE OTHER...

Each round runs every binary once on each job, in an order that rotates
from round to round (so that no binary always runs first, or always right
after the same one), and takes each OTHER's throughput over BASE's within
the round: the machine's speed drifts over minutes, and a ratio of two runs
a few seconds apart is what stays comparable. Prints every round's ratios,
then per job and binary the median ratio and its spread (min-max), and
the medians of the throughputs themselves.

The jobs:
  a, b, c  YCSB-A/B/C in memory (`--store none`), 2 threads, 1M records,
           5 s measured after 1 s of warm-up (the engine alone: index,
           versions, commit, no log)
  u        YCSB-U in memory (update-only), the same way
  main     the README's main job (`bench ycsb`, its defaults: YCSB-A on
           sim://s3x), with the round's number as the store's seed for
           every binary of the round, and the commit p50 and the store's
           one-append p50 beside the throughput

Extra arguments for every run of a job: AB_ARGS_<JOB> (e.g. AB_ARGS_C="--records
100000"). Raw CSV rows go to the directory printed first.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MEMORY = ["--store", "none", "--threads", "2", "--duration-s", "5", "--warmup-s", "1"]
JOBS = {
    "a": MEMORY + ["--workload", "a"],
    "b": MEMORY + ["--workload", "b"],
    "c": MEMORY + ["--workload", "c"],
    "u": MEMORY + ["--workload", "u"],
    "main": [],
}


def run(binary, job, rnd, raw):
    args = [binary, "bench", "ycsb", "--json"] + JOBS[job]
    if job == "main":
        args += ["--seed", str(rnd)]
    args += os.environ.get(f"AB_ARGS_{job.upper()}", "").split()
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    raw.write(json.dumps({"binary": binary, "job": job, "round": rnd, "report": report}) + "\n")
    raw.flush()
    row = {"txn_per_s": float(report["txn_per_s"])}
    if job == "main":
        row["commit_p50_us"] = float(report["commit_latency"]["p50_us"])
        append = report.get("log", {}).get("store_append", {}).get("p50_us")
        if append is not None:
            row["append_p50_us"] = float(append)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=5, help="rounds (each binary once per job per round)")
    p.add_argument("--jobs", default="a,b,c,main")
    p.add_argument("base")
    p.add_argument("others", nargs="+")
    a = p.parse_args()
    jobs = a.jobs.split(",")
    for j in jobs:
        if j not in JOBS:
            sys.exit(f"unknown job {j!r}: one of {', '.join(JOBS)}")
    # A name without a slash would be looked up on PATH by the shell's rules.
    a.base, a.others = os.path.abspath(a.base), [os.path.abspath(b) for b in a.others]
    bins = [a.base] + a.others
    for b in bins:
        if not os.access(b, os.X_OK):
            sys.exit(f"{b}: not an executable")
    out = tempfile.mkdtemp(prefix="ab-")
    print(f"raw reports in {out}/runs.jsonl; base {a.base}; {a.pairs} rounds of {', '.join(jobs)}", flush=True)
    results = {(j, b): [] for j in jobs for b in bins}
    with open(os.path.join(out, "runs.jsonl"), "w") as raw:
        for rnd in range(1, a.pairs + 1):
            for job in jobs:
                k = (rnd - 1) % len(bins)
                order = bins[k:] + bins[:k]
                if rnd % 2 == 0:
                    order.reverse()
                rows = {b: run(b, job, rnd, raw) for b in order}
                for b in bins:
                    results[(job, b)].append(rows[b])
                base = rows[a.base]["txn_per_s"]
                ratios = " ".join(f"{rows[b]['txn_per_s'] / base:.3f}" for b in a.others)
                extra = ""
                if job == "main":
                    extra = "; commit p50 ms " + " ".join(f"{rows[b]['commit_p50_us'] / 1000:.2f}" for b in bins)
                    extra += ", one append p50 ms " + " ".join(
                        f"{rows[b].get('append_p50_us', float('nan')) / 1000:.2f}" for b in bins)
                print(f"round {rnd} {job:>4}: base {base:,.0f} txn/s; ratios {ratios}{extra}", flush=True)
    print()
    print("job   binary: median ratio to base (min-max over rounds); median txn/s")
    for job in jobs:
        base = [r["txn_per_s"] for r in results[(job, a.base)]]
        print(f"{job:>4}  {a.base}: {statistics.median(base):,.0f} txn/s")
        for b in a.others:
            mine = [r["txn_per_s"] for r in results[(job, b)]]
            ratios = [m / x for m, x in zip(mine, base)]
            print(f"{job:>4}  {b}: {statistics.median(ratios):.3f}x ({min(ratios):.3f}-{max(ratios):.3f}); "
                  f"{statistics.median(mine):,.0f} txn/s")


if __name__ == "__main__":
    main()
