#!/usr/bin/env bash
# The test command (README.md): format check, lints, then all tests.
# Tests build once, in release mode, because the concurrency tests need speed.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --all-targets --release -- -D warnings
# A hang (e.g. a livelock bug) must fail the run, not stall CI.
timeout 1500 cargo test --workspace --release
