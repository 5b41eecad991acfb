#!/usr/bin/env bash
# Interactive transactions from Python (scripts/bench-python-txn.py:
# THREADS threads, 5 keys each read and patched, commit waiting for
# durability) through the package of this working tree (a get per key,
# and `head-get-many`: the keys read in one `get_many`) and, for an A/B,
# through another commit's package: a fresh `milliscale serve` on
# sim://s3x?seed=S for each run, seeds 1..SEEDS, the packages alternating
# with the order rotating by seed.
#
# Usage: scripts/bench-python-txn.sh [SEEDS] [SECONDS] [THREADS] [RECORDS]
#   OLD_REF=<commit>  also measure that commit's package (built into its own
#                     virtualenv, target/py-venv-<commit>, once)
#   OLD_GET_MANY=1    and its `get_many` body too (a package that has it)
set -euo pipefail
seeds=${1:-3}
secs=${2:-8}
threads=${3:-64}
records=${4:-10000}
source "$(dirname "$0")/bench-common.sh"  # bin, out; builds; prints the machine
target=${CARGO_TARGET_DIR:-target}
venv=$target/py-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "./python"
rm -rf python/build
variants=(head head-get-many)
if [ -n "${OLD_REF:-}" ]; then
    old=$(git rev-parse --short=12 "$OLD_REF")
    oldvenv=$target/py-venv-$old
    if [ ! -x "$oldvenv/bin/python" ]; then
        tree=$(mktemp -d)
        git worktree add --detach "$tree" "$old" >/dev/null
        python3 -m venv "$oldvenv"
        # Its own target directory: the two trees' crates would otherwise
        # rebuild each other.
        CARGO_TARGET_DIR=$target/old-package "$oldvenv/bin/pip" install --quiet \
            --disable-pip-version-check --no-deps "$tree/python"
        git worktree remove --force "$tree"
    fi
    variants+=("$old")
    [ -n "${OLD_GET_MANY:-}" ] && variants+=("$old-get-many")
fi
echo "seeds=1..$seeds seconds=$secs threads=$threads records=$records; raw output in $out"
echo "| seed | package | threads | txn/s | p50 ms | p99 ms | server CPU µs/txn | client CPU µs/txn | conflicts |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
for seed in $(seq 1 "$seeds"); do
    for i in "${!variants[@]}"; do
        v=${variants[$(( (i + seed - 1) % ${#variants[@]} ))]}
        py=$venv/bin/python
        many=
        case $v in
            head) ;;
            head-get-many) many=get_many ;;
            *-get-many) py=$oldvenv/bin/python many=get_many ;;
            *) py=$oldvenv/bin/python ;;
        esac
        "$bin" serve --store "sim://s3x?seed=$seed" --listen 127.0.0.1:0 > "$out/serve.out" 2> "$out/serve-$v-$seed.err" &
        pid=$!
        for _ in $(seq 1 80); do grep -q '^listening' "$out/serve.out" && break; sleep 0.25; done
        addr=$(sed -n 's/^listening on //p' "$out/serve.out")
        # Run from /tmp so that the virtualenv's package is imported, not
        # the working tree's python/ directory.
        (cd /tmp && "$py" "$OLDPWD/scripts/bench-python-txn.py" "$addr" "$v" "$secs" "$threads" "$records" $many) \
            | sed "s/^/| $seed /" | tee -a "$out/table.md"
        kill "$pid"
        wait "$pid" 2>/dev/null || true
    done
done
