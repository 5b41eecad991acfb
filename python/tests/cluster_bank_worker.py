"""One process of the cluster bank test: TRANSFERS transfers between the
accounts through a cluster opened at ADDRESS, as client CLIENT_ID; prints
how many committed.

    python cluster_bank_worker.py ADDRESS CLIENT_ID TRANSFERS
"""

import random
import sys

from milliscale import Cluster

ACCOUNTS = 12
INITIAL = 100


def account(i: int) -> bytes:
    return b"r%016x" % ((i * 0x9E3779B97F4A7C15) % (1 << 64))


def main() -> None:
    address, client_id, transfers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(client_id)
    done = 0
    with Cluster(address, client_id=client_id) as c:
        for _ in range(transfers):
            a, b = rng.sample(range(ACCOUNTS), 2)
            amount = rng.randint(1, 5)

            def move(tx):
                fa = tx.get("bank", account(a))
                fb = tx.get("bank", account(b))
                fa = INITIAL if fa is None else int(fa)
                fb = INITIAL if fb is None else int(fb)
                tx.put("bank", account(a), b"%d" % (fa - amount))
                tx.put("bank", account(b), b"%d" % (fb + amount))

            c.run(move, attempts=200)
            done += 1
    print(done)


if __name__ == "__main__":
    main()
