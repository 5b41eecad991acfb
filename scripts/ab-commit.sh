#!/usr/bin/env bash
# Is the working tree's engine as fast as a named commit's? Builds both
# `milliscale` binaries (release profile, `-p milliscale-cli`, as a user
# builds it), then runs scripts/ab-bins.py on them: PAIRS alternating
# rounds (default 5) of YCSB-A, YCSB-B and YCSB-C in memory and the main
# job on sim://s3x, and prints each round's ratio (working tree over REF),
# the medians and their spread. Not a test: these machines are too noisy
# for a timed check; run it by hand for any change to the engine's paths
# (crates/milliscale/README.md, "Changing the engine").
#
# Usage: scripts/ab-commit.sh REF [PAIRS] [JOBS]
#   REF    a commit, tag or branch (e.g. HEAD, main~3, 842db50)
#   JOBS   comma-separated, of a, b, c, u, main (default a,b,c,main)
# REF is built in a temporary worktree into $AB_TARGET_DIR (default
# target/ab, kept between runs so that only the workspace's own crates
# build again); the working tree into the usual target directory.
set -euo pipefail
cd "$(dirname "$0")/.."
ref=${1:?usage: scripts/ab-commit.sh REF [PAIRS] [JOBS]}
pairs=${2:-5}
jobs=${3:-a,b,c,main}
rev=$(git rev-parse --verify --quiet "$ref^{commit}") || { echo "no commit named $ref" >&2; exit 2; }
short=$(git rev-parse --short=12 "$rev")
out=$(mktemp -d)
ab_target=${AB_TARGET_DIR:-$PWD/target/ab}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "working tree at $(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD || echo ' + changes') against $short ($ref)"

echo "building the working tree's binary" >&2
cargo build --release -q -p milliscale-cli
cp "${CARGO_TARGET_DIR:-target}/release/milliscale" "$out/milliscale-new"

echo "building $short's binary in a worktree (into $ab_target)" >&2
tree="$out/tree"
git worktree add --detach -q "$tree" "$rev"
trap 'git worktree remove --force "$tree" 2>/dev/null || true' EXIT
(cd "$tree" && CARGO_TARGET_DIR="$ab_target" cargo build --release -q -p milliscale-cli)
cp "$ab_target/release/milliscale" "$out/milliscale-$short"

python3 scripts/ab-bins.py --pairs "$pairs" --jobs "$jobs" "$out/milliscale-$short" "$out/milliscale-new"
