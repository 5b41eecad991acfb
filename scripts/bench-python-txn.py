#!/usr/bin/env python3
"""Interactive transactions from Python: THREADS threads of one process,
each running ``with db.transaction() as tx:`` in a loop against a running
`milliscale serve`, as a Python service would. A transaction is YCSB-A's
interactive shape, as `bench ycsb --interactive` runs it: 5 keys of
RECORDS (uniform), a get and an 8-byte patch of each (10 operations),
then the commit, waiting for durability. A conflict is run again and
counted. Prints one table row: transactions a second, latency p50/p99,
and the server's and this process's CPU per transaction.

    python3 scripts/bench-python-txn.py ADDRESS LABEL [SECONDS] [THREADS] [RECORDS] [get_many]

With ``get_many`` a transaction reads its 5 keys in one ``tx.get_many``
(3 round trips: begin, the read, the commit with the patches).

The package is whichever `milliscale` the interpreter imports (a virtualenv
per commit for an A/B: scripts/bench-python-txn.sh).
"""

import random
import sys
import threading
import time

from milliscale import Batch, Client, ConflictError

TABLE = "pytxn"
KEYS = 5


def key(i: int) -> bytes:
    return b"user%010d" % i


def load(db: Client, records: int) -> None:
    if TABLE not in db.list_tables():
        db.create_table(TABLE)
    for start in range(0, records, 500):
        b = Batch()
        for i in range(start, min(records, start + 500)):
            b.put(TABLE, key(i), bytes(100))
        db.execute(b)


def worker(db, records, stop, lat, counts, seed, many):
    rng = random.Random(seed)
    done = aborts = 0
    while not stop.is_set():
        keys = [key(rng.randrange(records)) for _ in range(KEYS)]
        t = time.perf_counter()
        while True:
            try:
                with db.transaction() as tx:
                    if many:
                        tx.get_many(TABLE, keys)
                    for k in keys:
                        if not many:
                            tx.get(TABLE, k)
                        tx.patch(TABLE, k, 8 * rng.randrange(12), rng.getrandbits(64).to_bytes(8, "little"))
                break
            except ConflictError:
                aborts += 1
        lat.append(time.perf_counter() - t)
        done += 1
    counts.append((done, aborts))


def main():
    address, label = sys.argv[1], sys.argv[2]
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    records = int(sys.argv[5]) if len(sys.argv) > 5 else 10_000
    many = len(sys.argv) > 6 and sys.argv[6] == "get_many"
    db = Client(address)
    load(db, records)
    # Warm up, then measure with fresh lists.
    for phase in ("warmup", "measure"):
        stop, lat, counts = threading.Event(), [], []
        pool = [threading.Thread(target=worker, args=(db, records, stop, lat, counts, i, many)) for i in range(threads)]
        cpu0, srv0, t0 = time.process_time(), db.status().cpu_seconds, time.monotonic()
        for th in pool:
            th.start()
        time.sleep(1.0 if phase == "warmup" else seconds)
        stop.set()
        for th in pool:
            th.join()
        cpu1, srv1, t1 = time.process_time(), db.status().cpu_seconds, time.monotonic()
    n = sum(c[0] for c in counts)
    aborts = sum(c[1] for c in counts)
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3
    per = lambda s: s / max(n, 1) * 1e6
    print(
        f"| {label} | {threads} | {n / (t1 - t0):,.0f} | {q(0.5):.2f} | {q(0.99):.2f} "
        f"| {per(srv1 - srv0):.0f} | {per(cpu1 - cpu0):.0f} | {aborts} |"
    )


if __name__ == "__main__":
    main()
