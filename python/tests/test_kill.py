"""kill -9 of the server during a Python bank workload, then a restart on
the same store: every acknowledged transfer is there, the total holds, and
the balances are exactly the opening balances moved by the transfers that
survived (a consistent cut). And kill -9 of clients and then of the server
during a bank and a list-append workload, every call of their
transactions on the connection's stream and their writes held back until
the commit: the same for the bank, and every acknowledged append in its
lists once, after what its transaction read, every other append in all
its lists or none. MILLISCALE_KILL_TRIALS sets the number of trials (10
by default)."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import Server
from test_bank import ACCOUNTS, BALANCE, WORKER, open_accounts

APPENDER = Path(__file__).with_name("append_worker.py")
LISTS = 16

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


def check_appends(client, journal: Path) -> int:
    """The list-append oracle; returns how many acknowledged appends were
    checked."""
    final = {int(k[4:]): v.decode().split(",")[:-1] for k, v in client.scan("lists")}
    tried, acked = {}, {}
    for line in journal.read_text().splitlines() if journal.exists() else []:
        kind, tid, *rest = line.split(" ")
        if kind == "try":
            tried[tid] = [int(i) for i in rest]
        elif kind == "ok":
            acked[tid] = {int(i): v for i, v in (r.split("=", 1) for r in rest)}
    for i, ids in final.items():
        assert len(ids) == len(set(ids)), f"list {i} holds an append twice"
        unknown = [t for t in ids if t not in tried]
        assert not unknown, f"list {i} holds appends never tried: {unknown[:3]}"
    for tid, lists in tried.items():
        present = [tid in final.get(i, []) for i in lists]
        if tid in acked:
            assert all(present), f"acknowledged append {tid} lost from {lists}"
            for i, seen in acked[tid].items():
                want = (seen + tid + ",").split(",")[:-1]
                assert final[i][: len(want)] == want, f"append {tid} to list {i} is not after what it read"
        else:
            assert all(present) or not any(present), f"append {tid} is in some of its lists only"
    return len(acked)


def test_kill_9_of_clients_and_server_mid_stream_loses_no_acknowledged_commit(emulator, tmp_path):
    checked = [0, 0]
    for trial in range(TRIALS):
        rng = random.Random(1000 + trial)
        store = emulator.fresh_store()
        bank, appends = tmp_path / f"bank-{trial}", tmp_path / f"appends-{trial}"
        server = Server(store)
        with server.client() as c:
            open_accounts(c)
            c.create_table("lists")
        def spawn(script, seed, journal, *args):
            return subprocess.Popen(
                [sys.executable, str(script), server.address, *args, "--seconds", "30",
                 "--seed", str(seed), "--journal", str(journal)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        workers = [spawn(WORKER, trial * 100 + i, bank, "--accounts", str(ACCOUNTS)) for i in range(2)]
        workers += [spawn(APPENDER, trial * 100 + 10 + i, appends, "--lists", str(LISTS)) for i in range(3)]
        # One client of each workload killed mid-stream, then the server.
        time.sleep(rng.uniform(0.5, 1.5))
        for w in (workers[0], workers[2]):
            w.send_signal(signal.SIGKILL)
        time.sleep(rng.uniform(0.2, 1.5))
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait()
        for w in workers:
            w.wait(timeout=60)
        restarted = Server(store)
        try:
            with restarted.client() as c:
                checked[0] += check(c, bank)
                checked[1] += check_appends(c, appends)
        finally:
            code, err = restarted.stop()
            assert code == 0, err
    print(f"{TRIALS} kill -9 trials: {checked[0]} transfers and {checked[1]} appends acknowledged and checked")
    assert checked[0] > 0 and checked[1] > 0, "no trial got as far as acknowledged commits"
