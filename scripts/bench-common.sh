# Sourced by the benchmark scripts, run from the repository root: builds the
# CLI once, sets `bin` (the binary) and `out` (a fresh directory for the raw
# JSON reports), prints the machine and commit that every table in
# BENCHMARKS.md names, and defines `with_emulator`. MILLISCALE_BIN names
# another binary to run instead (another commit's, for an A/B); nothing is
# built then.
if [ -n "${MILLISCALE_BIN:-}" ]; then
    bin=$MILLISCALE_BIN
    commit="the binary $bin"
else
    bin="${CARGO_TARGET_DIR:-target}/release/milliscale"
    cargo build --release -q -p milliscale-cli
    commit="commit $(git rev-parse --short=12 HEAD)"
fi
out=$(mktemp -d)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $commit"

# with_emulator SEED CMD...: start a fresh emulator (s3x preset, latency
# seed SEED, bucket `bench`) on a free loopback port, run CMD with `ep` set
# to its endpoint, then stop it.
with_emulator() {
    local seed=$1
    shift
    export AWS_ACCESS_KEY_ID=milliscale AWS_SECRET_ACCESS_KEY=milliscale-secret
    $bin emulator --preset s3x --port 0 --seed "$seed" --bucket bench > "$out/emulator.out" 2>/dev/null &
    local pid=$!
    for _ in $(seq 1 80); do grep -q '^http' "$out/emulator.out" && break; sleep 0.25; done
    ep=$(head -1 "$out/emulator.out")
    "$@"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}
