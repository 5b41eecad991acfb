"""Bearer tokens: no token, a wrong token, and a read-only token's writes
are all refused, and nothing is written."""

import pytest

from conftest import Server
from milliscale import Batch, PermissionDeniedError, UnauthenticatedError

RW = "rw-0123456789abcdef"
RO = "ro-0123456789abcdef"


@pytest.fixture
def guarded(store, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# who may call\nread-write:{RW}\nread-only:{RO}\n")
    s = Server(store, "--tokens", str(tokens))
    yield s
    code, err = s.stop()
    assert code == 0, err


def test_callers_without_a_valid_token_are_refused(guarded):
    with guarded.client(RW) as rw:
        rw.create_table("t")
        rw.put("t", b"k", b"v")
    for token in (None, "wrong-0123456789abcdef"):
        with guarded.client(token) as c:
            for call in (
                lambda: c.put("t", b"k", b"stolen"),
                lambda: c.get("t", b"k"),
                lambda: c.list_tables(),
                lambda: c.create_table("u"),
                lambda: c.transaction().get("t", b"k"),  # begun by its first call
            ):
                with pytest.raises(UnauthenticatedError):
                    call()
    with guarded.client(RW) as rw:
        assert rw.get("t", b"k") == b"v"
        assert rw.list_tables() == ["t"]


def test_a_read_only_token_reads_and_writes_nothing(guarded):
    with guarded.client(RW) as rw:
        rw.create_table("t")
        rw.put("t", b"k", b"v")
    with guarded.client(RO) as ro:
        assert ro.get("t", b"k") == b"v"
        assert ro.scan("t") == [(b"k", b"v")]
        for call in (
            lambda: ro.put("t", b"k", b"ro"),
            lambda: ro.delete("t", b"k"),
            lambda: ro.execute(Batch().get("t", b"k").put("t", b"k2", b"x")),
            lambda: ro.create_table("u"),
            lambda: ro.drop_table("t"),
            lambda: ro.transaction().get("t", b"k"),  # a read-write one, begun by its first call
        ):
            with pytest.raises(PermissionDeniedError):
                call()
        with ro.transaction(read_only=True) as tx:
            with pytest.raises(PermissionDeniedError):
                tx.put("t", b"k", b"ro")
    with guarded.client(RW) as rw:
        assert rw.scan("t") == [(b"k", b"v")]
        assert rw.list_tables() == ["t"]


def test_a_bad_tokens_file_is_refused_at_start(store, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("admin:0123456789abcdef\n")
    from conftest import ENV, binary
    import subprocess

    r = subprocess.run(
        [binary(), "serve", "--store", store, "--listen", "127.0.0.1:0", "--tokens", str(tokens)],
        capture_output=True, text=True, env=ENV, timeout=60,
    )
    assert r.returncode == 2, r
    assert "unknown role" in r.stderr


def test_a_public_address_without_tls_is_refused(store):
    from conftest import ENV, binary
    import subprocess

    r = subprocess.run(
        [binary(), "serve", "--store", store, "--listen", "0.0.0.0:0"],
        capture_output=True, text=True, env=ENV, timeout=60,
    )
    assert r.returncode == 2, r
    assert "--insecure" in r.stderr
