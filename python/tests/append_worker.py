"""One process of the list-append workload: until its time is up, each
transaction (interactive, serializable, run by ``Client.run``) reads one
to three of ``--lists`` lists and appends its id to each, its writes held
back by the client and sent with its commit. Before a transaction's first
attempt the journal (``--journal``) gets ``try ID LIST...``; once its
commit returned, ``ok ID LIST=VALUE...`` with the value each list had when
the successful attempt read it. A checker then knows which appends were
acknowledged, which may or may not have happened, and what each
acknowledged one saw. Exits 1 when a call fails for good (the server was
killed, say).

    python append_worker.py ADDRESS --lists 16 --seconds 5 --seed 1 --journal FILE
"""

import argparse
import os
import random
import sys
import time
from pathlib import Path

try:
    import milliscale  # noqa: F401  (the installed package)
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from milliscale import Client, Isolation, MilliscaleError  # noqa: E402

TABLE = "lists"


def key(i: int) -> bytes:
    return f"list{i:03}".encode()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("address")
    p.add_argument("--lists", type=int, default=16)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--journal", required=True)
    a = p.parse_args()
    rng = random.Random(a.seed)
    journal = open(a.journal, "a", buffering=1)
    deadline = time.monotonic() + a.seconds
    seq = 0
    with Client(a.address, timeout=30) as db:
        while time.monotonic() < deadline:
            lists = rng.sample(range(a.lists), rng.randint(1, 3))
            tid = f"{os.getpid()}.{seq}"
            seq += 1
            journal.write(f"try {tid} {' '.join(map(str, lists))}\n")
            seen = {}

            def append(tx):
                seen.clear()
                values = tx.get_many(TABLE, [key(i) for i in lists])
                for i, v in zip(lists, values):
                    v = v or b""
                    seen[i] = v.decode()
                    tx.put(TABLE, key(i), v + f"{tid},".encode())

            try:
                db.run(append, Isolation.SERIALIZABLE, attempts=1000)
            except MilliscaleError as e:
                print(f"error: {e}", flush=True)
                return 1
            journal.write(f"ok {tid} {' '.join(f'{i}={seen[i]}' for i in lists)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
