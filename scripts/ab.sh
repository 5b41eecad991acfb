#!/usr/bin/env bash
# A/B two milliscale binaries on one YCSB configuration in alternating
# rounds; prints each round's txn/s and the median ratio B/A.
# Usage: scripts/ab.sh BIN_A BIN_B ROUNDS -- <bench ycsb args>
set -euo pipefail
A=$1 B=$2 N=$3; shift 4
ratios=()
for i in $(seq 1 "$N"); do
  a=$("$A" bench ycsb --csv "$@" | tail -1 | cut -d, -f10)
  b=$("$B" bench ycsb --csv "$@" | tail -1 | cut -d, -f10)
  r=$(python3 -c "print(f'{$b/$a:.3f}')")
  echo "round $i: A $a txn/s, B $b txn/s, B/A $r"
  ratios+=("$r")
done
python3 -c "import statistics,sys; print('median B/A', statistics.median(map(float, sys.argv[1:])))" "${ratios[@]}"
