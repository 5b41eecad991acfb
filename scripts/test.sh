#!/usr/bin/env bash
# The test command (README.md): format check, lints, then all tests.
# Tests build once, in release mode (the workspace's own crates at opt-level
# 1, see `opt` below), because the concurrency tests need speed.
# It starts MinIO on loopback (built once and cached, see scripts/minio.sh)
# for the s3 backend's third-party conformance test and the emulator's
# conformance cases (which run against both), installs boto3 if it is
# missing, and the AWS CLI and s3cmd into a cached virtualenv
# (scripts/clients.sh) for the emulator's client tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step says when it starts (seconds since the start), so a slow CI
# run shows where its time went.
step() { echo "== $* (at ${SECONDS} s)" >&2; }
step format
cargo fmt --all -- --check
# One feature set for every step (lints, docs, tests, examples), so that
# nothing compiles twice: every feature of the workspace, the SlateDB peer
# included. `--timings` leaves each build's crate-by-crate times in
# target/cargo-timings/.
features="--workspace --all-features --release"
target=${CARGO_TARGET_DIR:-$PWD/target}
# The workspace's own crates build at opt-level 1 here, their dependencies
# as the release profile has them (opt-level 3, and cached from run to
# run): CI builds the workspace's crates afresh each time, and at opt-level
# 1 that took 350 s instead of 509 s on two cores, while the test binaries
# ran as fast (134 s against 137 s). The overrides name each crate: a
# profile-wide opt-level with `package."*"` put back at 3 would also move
# the build scripts and proc macros (`package."*"` outranks
# `build-override`), and so rebuild every dependency. Benchmarks and
# users' builds use the release profile as Cargo.toml has it.
opt=()
for p in $(cargo metadata --no-deps --format-version 1 |
  python3 -c 'import json, sys; print(" ".join(p["name"] for p in json.load(sys.stdin)["packages"]))'); do
  opt+=(--config "profile.release.package.$p.opt-level=1")
done
# The Python package's native module (built by maturin from `pip install
# ./python`, below and in the README's example) the same way.
export MATURIN_PEP517_ARGS="${opt[*]}"
step clippy
cargo clippy $features "${opt[@]}" --all-targets --timings -- -D warnings
# The library crates' documentation builds without a warning (broken
# links); in release mode, to reuse the build scripts and macros clippy
# built.
step doc
RUSTDOCFLAGS="-D warnings" cargo doc --release "${opt[@]}" --no-deps -p milliscale -p milliscale-objstore -p milliscale-client

step S3 clients and MinIO
python3 -c 'import boto3' 2>/dev/null ||
  python3 -m pip install --quiet --disable-pip-version-check -r crates/emulator/tests/python/requirements.txt

eval "$(bash scripts/clients.sh)"
eval "$(bash scripts/minio.sh start)"
trap 'bash scripts/minio.sh stop' EXIT
# In this script a missing S3 server or client fails the tests that need it
# instead of skipping them.
export MILLISCALE_REQUIRE_S3=1 MILLISCALE_REQUIRE_BOTO3=1 MILLISCALE_REQUIRE_CLIENTS=1

step build the tests
cargo test $features "${opt[@]}" --no-run --timings
# The build's list of test binaries and examples (nothing is built again).
built=$target/test-build.json
cargo test $features "${opt[@]}" --no-run --message-format=json 2>/dev/null > "$built"
# The test binaries run three at a time (scripts/run-tests.py: most of
# them wait on processes, sockets and the simulated store's latency), each
# under a time limit, so that a hang (e.g. a livelock bug) fails the run
# instead of stalling CI. Then the documentation's examples.
step cargo test
python3 scripts/run-tests.py 3 900 < "$built"
step doc tests
timeout 600 cargo test $features "${opt[@]}" --doc

# Every example runs to its end. They run as the binaries `cargo test`
# built: `cargo run -p milliscale --example` would resolve features for
# that one crate and rebuild much of the dependency graph (minutes, on a
# fresh clone).
examples=$(python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and "example" in m["target"]["kind"] and m.get("executable"):
        print(m["executable"])
' < "$built")
[ "$(echo "$examples" | grep -c .)" -eq "$(ls crates/*/examples/*.rs | wc -l)" ] ||
  { echo "cargo test did not build every example: $examples" >&2; exit 1; }
step examples
for example in $examples; do
  echo "example $(basename "$example")"
  timeout 300 "$example" > /dev/null
done

# The Python package, installed from the repository (`pip install ./python`)
# into a virtualenv, then its tests against `milliscale serve` on the
# emulator (the release binary `cargo test` built), and the README's server
# example run as it is written.
step python
venv=$target/py-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check pytest
# Once, and this checkout's code even if the same version was installed
# before (the README's example installs it again, as a user would).
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps ./python
rm -rf python/build python/*.egg-info
MILLISCALE_BIN="$target/release/milliscale" timeout 900 "$venv/bin/python" -m pytest -q python/tests
step README server example
bash scripts/readme-server-example.sh "$venv/bin"
step README shard example
bash scripts/readme-shard-example.sh "$venv/bin"
step README time example
bash scripts/readme-time-example.sh "$venv/bin"
step README cluster time example
bash scripts/readme-cluster-time-example.sh "$venv/bin"
step done
