"""Fixtures: the `milliscale` binary, an emulator with the S3 Express
preset, and servers on its buckets, each started by the test that needs it
and stopped (SIGTERM, as an operator would) when it is done."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

try:
    import milliscale  # noqa: F401  (the installed package)
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from milliscale import Client  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

#: The emulator's credentials, given to it and to every server.
ENV = {
    **os.environ,
    "AWS_ACCESS_KEY_ID": "milliscale",
    "AWS_SECRET_ACCESS_KEY": "milliscale-secret",
    "RUST_BACKTRACE": "0",
}


def binary() -> str:
    """The `milliscale` binary: $MILLISCALE_BIN, or the release build."""
    b = os.environ.get("MILLISCALE_BIN") or str(ROOT / "target" / "release" / "milliscale")
    if not Path(b).exists():
        pytest.fail(f"no milliscale binary at {b}: build it (cargo build --release -p milliscale-cli) or set MILLISCALE_BIN")
    return b




class Process:
    """A child process whose first stdout line says where it listens."""

    def __init__(self, args: list[str], what: str, env=None):
        self.args = args
        # Stderr goes to a file: a pipe nobody reads would stall the child
        # once full.
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=env or ENV
        )
        self.line = self.proc.stdout.readline().strip()
        if not self.line:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"{what} did not start: {self.err()}")

    def err(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()

    def stop(self, sig=signal.SIGTERM, timeout=30) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode, self.err()


#: Buckets the emulator creates at start (the engine does not create
#: buckets); each test takes fresh ones.
BUCKETS = 64


class Emulator(Process):
    def __init__(self):
        buckets = [a for i in range(BUCKETS) for a in ("--bucket", f"py-{i}")]
        super().__init__(
            [binary(), "emulator", "--port", "0", "--preset", "s3x", "--seed", "1", *buckets],
            "the emulator",
        )
        self.endpoint = self.line
        self.next_bucket = 0

    def fresh_store(self) -> str:
        assert self.next_bucket < BUCKETS, "raise BUCKETS in conftest.py"
        self.next_bucket += 1
        return self.store(f"py-{self.next_bucket - 1}")

    def store(self, bucket: str) -> str:
        return f"s3://{bucket}?endpoint={self.endpoint}"


class Server(Process):
    def __init__(self, store: str, *extra: str, env=None):
        super().__init__(
            [binary(), "serve", "--store", store, "--listen", "127.0.0.1:0", *extra],
            "milliscale serve",
            env=env,
        )
        assert self.line.startswith("listening on "), self.line
        self.address = self.line.removeprefix("listening on ")

    def client(self, token=None) -> Client:
        return Client(self.address, token)


@pytest.fixture(scope="session")
def emulator():
    e = Emulator()
    yield e
    e.stop()


@pytest.fixture
def store(emulator):
    return emulator.fresh_store()


@pytest.fixture
def server(store):
    s = Server(store)
    yield s
    code, err = s.stop()
    assert code == 0, f"the server exited {code}: {err}"


@pytest.fixture
def db(server):
    with server.client() as c:
        yield c
