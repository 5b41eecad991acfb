#!/usr/bin/env bash
# The log's acceptance benchmarks : the paper's variants on YCSB,
# measured in one run, interleaved, repeated; then a table of medians.
#
#   bash scripts/bench-log.sh [reps] [records] [duration]
#
# Defaults: 3 repetitions, 10M records, 10 s measured (+2 s warmup) per
# configuration; about 20 minutes on a 2-core machine. Results (one JSON
# report per run) go to target/bench-log/<timestamp>/, and the summary to
# its summary.md.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
records=${2:-10000000}
duration=${3:-10}
cargo build --release -q -p milliscale-cli
bin=target/release/milliscale
out=target/bench-log/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
common=(--threads 8 --records "$records" --duration-s "$duration" --json)
# name | args
configs=(
  "a-uniform-none|--workload a --dist uniform --store none"
  "a-uniform-milliscale|--workload a --dist uniform --variant milliscale"
  "a-uniform-s3x|--workload a --dist uniform --variant s3x"
  "a-uniform-s3x+record|--workload a --dist uniform --variant s3x --tracking record"
  "a-uniform-s3x+groups|--workload a --dist uniform --variant s3x --log-group-size 2 --log-buffer 1M"
  "a-zipfian-none|--workload a --dist zipfian --store none"
  "a-zipfian-milliscale|--workload a --dist zipfian --variant milliscale"
  "a-zipfian-s3x|--workload a --dist zipfian --variant s3x"
  "a-zipfian-s3x+record|--workload a --dist zipfian --variant s3x --tracking record"
  "a-zipfian-s3x+groups|--workload a --dist zipfian --variant s3x --log-group-size 2 --log-buffer 1M"
  "b-uniform-milliscale|--workload b --dist uniform --variant milliscale"
  "b-uniform-s3x|--workload b --dist uniform --variant s3x"
  "b-zipfian-milliscale|--workload b --dist zipfian --variant milliscale"
  "b-zipfian-s3x|--workload b --dist zipfian --variant s3x"
)
total=$(( reps * ${#configs[@]} ))
n=0
for rep in $(seq 1 "$reps"); do
  for c in "${configs[@]}"; do
    name=${c%%|*}
    args=${c#*|}
    n=$((n + 1))
    echo "[$n/$total] rep $rep $name" >&2
    # shellcheck disable=SC2086
    "$bin" bench ycsb "${common[@]}" $args --seed "$rep" > "$out/$name.rep$rep.json"
  done
done
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" > "$out/summary.md"
echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet || echo -dirty)" >> "$out/summary.md"
echo "command: bash scripts/bench-log.sh $reps $records $duration" >> "$out/summary.md"
python3 scripts/summarize-log-bench.py "$out" >> "$out/summary.md"
cat "$out/summary.md"
