"""A cluster of three ``milliscale serve --cluster`` shards on the emulator,
through :class:`milliscale.Cluster`: tables across the shards, reads and
writes, a bank moved by 8 processes with the total checked during and
after, write skew across two shards refused under SERIALIZABLE, another
isolation level refused by name, and the errors a user meets."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ENV, Shards, binary, free_port
from milliscale import (
    Batch,
    Cluster,
    ClusterChangedTransaction,
    ConflictError,
    InvalidArgumentError,
    Isolation,
    MilliscaleError,
    NotFoundError,
    PermissionDeniedError,
    ResolvedTs,
)

ACCOUNTS = 12
INITIAL = 100


@pytest.fixture
def shards(emulator):
    s = Shards(emulator, ["--even-table", "bank"])
    yield s
    s.stop()


@pytest.fixture
def cluster(shards):
    with Cluster(shards.addrs[0]) as c:
        c.create_table("bank")
        yield c


def account(i: int) -> bytes:
    # The keys `cluster init --even-table` splits: r and 16 hex digits,
    # spread over the shards by the rank's scramble.
    return b"r%016x" % ((i * 0x9E3779B97F4A7C15) % (1 << 64))


def balance(v) -> int:
    return INITIAL if v is None else int(v)


def total(c: Cluster, attempts: int = 16) -> int:
    return c.run(
        lambda tx: sum(balance(tx.get("bank", account(i))) for i in range(ACCOUNTS)),
        attempts=attempts,
    )


def test_tables_reads_and_writes_span_the_shards(cluster):
    assert cluster.list_tables() == ["bank"]
    with pytest.raises(NotFoundError):
        cluster.get("nope", b"k")
    for i in range(ACCOUNTS):
        cluster.put("bank", account(i), b"%d" % INITIAL)
    owners = set()
    with cluster.transaction() as tx:
        for i in range(ACCOUNTS):
            assert tx.get("bank", account(i)) == b"100"
        owners = set(tx.shards())
    assert owners == {0, 1, 2}, "the accounts live on every shard"
    # Every account in one call per shard; the same values as one by one.
    with cluster.transaction() as tx:
        keys = [account(i) for i in range(ACCOUNTS)] + [b"absent"]
        assert tx.get_many("bank", keys) == [b"100"] * ACCOUNTS + [None]
        tx.put("bank", account(1), b"mine")
        assert tx.get_many("bank", [account(1), account(2)]) == [b"mine", b"100"]
        tx.abort()
    assert cluster.delete("bank", account(0)) is True
    assert cluster.get("bank", account(0)) is None
    assert cluster.delete("bank", account(0)) is False
    r = cluster.execute(
        __import__("milliscale").Batch().put("bank", b"x", b"1").get("bank", b"x").delete("bank", b"x")
    )
    assert r.results == [None, b"1", True]
    shards = cluster.shards()
    assert [s.shard for s in shards] == [0, 1, 2]
    # Every shard has written its log (the tables' creation at least).
    assert all(s.log_requests_per_s is not None and s.log_requests_per_s > 0 for s in shards), shards


def test_write_skew_across_two_shards_is_refused(cluster):
    a, b = account(0), next(account(i) for i in range(1, ACCOUNTS) if True)
    t1, t2 = cluster.transaction(), cluster.transaction()
    for t in (t1, t2):
        t.get("bank", a)
        t.get("bank", b)
    t1.put("bank", a, b"0")
    t2.put("bank", b, b"0")
    t1.commit()
    with pytest.raises(ConflictError) as e:
        t2.commit()
    assert e.value.retryable


def test_another_isolation_level_is_refused_by_name(cluster):
    with pytest.raises(InvalidArgumentError, match="SERIALIZABLE"):
        cluster.transaction(Isolation.SNAPSHOT)


def test_a_bank_from_8_processes_keeps_its_total(shards, cluster):
    stop = threading.Event()
    seen, errors = [], []

    def audit():
        # An audit reads every account while 8 processes move money: it
        # fails local validation often (a prepared write below its reads),
        # so it may take many runs.
        while not stop.is_set():
            try:
                seen.append(total(cluster, attempts=1000))
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)
                return

    auditor = threading.Thread(target=audit)
    auditor.start()
    worker = Path(__file__).with_name("cluster_bank_worker.py")
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), shards.addrs[w % 3], str(w + 1), "25"],
            env={**ENV, "PYTHONPATH": os.pathsep.join(sys.path)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(8)
    ]
    done = 0
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        done += int(out.strip())
    stop.set()
    auditor.join()
    assert done == 8 * 25
    assert not errors, errors
    assert seen and all(t == ACCOUNTS * INITIAL for t in seen), seen
    assert total(cluster) == ACCOUNTS * INITIAL


def test_a_scan_spans_the_shards_and_refuses_a_phantom(cluster):
    for i in range(0, ACCOUNTS, 2):
        cluster.put("bank", account(i), b"%d" % i)
    rows = cluster.scan("bank")
    assert [k for k, _ in rows] == sorted(account(i) for i in range(0, ACCOUNTS, 2))
    assert len(cluster.scan("bank", limit=2)) == 2
    assert cluster.scan("bank", reverse=True, limit=1) == [max(rows)]
    with cluster.transaction() as tx:
        assert len(list(tx.scan("bank"))) == ACCOUNTS // 2
        assert tx.shards() == [0, 1, 2]
    # A scan, a new row in its range committed by another, then a write:
    # the commit is refused (a phantom), and runs again cleanly.
    t = cluster.transaction()
    seen = list(t.scan("bank"))
    cluster.put("bank", account(1), b"1")
    t.put("bank", b"summary", b"%d" % len(seen))
    with pytest.raises(ConflictError):
        t.commit()
    r = cluster.execute(__import__("milliscale").Batch().scan("bank", limit=100))
    assert len(r.results[0]) == ACCOUNTS // 2 + 1


RW = "rw-0123456789abcdef"
RO = "ro-0123456789abcdef"


def test_a_cluster_behind_tokens_and_tls(emulator, tmp_path):
    """Shards that take only tokens over TLS, and call each other so: a
    cross-shard transaction and a one-shard batch with a read-write token;
    reads but no writes with a read-only one; no token, a wrong one, or
    plaintext refused."""
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-addext", "basicConstraints=critical,CA:FALSE",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    tokens = tmp_path / "tokens"
    tokens.write_text(f"read-write:{RW}\nread-only:{RO}\n")
    shards = Shards(
        emulator, ["--even-table", "bank"],
        "--tokens", str(tokens), "--peer-token", RW,
        "--tls-cert", str(cert), "--tls-key", str(key), "--peer-tls-ca", str(cert),
    )
    ca = cert.read_bytes()
    try:
        with Cluster(shards.addrs[0], RW, tls_ca=ca) as c:
            c.create_table("bank")
            a, b = account(0), account(1)

            def move(tx):
                tx.put("bank", a, b"1")
                for i in range(1, ACCOUNTS):
                    tx.put("bank", account(i), b"2")
                return tx.shards()

            assert len(c.run(move)) > 1, "the accounts span the shards"

            assert c.execute(Batch().get("bank", a).put("bank", a, b"3")).results[0] == b"1"
            assert [s.shard for s in c.shards()] == [0, 1, 2]
        for token, tls in ((None, ca), ("wrong-0123456789abcdef", ca), (RW, None)):
            with pytest.raises(MilliscaleError):
                Cluster(shards.addrs[0], token, tls_ca=tls, connect_timeout=2).list_tables()
        with Cluster(shards.addrs[0], RO, tls_ca=ca) as c:
            assert (c.get("bank", a), c.get("bank", b)) == (b"3", b"2")
            with pytest.raises(PermissionDeniedError):
                c.put("bank", a, b"9")
            with pytest.raises(PermissionDeniedError):
                c.execute(Batch().put("bank", a, b"9"))
        with Cluster(shards.addrs[0], RW, tls_ca=ca) as c:
            assert c.get("bank", a) == b"3"
    finally:
        shards.stop()


def test_a_standby_shows_in_the_shards_status(shards, cluster):
    # A hot standby for shard 0 checks on it every 100 ms; `shards()` shows
    # it with how far it trails. (Its stdout stays silent until it takes
    # over, so it is not a `Process`.)
    port = free_port()
    standby = subprocess.Popen(
        [binary(), "serve", "--cluster", shards.map_store, "--shard", "0", "--store", shards.stores[0],
         "--standby", "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV,
    )
    try:
        assert cluster.shards()[1].standbys == ()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            seen = cluster.shards()[0].standbys
            if seen:
                break
            time.sleep(0.1)
        assert len(seen) == 1, seen
        assert seen[0].address == f"127.0.0.1:{port}"
        assert seen[0].last_seen_ms < 5000 and seen[0].applied_token > 0, seen
    finally:
        standby.kill()
        standby.wait()


def test_a_value_over_its_limit_is_refused_before_it_is_sent(cluster):
    # A 40 MiB value used to be sent whole and come back UNAVAILABLE,
    # marked retryable, after 1.5 s. Now: INVALID_ARGUMENT naming the
    # limit, not retryable, and nothing written, on every path.
    cluster.create_table("limits")
    huge = b"v" * (40 << 20)
    for write in (
        lambda: cluster.put("limits", "k", huge),
        lambda: cluster.execute(Batch().put("limits", "k", huge)),
        lambda: cluster.put("limits", "k" * 1025, "v"),
        lambda: cluster.run(lambda tx: tx.put("limits", "k", huge)),
    ):
        with pytest.raises(InvalidArgumentError, match="262144|1024") as e:
            write()
        assert not e.value.retryable
    assert cluster.scan("limits") == []


def test_the_cluster_feed_shows_each_transfer_whole_at_every_resolved_point(shards, cluster):
    """``Cluster.changes``: a consumer applies the merged feed to a map while
    transfers run across the shards; at every resolved timestamp the map's
    bank total is whole (no transfer seen in part), timestamps never go
    back, and in the end the map equals the bank read from the cluster."""
    feed = cluster.changes("bank", resolved=True)
    first = next(feed)  # the feed runs: everything after it comes
    assert isinstance(first, ResolvedTs), first
    done = threading.Event()
    moved = []

    def transfers():
        import random

        rng = random.Random(5)
        with Cluster(shards.addrs[1]) as c:
            for _ in range(60):
                a, b = rng.sample(range(ACCOUNTS), 2)
                amount = rng.randint(1, 20)

                def move(tx, a=a, b=b, amount=amount):
                    x, y = balance(tx.get("bank", account(a))), balance(tx.get("bank", account(b)))
                    tx.put("bank", account(a), b"%d" % (x - amount))
                    tx.put("bank", account(b), b"%d" % (y + amount))

                c.run(move, attempts=100)
                moved.append((a, b))
        done.set()

    t = threading.Thread(target=transfers)
    t.start()
    rows, last_ts, points, txns = {}, 0, 0, 0
    end = None
    deadline = time.monotonic() + 120
    for e in feed:
        assert time.monotonic() < deadline, "the feed did not catch up"
        if isinstance(e, ClusterChangedTransaction):
            assert e.ts >= last_ts, f"ts {e.ts} after {last_ts}"
            last_ts = e.ts
            assert len(e.changes) == 2 and all(c.table == "bank" for c in e.changes), e
            for c in e.changes:
                rows[c.key] = c.value
            txns += 1
            continue
        assert e.ts >= first.ts
        points += 1
        assert sum(balance(rows.get(account(i))) for i in range(ACCOUNTS)) == ACCOUNTS * INITIAL
        if done.is_set() and end is None:
            end = cluster.run(lambda tx: {account(i): tx.get("bank", account(i)) for i in range(ACCOUNTS)})
            end_ts = e.ts
        if end is not None and e.ts > end_ts + 1_000_000 and txns >= len(moved):
            break
    t.join()
    feed.close()
    assert txns == len(moved) == 60, (txns, len(moved))
    assert points > 2
    assert {k: v for k, v in rows.items()} == {k: v for k, v in end.items() if v is not None}
