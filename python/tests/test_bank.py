"""The bank workload from 8 Python processes: the total holds."""

import json
import subprocess
import sys
from pathlib import Path

from milliscale import Batch, Cluster

ACCOUNTS = 64
BALANCE = 1000
WORKER = Path(__file__).with_name("bank_worker.py")


def open_accounts(client) -> None:
    client.create_table("bank")
    client.create_table("transfers")
    b = Batch()
    for i in range(ACCOUNTS):
        b.put("bank", f"acct{i:05}", str(BALANCE))
    client.execute(b)


def total(client) -> int:
    rows = client.scan("bank")
    assert len(rows) == ACCOUNTS
    return sum(int(v) for _, v in rows)


def test_eight_processes_keep_the_total(server, db):
    open_accounts(db)
    workers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), server.address, "--accounts", str(ACCOUNTS),
             "--seconds", "6", "--seed", str(i), *(["--cluster"] if isinstance(db, Cluster) else [])],
            stdout=subprocess.PIPE, text=True,
        )
        for i in range(8)
    ]
    # While they run, read-only snapshots see the total too.
    seen = 0
    while any(w.poll() is None for w in workers):
        assert total(db) == ACCOUNTS * BALANCE
        seen += 1
    outs = [json.loads(w.stdout.read().strip().splitlines()[-1]) for w in workers]
    assert all(w.returncode == 0 for w in workers), outs
    done = sum(o["transfers"] for o in outs)
    assert done > 100, outs
    assert sum(o["retries"] for o in outs) > 0, "no transfer conflicted: the test did not test retry"
    assert total(db) == ACCOUNTS * BALANCE
    assert seen > 3
