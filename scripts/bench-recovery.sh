#!/usr/bin/env bash
# Recovery speed: write a log of at least 1 GB with
# `bench ycsb` to a directory, then recover copies of it from `file://` and
# from `sim://s3x` over the same directory, at several replay thread counts.
# Usage: scripts/bench-recovery.sh [DIR] [THREADS...]
set -euo pipefail
dir=${1:-/tmp/milliscale-recovery-bench}
shift || true
threads=${*:-1 2 4}
bin=target/release/milliscale
cargo build --release -q -p milliscale-cli
if [ ! -d "$dir/orig" ]; then
    # About 37 MB of log per second on 2 cores: 32 s gives more than 1 GB.
    $bin bench ycsb --store "file://$dir/orig" --records 1000000 --workload u \
        --threads 4 --duration-s 32 --warmup-s 0 > /dev/null
fi
echo "log: $(du -sb "$dir/orig" | cut -f1) bytes"
for t in $threads; do
    for store in file sim; do
        rm -rf "$dir/copy" && cp -r "$dir/orig" "$dir/copy"
        # Let the copy's writeback finish first: it competes for the CPU and
        # memory otherwise, and the measurement swings by 2x.
        sync && sleep 2
        case $store in
            file) url="file://$dir/copy" ;;
            sim) url="sim://s3x?inner=file://$dir/copy" ;;
        esac
        $bin recover --store "$url" --threads "$t" --json |
            python3 -c "import json,sys; r=json.load(sys.stdin); s=r['seconds']; print(f\"$store threads=$t log_bytes={r['log_bytes']} replayed={r['replayed']} scan={s['scan']:.2f}s replay={s['replay']:.2f}s total={s['total']:.2f}s MB/s={r['log_mb_per_s']:.1f}\")"
    done
done
rm -rf "$dir/copy"
