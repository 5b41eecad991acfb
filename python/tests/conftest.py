"""Fixtures: the `milliscale` binary, an emulator with the S3 Express
preset, and servers on its buckets, each started by the test that needs it
and stopped (SIGTERM, as an operator would) when it is done.

The suite runs against two databases: every test that takes the `server`
fixture (or `db`, a client of it) runs once against one `milliscale
serve` and once against a cluster of three `serve --cluster` shards whose
tables span the shards (`ClusterNodes`), through `milliscale.Cluster`.
A test about a single server's specifics is marked
``@pytest.mark.single_server("why")`` and skipped on the cluster, its
reason in the report; python/README.md lists them.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

try:
    import milliscale  # noqa: F401  (the installed package)
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from milliscale import Client, Cluster  # noqa: E402

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
#: buckets); each test takes fresh ones, and each of the two kill tests
#: one a trial.
BUCKETS = 100 + 2 * int(os.environ.get("MILLISCALE_KILL_TRIALS", "10"))


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


#: Ports handed out by `free_port`, in turn from a start that depends on
#: the process, so two callers in one run never get the same one.
_PORTS = itertools.count((os.getpid() % 100) * 120)


def free_port() -> int:
    """A loopback port that is free now and below the kernel's ephemeral
    range (32768 and up on Linux). A port from ``bind(0)`` is in that range,
    so between this check and the node's own bind an outgoing connection
    (any client's, the emulator's) could take it; a port below the range
    can only be taken by an explicit bind."""
    for _ in range(12_000):
        port = 20_000 + next(_PORTS) % 12_000
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port in 20000-31999")


class Shards:
    """Three `milliscale serve --cluster` shards: the map on the emulator,
    published by `milliscale cluster init` with `init_args` (how the key
    space splits), and each shard's database in a bucket of its own."""

    def __init__(self, emulator, init_args: list[str], *extra: str):
        self.map_store = emulator.fresh_store()
        self.stores = [emulator.fresh_store() for _ in range(3)]
        self.addrs = [f"127.0.0.1:{free_port()}" for _ in range(3)]
        init = [binary(), "cluster", "init", "--map", self.map_store, *init_args]
        for a, s in zip(self.addrs, self.stores):
            init += ["--shard", f"{a}={s}"]
        subprocess.run(init, check=True, env=ENV, capture_output=True)
        self.procs = [
            Process(
                [binary(), "serve", "--cluster", self.map_store, "--shard", str(i), "--store", self.stores[i],
                 "--termination-timeout-ms", "300", *extra],
                f"shard {i}",
            )
            for i in range(3)
        ]

    def stop(self) -> None:
        for p in self.procs:
            code, err = p.stop()
            assert code == 0, f"a shard exited {code}: {err}"


#: Where the suite's cluster splits its key space: the tables the tests
#: use (`t`, `u`, `bank`, `transfers`) each span two or three shards (the
#: ranges go to the shards in turn, in key order). Under this map the
#: write-skew test's `x` and `y` are on different shards, and so are the
#: two-table batch's keys, the bank's accounts and the scan test's rows.
SUITE_SPLITS = [
    "bank=acct00022", "bank=acct00043",
    "t=k01250", "t=m", "t=x", "t=y",
    "transfers=t/4", "u=m",
]


class ClusterNodes(Shards):
    """The cluster the suite runs against, in place of one server: started
    once per session; after each test its tables are dropped."""

    def __init__(self, emulator):
        split = [a for s in SUITE_SPLITS for a in ("--split", s)]
        super().__init__(emulator, split)
        #: A client opens the cluster through any node; this one.
        self.address = self.addrs[0]

    def client(self, token=None) -> Cluster:
        return Cluster(self.address, token)

    def clear(self) -> None:
        with self.client() as c:
            for t in c.list_tables():
                c.drop_table(t)


@pytest.fixture(scope="session")
def emulator():
    e = Emulator()
    yield e
    e.stop()


@pytest.fixture
def store(emulator):
    return emulator.fresh_store()


@pytest.fixture(scope="session")
def cluster_nodes(emulator):
    c = ClusterNodes(emulator)
    yield c
    c.stop()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "single_server(why): about one server's specifics; skipped on a cluster"
    )


@pytest.fixture(params=["server", "cluster"])
def server(request):
    """One `milliscale serve`, or the cluster (see the module's comment)."""
    if request.param == "cluster":
        mark = request.node.get_closest_marker("single_server")
        if mark:
            pytest.skip(f"a single server's specifics: {mark.args[0]}")
        nodes = request.getfixturevalue("cluster_nodes")
        yield nodes
        nodes.clear()
        return
    s = Server(request.getfixturevalue("store"))
    yield s
    code, err = s.stop()
    assert code == 0, f"the server exited {code}: {err}"


@pytest.fixture
def db(server):
    with server.client() as c:
        yield c
