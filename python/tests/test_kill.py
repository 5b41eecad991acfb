"""kill -9 of the server during a Python bank workload, then a restart on
the same store: every acknowledged transfer is there, the total holds, and
the balances are exactly the opening balances moved by the transfers that
survived (a consistent cut). MILLISCALE_KILL_TRIALS sets the number of
trials (10 by default)."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import Server
from test_bank import ACCOUNTS, BALANCE, WORKER, open_accounts

TRIALS = int(os.environ.get("MILLISCALE_KILL_TRIALS", "10"))


def check(client, journal: Path) -> int:
    """The oracle; returns how many acknowledged transfers were checked."""
    balances = {int(k[4:]): int(v) for k, v in client.scan("bank")}
    assert len(balances) == ACCOUNTS
    assert sum(balances.values()) == ACCOUNTS * BALANCE, "the total changed"
    transfers = dict(client.scan("transfers"))
    acknowledged = journal.read_text().split() if journal.exists() else []
    lost = [k for k in acknowledged if k.encode() not in transfers]
    assert not lost, f"{len(lost)} acknowledged transfers lost, e.g. {lost[:3]}"
    expected = {i: BALANCE for i in range(ACCOUNTS)}
    for v in transfers.values():
        src, dst, amount = map(int, v.split())
        expected[src] -= amount
        expected[dst] += amount
    assert balances == expected, "the balances are not the transfers' sum: not a consistent cut"
    return len(acknowledged)


def test_kill_9_during_a_bank_workload_loses_no_acknowledged_transfer(emulator, tmp_path):
    checked = 0
    for trial in range(TRIALS):
        rng = random.Random(trial)
        store = emulator.fresh_store()
        journal = tmp_path / f"journal-{trial}"
        server = Server(store)
        with server.client() as c:
            open_accounts(c)
        workers = [
            subprocess.Popen(
                [sys.executable, str(WORKER), server.address, "--accounts", str(ACCOUNTS),
                 "--seconds", "30", "--seed", str(trial * 100 + i), "--journal", str(journal)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            for i in range(4)
        ]
        time.sleep(rng.uniform(0.3, 2.5))
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait()
        for w in workers:
            w.wait(timeout=60)  # each fails once the server is gone
        restarted = Server(store)
        try:
            with restarted.client() as c:
                checked += check(c, journal)
        finally:
            code, err = restarted.stop()
            assert code == 0, err
    print(f"{TRIALS} kill -9 trials: {checked} acknowledged transfers checked")
    assert checked > 0, "no trial got as far as an acknowledged transfer"
