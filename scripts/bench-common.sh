# Sourced by scripts/bench-{peer,tpcc,hedge-s3}.sh, run from the repository
# root: builds the CLI once, sets `bin` (the binary) and `out` (a fresh
# directory for the raw JSON reports), and prints the machine and commit
# that every table in BENCHMARKS.md names.
bin=target/release/milliscale
cargo build --release -q -p milliscale-cli
out=$(mktemp -d)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); commit $(git rev-parse --short=12 HEAD)"
