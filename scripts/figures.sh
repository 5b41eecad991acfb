#!/usr/bin/env bash
# Regenerate docs/figures: run every sweep config in configs/sweeps (or the
# ones named), copy the PNGs and CSVs into docs/figures, and rewrite
# docs/figures/SUMMARY.md (tables of every run, with machine and commit)
# from the CSVs, and the generated part of BENCHMARKS.md (the means over
# repetitions per grid point). The discussion around it is written by hand.
# Usage: scripts/figures.sh [CONFIG_NAME...]   (about 30 minutes for all)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p milliscale-cli
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for f in configs/sweeps/*.toml; do names+=("$(basename "$f" .toml)"); done
fi
mkdir -p docs/figures/csv
for n in "${names[@]}"; do
    out=$(mktemp -d)
    target/release/milliscale bench sweep --config "configs/sweeps/$n.toml" --out "$out"
    cp "$out"/*.png docs/figures/
    cp "$out"/*.csv docs/figures/csv/
done
python3 scripts/summarize-figures.py docs/figures/csv > docs/figures/SUMMARY.md
python3 scripts/summarize-figures.py docs/figures/csv --splice BENCHMARKS.md
echo "wrote docs/figures/SUMMARY.md and the generated tables in BENCHMARKS.md"
