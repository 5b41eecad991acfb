"""One process of the bank workload: transfers between random accounts
until its time is up, each an interactive serializable transaction run by
``Client.run`` that moves the amount and records the transfer under
``t/PID/SEQ`` in the ``transfers`` table. The key of every acknowledged
transfer is appended to the journal (``--journal``) once its commit
returned, so a checker knows which ones the server acknowledged. Prints
``{"transfers": N, "retries": M}``, or ``{"error": ...}`` and exits 1 when
a call fails for good (the server was killed, say).

    python bank_worker.py ADDRESS --accounts 64 --seconds 5 --seed 1 [--journal FILE] [--cluster]

With ``--cluster`` ADDRESS is a cluster's node, opened as a :class:`Cluster`.
"""

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

try:
    import milliscale  # noqa: F401  (the installed package)
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from milliscale import Client, Cluster, Isolation, MilliscaleError  # noqa: E402

TABLE = "bank"
TRANSFERS = "transfers"


def key(i: int) -> bytes:
    return f"acct{i:05}".encode()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("address")
    p.add_argument("--accounts", type=int, default=64)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--journal")
    p.add_argument("--cluster", action="store_true")
    a = p.parse_args()
    rng = random.Random(a.seed)
    journal = open(a.journal, "a", buffering=1) if a.journal else None
    transfers = retries = 0
    deadline = time.monotonic() + a.seconds
    with (Cluster if a.cluster else Client)(a.address, timeout=30) as db:
        while time.monotonic() < deadline:
            src, dst = rng.sample(range(a.accounts), 2)
            amount = rng.randint(1, 10)
            record = f"t/{os.getpid()}/{transfers}"
            runs = [0]

            def transfer(tx):
                runs[0] += 1
                s = int(tx.get(TABLE, key(src)))
                d = int(tx.get(TABLE, key(dst)))
                if s < amount:
                    return False
                tx.put(TABLE, key(src), str(s - amount))
                tx.put(TABLE, key(dst), str(d + amount))
                tx.put(TRANSFERS, record, f"{src} {dst} {amount}")
                return True

            try:
                moved = db.run(transfer, Isolation.SERIALIZABLE, attempts=1000)
            except MilliscaleError as e:
                print(json.dumps({"error": str(e)}), flush=True)
                return 1
            retries += runs[0] - 1
            if moved:
                transfers += 1
                if journal:
                    journal.write(record + "\n")
    print(json.dumps({"transfers": transfers, "retries": retries}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
