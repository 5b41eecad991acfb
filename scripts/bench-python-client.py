#!/usr/bin/env python3
"""What a call costs from Python: one process, one thread, calls in a loop
against a running `milliscale serve` (one-shot gets of one key, one-shot
puts, and Status), for SECONDS each. Prints calls a second and the
latency percentiles of each kind.

    python3 scripts/bench-python-client.py ADDRESS [SECONDS]
"""

import statistics
import sys
import time
from pathlib import Path

try:
    import milliscale  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from milliscale import Client  # noqa: E402


def measure(name, call, seconds):
    lat = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        call()
        lat.append(time.perf_counter() - t)
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3
    print(f"| {name} | {len(lat) / seconds:,.0f} | {q(0.5):.3f} | {q(0.99):.3f} |")


def main():
    address = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
    db = Client(address)
    if "pybench" not in db.list_tables():
        db.create_table("pybench")
    db.put("pybench", b"k", b"v" * 80)
    print("| call | calls/s | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|")
    measure("Status", db.status, seconds)
    measure("get (Execute, 1 read)", lambda: db.get("pybench", b"k"), seconds)
    measure("put (Execute, 1 write, durable)", lambda: db.put("pybench", b"k", b"v" * 80), seconds)


if __name__ == "__main__":
    main()
