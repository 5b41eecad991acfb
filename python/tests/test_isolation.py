"""Every isolation level, through the Python client."""

import pytest

from milliscale import ConflictError, Isolation


@pytest.mark.single_server("SNAPSHOT and READ_COMMITTED isolation")
def test_snapshot_and_read_committed(db):
    db.create_table("t")
    db.put("t", b"x", b"old")
    with db.transaction(Isolation.SNAPSHOT) as snap, db.transaction(Isolation.READ_COMMITTED) as rc:
        # Asking for its isolation begins each: snap's snapshot is taken here.
        assert snap.isolation == Isolation.SNAPSHOT and rc.isolation == Isolation.READ_COMMITTED
        db.put("t", b"x", b"new")
        assert snap.get("t", b"x") == b"old"  # its snapshot
        assert rc.get("t", b"x") == b"new"  # the latest commit


@pytest.mark.single_server("a snapshot taken by the server (a cluster's transaction takes its timestamp at the client)")
def test_a_transaction_begins_with_its_first_call(db):
    db.create_table("t")
    db.put("t", b"x", b"old")
    open_before = db.status().open_transactions
    late = db.transaction(Isolation.SNAPSHOT)
    pinned = db.transaction(Isolation.SNAPSHOT)
    assert db.status().open_transactions == open_before  # no call yet
    at = pinned.snapshot  # begins it: its snapshot is taken here
    db.put("t", b"x", b"new")
    assert pinned.get("t", b"x") == b"old"
    assert late.get("t", b"x") == b"new"  # begun by this call, after the put
    assert late.snapshot > at
    late.commit()
    pinned.commit()
    with db.transaction() as idle:
        pass  # never begun: its commit makes no call
    assert idle.commit_info.token is None
    assert db.status().open_transactions == open_before


@pytest.mark.single_server("the default isolation (a cluster's is SERIALIZABLE)")
def test_the_default_is_snapshot_isolation(db):
    with db.transaction() as tx:
        assert tx.isolation == Isolation.SNAPSHOT


@pytest.mark.parametrize(
    "level,both_commit",
    [pytest.param(Isolation.SNAPSHOT, True, marks=pytest.mark.single_server("SNAPSHOT isolation")), (Isolation.SERIALIZABLE, False)],
)
def test_write_skew(db, level, both_commit):
    """Each transaction reads both keys and writes one: snapshot isolation
    lets both commit; serializable refuses the second."""
    db.create_table("t")
    db.put("t", b"x", b"0")
    db.put("t", b"y", b"0")
    a = db.transaction(level)
    b = db.transaction(level)
    for tx in (a, b):
        tx.get("t", b"x")
        tx.get("t", b"y")
    a.put("t", b"x", b"a")
    b.put("t", b"y", b"b")
    a.commit()
    if both_commit:
        b.commit()
    else:
        with pytest.raises(ConflictError) as e:
            b.commit()
        assert e.value.retryable


@pytest.mark.single_server("SNAPSHOT isolation")
def test_first_updater_wins_under_snapshot_isolation(db):
    db.create_table("t")
    db.put("t", b"x", b"0")
    a = db.transaction(Isolation.SNAPSHOT)
    a.get("t", b"x")
    db.put("t", b"x", b"1")  # commits after a's snapshot
    a.put("t", b"x", b"2")  # held back: its conflict comes with the next call
    with pytest.raises(ConflictError):
        a.get("t", b"x")
    a.abort()
    assert db.get("t", b"x") == b"1"


@pytest.mark.single_server("durable_snapshot (a cluster reads only durable commits anyway)")
def test_read_only_at_the_durable_snapshot(db):
    db.create_table("t")
    token = db.put("t", b"k", b"v")
    with db.transaction(durable_snapshot=True) as tx:
        assert tx.snapshot > token
        assert tx.get("t", b"k") == b"v"
