"""Read-your-writes on a `--replica` server with the writer's tokens."""

import pytest

from conftest import Server
from milliscale import PermissionDeniedError, StaleError


def test_a_replica_reads_your_writes(store):
    writer = Server(store)
    try:
        with writer.client() as w:
            w.create_table("t")
            w.put("t", b"k", b"0")
        replica = Server(store, "--replica")
        try:
            with writer.client() as w, replica.client() as r:
                assert r.status().role == "replica"
                for i in range(1, 30):
                    token = w.put("t", b"k", str(i))
                    with r.transaction(read_only=True, at_token=token, wait=10) as tx:
                        assert tx.get("t", b"k") == str(i).encode(), f"write {i}"
                    # One-shot reads take the token too.
                    assert r.get("t", b"k", at_token=token) == str(i).encode()
                with pytest.raises(PermissionDeniedError):
                    r.put("t", b"k", b"x")
                with pytest.raises(StaleError):
                    # Begun, and refused, by its first call.
                    r.transaction(read_only=True, at_token=1 << 40, wait=0.2).get("t", b"k")
        finally:
            code, err = replica.stop()
            assert code == 0, err
    finally:
        code, err = writer.stop()
        assert code == 0, err
