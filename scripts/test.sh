#!/usr/bin/env bash
# The test command (README.md): format check, lints, then all tests.
# Tests build once, in release mode, because the concurrency tests need speed.
# It starts MinIO on loopback (built once and cached, see scripts/minio.sh)
# for the s3 backend's third-party conformance test, and installs boto3
# for the emulator's third-party client test if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --all-targets --release -- -D warnings

python3 -c 'import boto3' 2>/dev/null ||
  python3 -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt

eval "$(bash scripts/minio.sh start)"
trap 'bash scripts/minio.sh stop' EXIT
# In this script a missing S3 server fails the MinIO tests instead of skipping them.
export MILLISCALE_REQUIRE_S3=1 MILLISCALE_REQUIRE_BOTO3=1

# A hang (e.g. a livelock bug) must fail the run, not stall CI.
timeout 1500 cargo test --workspace --release
