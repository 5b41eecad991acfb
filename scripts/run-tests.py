#!/usr/bin/env python3
"""Run the workspace's test binaries, several at once.

`cargo test` runs its test binaries one after another. Most of ours spend
their time waiting (kill -9 trials, simulated store latency, processes
starting), so on two cores three binaries at once finish in well under
the time of one after another. Each binary still runs its own tests on
its usual threads, from its package's directory, as `cargo test` would.

Usage: run-tests.py JOBS TIMEOUT_S < cargo-test-json
  (the output of `cargo test --no-run --message-format=json`)

Each binary's output goes to a log; a failing or timed-out binary's log is
printed whole, and the run exits 1. The time each binary took is kept in
the target directory (test-times.json), so that the next run starts the
slowest first.
"""

import json
import os
import subprocess
import sys
import threading
import time


def main():
    jobs, timeout = int(sys.argv[1]), float(sys.argv[2])
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    logs = os.path.join(target, "test-logs")
    os.makedirs(logs, exist_ok=True)
    times_path = os.path.join(target, "test-times.json")
    try:
        with open(times_path) as f:
            previous = json.load(f)
    except (OSError, ValueError):
        previous = {}

    binaries = []
    for line in sys.stdin:
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if m.get("reason") != "compiler-artifact" or not m.get("executable"):
            continue
        if not m["profile"]["test"]:
            continue
        t = m["target"]
        name = f'{os.path.basename(os.path.dirname(m["manifest_path"]))}/{t["name"]}'
        if "lib" in t["kind"] or "bin" in t["kind"]:
            name += " (unit)"
        binaries.append((name, m["executable"], os.path.dirname(m["manifest_path"])))
    if not binaries:
        print("run-tests: no test binaries in the input", file=sys.stderr)
        return 1
    # Slowest first (by the last run), so the long ones overlap the rest.
    binaries.sort(key=lambda b: -previous.get(b[0], 1e9))

    lock = threading.Lock()
    queue = list(binaries)
    failed, took, start = [], {}, time.monotonic()

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                name, exe, cwd = queue.pop(0)
            log = os.path.join(logs, name.replace("/", "-").replace(" ", "") + ".log")
            t0 = time.monotonic()
            with open(log, "w") as out:
                try:
                    rc = subprocess.run([exe], cwd=cwd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout).returncode
                except subprocess.TimeoutExpired:
                    rc = "timed out"
            dt = time.monotonic() - t0
            with open(log) as f:
                text = f.read()
            summary = [l for l in text.splitlines() if l.startswith("test result:")]
            with lock:
                took[name] = dt
                status = "ok" if rc == 0 else f"FAILED ({rc})"
                print(f"[{time.monotonic() - start:6.1f} s] {name}: {status} in {dt:.1f} s; "
                      f"{summary[-1] if summary else 'no summary'}", flush=True)
                if rc != 0:
                    failed.append(name)
                    print(f"---- {name}: {log}\n{text}\n---- end of {name}", flush=True)

    threads = [threading.Thread(target=worker) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    previous.update(took)
    with open(times_path, "w") as f:
        json.dump(previous, f, indent=1, sort_keys=True)
    if failed:
        print(f"run-tests: {len(failed)} test binaries failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    print(f"run-tests: {len(binaries)} test binaries passed in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
