"""The client object itself: closing it, transactions dropped unfinished,
and TLS."""

import gc
import shutil
import subprocess
import time

import pytest

from conftest import Server
from milliscale import Client, ConflictError, MilliscaleError, NotFoundError, StatusCode


@pytest.mark.single_server("a transaction held open on the server, and status()")
def test_calls_after_close_fail_clearly(server):
    c = server.client()
    c.create_table("t")
    tx = c.transaction()
    tx.put("t", b"k", b"v")
    tx.flush()  # begun, its write held on the server
    c.close()
    for call in (lambda: c.get("t", b"k"), c.status, c.list_tables, lambda: tx.get("t", b"k"), tx.commit):
        with pytest.raises(MilliscaleError) as e:
            call()
        assert (e.value.code, e.value.kind, e.value.retryable) == (StatusCode.FAILED_PRECONDITION, "closed", False)
        assert "closed" in str(e.value)
    tx.abort()  # does nothing: the transaction ended with the connection
    # The server aborted the transaction left open when the connection
    # closed, long before its idle timeout (30 s).
    with server.client() as other:
        deadline = time.monotonic() + 5
        while other.status().open_transactions != 0:
            assert time.monotonic() < deadline, "the closed connection's transaction is still open"
            time.sleep(0.01)
        with other.transaction() as t2:
            assert t2.get("t", b"k") is None
            t2.put("t", b"k", b"mine")  # no conflict


@pytest.mark.single_server("a transaction held open on the server, and status()")
def test_a_transaction_dropped_unfinished_is_aborted_with_the_next_call(db):
    db.create_table("t")
    tx = db.transaction()
    tx.put("t", b"k", b"lost")
    tx.flush()  # begun, its write held on the server
    assert db.status().open_transactions == 1
    del tx
    gc.collect()
    # The abort goes out with the client's next calls, long before the
    # server's idle timeout (30 s).
    deadline = time.monotonic() + 5
    while db.status().open_transactions != 0:
        assert time.monotonic() < deadline, "the dropped transaction is still open"
        time.sleep(0.01)
    # Its key is free: a new transaction writes it without a conflict.
    with db.transaction() as t2:
        t2.put("t", b"k", b"kept")
    assert db.get("t", b"k") == b"kept"


@pytest.mark.single_server("a write takes its key when written; a cluster's transactions conflict at commit (optimistic)")
def test_an_open_transaction_holds_its_keys(db):
    """The other side of the test above: while a transaction is open,
    another one's write of the same key conflicts (once the first write
    has run: a write is held back until the transaction's next call)."""
    db.create_table("t")
    with db.transaction() as first:
        first.put("t", b"k", b"1")
        first.flush()
        with pytest.raises(ConflictError):
            with db.transaction() as second:
                second.put("t", b"k", b"2")


@pytest.fixture
def tls_server(store, tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
         "-addext", "basicConstraints=critical,CA:FALSE",  # rustls refuses a CA's as the server's
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    s = Server(store, "--tls-cert", str(cert), "--tls-key", str(key))
    yield s, cert.read_bytes()
    code, err = s.stop()
    assert code == 0, err


def test_tls_checks_the_name_on_the_certificate(tls_server):
    server, ca = tls_server
    port = server.address.rsplit(":", 1)[1]
    # The name is the address's host by default ...
    with Client(f"localhost:{port}", tls_ca=ca) as c:
        c.create_table("t")
        c.put("t", b"k", b"v")
    # ... or the one given, for an address that is not that name.
    with Client(server.address, tls_ca=ca, tls_domain="localhost") as c:
        assert c.get("t", b"k") == b"v"
    # The certificate is not for 127.0.0.1; and plaintext is refused.
    for make in (lambda: Client(server.address, tls_ca=ca, connect_timeout=1),
                 lambda: Client(server.address, connect_timeout=1)):
        with pytest.raises(MilliscaleError):
            make().list_tables()


def test_a_value_over_its_limit_is_refused_naming_the_limit(db):
    """40 MiB against the 256 KiB value limit: refused before anything is
    sent (it used to go out whole and meet the 16 MiB message limit),
    INVALID_ARGUMENT naming the limit, not retryable; the connection goes
    on. The same on a server and on a cluster."""
    db.create_table("t")
    for call in (lambda: db.put("t", b"k", b"x" * (40 << 20)), lambda: db.transaction().put("t", b"k", b"x" * (40 << 20))):
        with pytest.raises(MilliscaleError) as e:
            call()
        assert (e.value.code, e.value.kind, e.value.retryable) == (StatusCode.INVALID_ARGUMENT, "invalid_input", False)
        assert "262144" in e.value.message, e.value.message
    db.put("t", b"k", b"small")
    assert db.get("t", b"k") == b"small"


@pytest.mark.single_server("a cluster transaction's writes wait for its commit")
def test_writes_travel_with_the_next_call_and_get_many_reads_in_one(db):
    """A put answers at once; its failure is raised by the transaction's
    next call; get_many reads several keys, the held writes included."""
    db.create_table("t")
    db.put("t", b"a", b"1")
    with db.transaction() as tx:
        tx.put("t", b"b", b"2")
        tx.patch("t", b"a", 0, b"9")
        assert tx.get_many("t", [b"a", b"b", b"c"]) == [b"9", b"2", None]
        tx.put("missing", b"x", b"1")
        with pytest.raises(NotFoundError):
            tx.get("t", b"a")
        tx.put("t", b"c", b"3")
    assert [db.get("t", k) for k in (b"a", b"b", b"c")] == [b"9", b"2", b"3"]
    tx = db.transaction()
    tx.put("missing", b"x", b"1")
    with pytest.raises(NotFoundError):
        tx.commit()
    # Keys of several tables in one call.
    db.create_table("u")
    db.put("u", b"a", b"in u")
    with db.transaction() as tx:
        tx.put("u", b"new", b"held")
        got = tx.get_many_across([("t", b"a"), ("u", b"a"), ("u", b"new"), ("t", b"none")])
        assert got == [b"9", b"in u", b"held", None]
        with pytest.raises(NotFoundError):
            tx.get_many_across([("t", b"a"), ("missing", b"a")])
