"""The server's change feed through the Python package: each committed
transaction whole, in CSN order, each write as the row's whole new value (a
patch too; a deletion as None), resumed exactly after a cursor, filtered by
table, with resolved points."""

import pytest

from milliscale import Change, Resolved


@pytest.mark.single_server("one server's change feed (a cluster's is not built yet)")
def test_the_feed_delivers_each_transaction_whole_and_resumes_after_a_cursor(db):
    db.create_table("t")
    db.create_table("u")
    tokens = []
    for i in range(10):
        with db.transaction() as tx:
            tx.put("t", f"k{i}", "value-0000")
            tx.put("u", "n", str(i))
        tokens.append(tx.commit_info.token)
    with db.transaction() as tx:
        tx.patch("t", "k0", 6, "1234")
        tx.delete("t", "k1")
    tokens.append(tx.commit_info.token)

    got = list(db.changes(until=tokens[-1]))
    assert [t.csn for t in got] == tokens
    assert got[0].changes == [Change("t", b"k0", b"value-0000"), Change("u", b"n", b"0")]
    assert got[-1].changes == [Change("t", b"k0", b"value-1234"), Change("t", b"k1", None)]

    # After a cursor, one table: exactly the transactions after it that wrote it.
    later = list(db.changes("u", after=tokens[4], until=tokens[-1]))
    assert [t.csn for t in later] == tokens[5:10]
    assert all(c.table == "u" for t in later for c in t.changes)

    # Resolved points, in order, with the transactions below them.
    events = list(db.changes(after=tokens[8], resolved=True, until=tokens[-1]))
    points = [e.csn for e in events if isinstance(e, Resolved)]
    assert points == sorted(points) and points[-1] > tokens[-1]
    assert [e.csn for e in events if not isinstance(e, Resolved)] == tokens[9:]
