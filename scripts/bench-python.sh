#!/usr/bin/env bash
# A call from Python through the package (its native module over the
# Rust client) against the Rust client itself: one process, one thread,
# calls in a loop against a fresh `milliscale serve` on sim://s3x?seed=S,
# for seeds 1..SEEDS, the clients' order rotating with the seed. Installs
# the package into its virtualenv (target/py-venv, as scripts/test.sh
# makes it). The PyO3 probe these were compared with until the package
# moved onto it is at commit 2072127 (scripts/pyo3-probe).
# Usage: scripts/bench-python.sh [SEEDS] [SECONDS]
set -euo pipefail
seeds=${1:-3}
secs=${2:-5}
source "$(dirname "$0")/bench-common.sh"  # bin, out; builds; prints the machine
venv=target/py-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "./python"
rm -rf python/build
echo "seeds=1..$seeds seconds=$secs; raw output in $out"
clients=(package rust)
for seed in $(seq 1 "$seeds"); do
    "$bin" serve --store "sim://s3x?seed=$seed" --listen 127.0.0.1:0 > "$out/serve.out" 2> "$out/serve-$seed.err" &
    pid=$!
    for _ in $(seq 1 80); do grep -q '^listening' "$out/serve.out" && break; sleep 0.25; done
    addr=$(sed -n 's/^listening on //p' "$out/serve.out")
    for i in "${!clients[@]}"; do
        c=${clients[$(( (i + seed - 1) % ${#clients[@]} ))]}
        if [ "$c" = rust ]; then
            "$bin" bench ycsb --server "$addr" --sessions 1 --connections 1 --ping --records 1000 \
                --duration-s "$secs" --warmup-s 1 --json > "$out/rust-$seed.json"
            python3 - "$out/rust-$seed.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r['txn_latency']
print(f"| rust | Status | {r['txn_per_s']:,.0f} | {t['p50_us'] / 1e3:.3f} | {t['p99_us'] / 1e3:.3f} |")
PY
        else
            "$venv/bin/python" scripts/bench-python-client.py "$addr" "$secs"
        fi
    done | sed "s/^/| $seed /" | tee -a "$out/table.md"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
done
python3 - "$out/table.md" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.strip().strip('|').split('|')]
    seed, client, call, per_s, p50, p99 = cells
    rows[(call, client)].append((float(per_s.replace(',', '')), float(p50), float(p99)))
print()
print('| call | client | calls/s (median) | p50 ms (median) | p99 ms (median) |')
print('|---|---|---:|---:|---:|')
for (call, client), v in sorted(rows.items()):
    med = lambda i: statistics.median(x[i] for x in v)
    print(f'| {call} | {client} | {med(0):,.0f} | {med(1):.3f} | {med(2):.3f} |')
PY
