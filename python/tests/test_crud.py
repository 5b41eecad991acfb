"""Tables, reads and writes, scans and batches through the Python client."""

import pytest

from milliscale import AlreadyExistsError, Batch, InvalidArgumentError, NotFoundError


def test_tables(db):
    db.create_table("a")
    db.create_table("b")
    assert db.list_tables() == ["a", "b"]
    with pytest.raises(AlreadyExistsError):
        db.create_table("a")
    db.drop_table("a")
    assert db.list_tables() == ["b"]
    with pytest.raises(NotFoundError):
        db.get("a", b"k")


def test_put_get_delete(db):
    db.create_table("t")
    t1 = db.put("t", b"k", b"v1")
    t2 = db.put("t", "k", "v2")  # str is UTF-8
    assert t2 > t1 > 0
    assert db.get("t", b"k") == b"v2"
    assert db.get("t", b"absent") is None
    assert db.delete("t", b"k") is True
    assert db.delete("t", b"k") is False
    assert db.get("t", b"k") is None


@pytest.mark.single_server("wait_for a token (a cluster's commits are durable when acknowledged)")
def test_wait_for_a_token(db):
    db.create_table("t")
    t = db.put("t", b"k", b"v")
    assert db.wait_for(t) > t


def test_transactions_commit_or_abort(db):
    db.create_table("t")
    with db.transaction() as tx:
        tx.put("t", b"a", b"1")
        tx.put("t", b"b", b"2")
        assert tx.get("t", b"a") == b"1"  # its own write
    assert tx.commit_info is not None and tx.commit_info.durable
    with pytest.raises(RuntimeError):
        with db.transaction() as tx:
            tx.put("t", b"a", b"lost")
            raise RuntimeError("the block fails")
    assert db.get("t", b"a") == b"1"


def test_a_patch_changes_part_of_a_value(db):
    db.create_table("t")
    db.put("t", b"a", b"1")
    with db.transaction() as tx:
        tx.patch("t", b"a", 0, b"9")
    assert db.get("t", b"a") == b"9"
    # In a batch, over the batch's own write.
    db.execute(Batch().put("t", b"b", b"xyz").patch("t", b"b", 1, b"Q"))
    assert db.get("t", b"b") == b"xQz"


def test_scans(db):
    db.create_table("t")
    with db.transaction() as tx:
        for i in range(2500):
            tx.put("t", f"k{i:05}", b"x" * 600)
    rows = db.scan("t")
    assert len(rows) == 2500
    assert [k for k, _ in rows] == sorted(k for k, _ in rows)
    assert [k for k, _ in db.scan("t", prefix=b"k0123")] == [f"k0123{i}".encode() for i in range(10)]
    assert [k for k, _ in db.scan("t", b"k00010", b"k00013")] == [b"k00010", b"k00011", b"k00012"]
    assert [k for k, _ in db.scan("t", reverse=True, limit=2)] == [b"k02499", b"k02498"]


def test_batches(db):
    db.create_table("t")
    db.put("t", b"a", b"1")
    r = db.execute(
        Batch().get("t", b"a").put("t", b"b", b"2").delete("t", b"a").scan("t", limit=10)
    )
    assert r.results[0] == b"1"
    assert r.results[1] is None
    assert r.results[2] is True
    assert r.results[3] == [(b"b", b"2")]
    assert r.token is not None and r.durable and r.attempts == 1
    with pytest.raises(InvalidArgumentError):
        db.execute(Batch().scan("t", limit=0))


def test_a_batch_over_two_tables(db):
    # The batch names its first table once; the other table's operations
    # name theirs. Both land, each in its own table.
    db.create_table("t")
    db.create_table("u")
    r = db.execute(Batch().put("t", b"k", b"in t").put("u", b"k", b"in u").get("t", b"k").get("u", b"k"))
    assert r.results[2:] == [b"in t", b"in u"]
    assert db.get("t", b"k") == b"in t" and db.get("u", b"k") == b"in u"
    assert db.execute(Batch().get("u", b"k").get("t", b"k")).results == [b"in u", b"in t"]


def test_limits_are_refused_and_nothing_is_written(db):
    db.create_table("t")
    with pytest.raises(InvalidArgumentError):
        db.put("t", b"k", b"v" * (256 * 1024 + 1))
    with pytest.raises(InvalidArgumentError):
        db.put("t", b"k" * 1025, b"v")
    assert db.scan("t") == []
