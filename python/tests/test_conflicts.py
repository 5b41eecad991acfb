"""Conflicts surface as retryable errors, and the retry helper resolves them."""

import threading

import pytest

from milliscale import ConflictError, Isolation


@pytest.mark.single_server("a write takes its key when written; a cluster's transactions conflict at commit (optimistic)")
def test_a_write_write_conflict_is_retryable(db):
    db.create_table("t")
    db.put("t", b"k", b"0")
    a = db.transaction()
    b = db.transaction()
    a.put("t", b"k", b"a")
    a.flush()
    b.put("t", b"k", b"b")  # held back: it travels with b's next call
    with pytest.raises(ConflictError) as e:
        b.flush()
    assert e.value.retryable and e.value.kind == "conflict"
    a.commit()
    b.abort()
    assert db.get("t", b"k") == b"a"


@pytest.mark.parametrize(
    "level",
    [pytest.param(Isolation.SNAPSHOT, marks=pytest.mark.single_server("SNAPSHOT isolation")), Isolation.SERIALIZABLE],
)
def test_the_retry_helper_loses_no_increment(server, level):
    """8 threads add 1 to one counter 20 times each, every increment a
    read-modify-write under Client.run: the counter ends at 160, and some
    runs really conflicted."""
    with server.client() as c:
        c.create_table("t")
        c.put("t", b"n", b"0")
    attempts = []

    def worker():
        with server.client() as c:
            for _ in range(20):
                runs = [0]

                def increment(tx):
                    runs[0] += 1
                    n = int(tx.get("t", b"n"))
                    tx.put("t", b"n", str(n + 1))

                c.run(increment, level, attempts=1000)
                attempts.append(runs[0])
                runs[0] = 0

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with server.client() as c:
        assert c.get("t", b"n") == b"160"
    assert len(attempts) == 160
    assert sum(attempts) > 160, "no increment conflicted: the test did not test retry"


def test_batches_retry_on_the_server(db):
    db.create_table("t")
    from milliscale import Batch

    results = []

    def writer(i):
        results.append(db.execute(Batch().put("t", b"hot", str(i)), retries=50))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 16 and all(r.token is not None for r in results)
