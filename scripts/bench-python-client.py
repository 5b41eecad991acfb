#!/usr/bin/env python3
"""What a call costs from Python: one process, one thread, calls in a loop
against a running `milliscale serve` (Status, one-shot gets of one key,
one-shot puts), for SECONDS each. Prints calls a second and the latency
percentiles of each kind.

    python3 scripts/bench-python-client.py ADDRESS [SECONDS]

Through the package: until `4fa09cb` it called through grpcio and
generated stubs, since then through the Rust client. The PyO3 probe it
was compared with (scripts/pyo3-probe) is at commit `2072127`.
"""

import sys
import time
from pathlib import Path

try:
    import milliscale  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from milliscale import Client  # noqa: E402


def measure(client, name, call, seconds):
    lat = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        call()
        lat.append(time.perf_counter() - t)
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3
    print(f"| {client} | {name} | {len(lat) / seconds:,.0f} | {q(0.5):.3f} | {q(0.99):.3f} |")


def main():
    address = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
    which = "package"
    setup = Client(address)
    if "pybench" not in setup.list_tables():
        setup.create_table("pybench")
    setup.put("pybench", b"k", b"v" * 80)
    db = setup
    measure(which, "Status", db.status, seconds)
    measure(which, "get (Execute, 1 read)", lambda: db.get("pybench", b"k"), seconds)
    measure(which, "put (Execute, 1 write, durable)", lambda: db.put("pybench", b"k", b"v" * 80), seconds)


if __name__ == "__main__":
    main()
