"""A bank and a list-append workload through :class:`milliscale.Cluster`
while `milliscale cluster split` and `cluster move` run one after another
(design record 0009), three seeds. Each list-append transaction reads one
to three lists and appends its id to each. Checked at the end: the bank's
total (in every read-only transaction too); every acknowledged append is
in its lists once; an append of unknown outcome is in all of its lists or
none; no other id is in a list; every list a committed transaction read is
a prefix of the final list; and the application saw no error
(``Cluster.run`` runs a retryable one again)."""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time

import pytest

from conftest import ENV, Shards, binary
from milliscale import Cluster, MilliscaleError

ACCOUNTS = 12
INITIAL = 100
LISTS = 16
SPLITS = ["bank=a04", "bank=a08", "lists=l05", "lists=l10"]


def account(i: int) -> bytes:
    return b"a%02d" % i


def lst(i: int) -> bytes:
    return b"l%02d" % i


def ids(v) -> list[int]:
    return [int(x) for x in v.decode().split(",") if x] if v else []


def amount(v) -> int:
    return INITIAL if v is None else int(v)


def mover(map_store: str, seed: int, stop: threading.Event, done: dict) -> None:
    """Split or move a range of ``bank`` or ``lists`` at a time, until stopped."""
    rng = random.Random(seed)
    while not stop.is_set():
        if rng.random() < 0.3:
            at = (f"bank=a{rng.randrange(1, ACCOUNTS):02d}" if rng.random() < 0.5
                  else f"lists=l{rng.randrange(1, LISTS):02d}")
            r = subprocess.run([binary(), "cluster", "split", "--map", map_store, "--at", at],
                               env=ENV, capture_output=True, text=True)
            done["splits"] += r.returncode == 0
        else:
            status = subprocess.run([binary(), "cluster", "show", "--map", map_store],
                                    env=ENV, capture_output=True, text=True)
            ranges = movable(status.stdout)
            if ranges:
                start, owner = rng.choice(ranges)
                to = (owner + rng.randrange(1, 3)) % 3
                r = subprocess.run(
                    [binary(), "cluster", "move", "--map", map_store, "--range", start, "--to", str(to)],
                    env=ENV, capture_output=True, text=True)
                if r.returncode == 0:
                    done["moves"] += 1
                else:
                    done["failed"].append(r.stderr)
        time.sleep(rng.uniform(0.02, 0.12))


def movable(map_json: str) -> list[tuple[str, int]]:
    """The ranges of ``bank`` and ``lists`` that begin at a key, as
    ``TABLE=KEY``, with their owners, from ``cluster show`` (each range's
    first key is the table's name, a 0 byte, then the key)."""
    out = []
    for start, shard in json.loads(map_json)["ranges"]:
        table, _, key = bytes(start).partition(b"\0")
        if table in (b"bank", b"lists") and key:
            out.append((f"{table.decode()}={key.decode()}", shard))
    return out


def worker(addr: str, wid: int, seed: int, stop: threading.Event, h: dict) -> None:
    rng = random.Random(seed * 1000 + wid)
    with Cluster(addr) as c:
        seq = 0
        while not stop.is_set():
            seq += 1
            roll = rng.randrange(10)
            try:
                if roll < 5:
                    txn = wid * 1_000_000 + seq
                    keys = sorted({rng.randrange(LISTS) for _ in range(rng.randint(1, 3))})

                    def append(tx, keys=keys, txn=txn):
                        seen = []
                        for k in keys:
                            cur = ids(tx.get("lists", lst(k)))
                            seen.append((k, cur))
                            tx.put("lists", lst(k), ",".join(map(str, cur + [txn])).encode())
                        return seen

                    try:
                        seen = c.run(append, attempts=50)
                    except MilliscaleError as e:
                        if e.kind != "unknown":
                            raise
                        h["unknown"].append((txn, keys))
                        continue
                    h["appended"].append((txn, keys))
                    h["reads"].extend(seen)
                elif roll < 8:
                    a = rng.randrange(ACCOUNTS)
                    b = (a + rng.randrange(1, ACCOUNTS)) % ACCOUNTS
                    n = rng.randint(1, 5)

                    def transfer(tx, a=a, b=b, n=n):
                        x, y = amount(tx.get("bank", account(a))), amount(tx.get("bank", account(b)))
                        tx.put("bank", account(a), b"%d" % (x - n))
                        tx.put("bank", account(b), b"%d" % (y + n))

                    try:
                        c.run(transfer, attempts=50)
                    except MilliscaleError as e:
                        if e.kind != "unknown":
                            raise
                else:
                    k = rng.randrange(LISTS)

                    def audit(tx, k=k):
                        return (sum(amount(tx.get("bank", account(i))) for i in range(ACCOUNTS)),
                                ids(tx.get("lists", lst(k))))

                    total, cur = c.run(audit, attempts=50, read_only=True)
                    h["totals"].append(total)
                    h["reads"].append((k, cur))
            except Exception as e:  # noqa: BLE001 (reported by the test)
                h["errors"].append(repr(e))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_bank_and_list_append_hold_while_ranges_split_and_move(emulator, seed):
    shards = Shards(emulator, [a for s in SPLITS for a in ("--split", s)])
    try:
        with Cluster(shards.addrs[0]) as c:
            c.create_table("bank")
            c.create_table("lists")
        stop = threading.Event()
        done = {"splits": 0, "moves": 0, "failed": []}
        hs = [{"appended": [], "unknown": [], "reads": [], "totals": [], "errors": []} for _ in range(3)]
        threads = [threading.Thread(target=worker, args=(shards.addrs[w], w + 1, seed, stop, hs[w]))
                   for w in range(3)]
        threads.append(threading.Thread(target=mover, args=(shards.map_store, seed, stop, done)))
        for t in threads:
            t.start()
        time.sleep(5)
        stop.set()
        for t in threads:
            t.join(timeout=120)
        with Cluster(shards.addrs[1]) as c:
            finals = {k: ids(c.run(lambda tx, k=k: tx.get("lists", lst(k)), attempts=50)) for k in range(LISTS)}
            total = c.run(lambda tx: sum(amount(tx.get("bank", account(i))) for i in range(ACCOUNTS)),
                          attempts=50)
    finally:
        shards.stop()
    errors = [e for h in hs for e in h["errors"]]
    assert not errors, errors
    assert total == ACCOUNTS * INITIAL
    assert all(t == ACCOUNTS * INITIAL for h in hs for t in h["totals"])
    known = set()
    for k, l in finals.items():
        assert len(set(l)) == len(l), f"an id twice in list {k}: {l}"
    for h in hs:
        for txn, keys in h["appended"]:
            known.add(txn)
            for k in keys:
                assert txn in finals[k], f"acknowledged append {txn} lost from list {k}"
        for txn, keys in h["unknown"]:
            known.add(txn)
            present = [txn in finals[k] for k in keys]
            assert all(present) or not any(present), f"append {txn} in some of its lists only"
        for k, seen in h["reads"]:
            assert finals[k][: len(seen)] == seen, f"a read of list {k} ({seen}) is not a prefix of {finals[k]}"
    for k, l in finals.items():
        assert set(l) <= known, f"list {k} holds ids no client committed: {set(l) - known}"
    appends = sum(len(h["appended"]) for h in hs)
    print(f"seed {seed}: {done['splits']} splits, {done['moves']} moves "
          f"({len(done['failed'])} failed), {appends} appends checked")
    assert done["moves"] >= 3, done["failed"]
    assert appends > 20
