#!/usr/bin/env bash
# YCSB-A through `milliscale serve` from another process, against the
# embedded engine, on sim://s3x, seeds 1..SEEDS, in an order that rotates
# with the seed:
# - embedded, and embedded-2 half a rotation later: the main job (2 worker
#   threads, closed loop); the ratios are against the mean of the two, as
#   this machine's speed drifts within minutes;
# - one-shot: the server, driven by `bench ycsb --server` with SESSIONS
#   sessions, each transaction one message on its connection's
#   ExecuteStream (the client's default);
# - one-shot-unary: the same, each transaction one Execute call;
# - one-shot-pipelined: the same messages answered at pre-commit; a
#   session sends its next transaction at once and hears of durability
#   later on the stream, as the embedded engine's workers go on (commit
#   latency from the pre-commit answer to the word that it is durable, as
#   the embedded engine's runs from pre-commit to acknowledgment; the
#   latency from sending is printed too);
# - interactive: the same, each transaction begin + a get and a patch per
#   key + commit;
# - one-shot-1000: 1,000 sessions (must finish without errors);
# - ping: the same sessions sending Status calls, no engine work: what an
#   RPC costs by itself on this machine, the floor under unary calls;
# - empty: the same sessions sending empty batches on the stream: what a
#   streamed batch costs without engine work, the floor under one-shot;
# - embedded-at-load: the embedded engine in open loop at the throughput
#   the one-shot run reached, for commit latency at equal load; and
#   embedded-at-pipelined-load at the pipelined run's;
# - one-shot-open and embedded-open: both in open loop at the same rate,
#   OPEN_FRACTION (default 0.5) of the one-shot run's throughput: commit
#   latency at equal offered load below the server's saturation, where
#   closed-loop queueing does not count.
# Each server run starts a fresh server (same store seed) and loads the
# records through it. Prints per seed and as medians: throughput, commit
# p50/p99, CPU per transaction, and the ratios.
# The client runs on CLIENT_THREADS runtime threads (default 1: on 2 cores
# shared with the server, a second thread costs it more CPU per
# transaction in context switches than it adds).
# Usage: scripts/bench-server.sh [SEEDS] [SECONDS] [SESSIONS] [RECORDS]
set -euo pipefail
seeds=${1:-3}
secs=${2:-10}
sessions=${3:-256}
records=${4:-1000000}
client_threads=${CLIENT_THREADS:-1}
open_fraction=${OPEN_FRACTION:-0.5}
source "$(dirname "$0")/bench-common.sh"  # bin, out; builds; prints the machine
echo "seeds=1..$seeds seconds=$secs sessions=$sessions records=$records client threads=$client_threads; raw reports in $out"
common=(bench ycsb --workload a --records "$records" --duration-s "$secs" --warmup-s 2 --json)
serve() { # seed name args...: a fresh server, the client against it
    local seed=$1 name=$2
    shift 2
    "$bin" serve --store "sim://s3x?seed=$seed" --listen 127.0.0.1:0 > "$out/serve.out" 2> "$out/serve-$name-$seed.err" &
    local pid=$!
    for _ in $(seq 1 80); do grep -q '^listening' "$out/serve.out" && break; sleep 0.25; done
    local addr
    addr=$(sed -n 's/^listening on //p' "$out/serve.out")
    "$bin" "${common[@]}" --seed "$seed" --threads 2 --client-threads "$client_threads" --server "$addr" "$@" > "$out/$name-$seed.json"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}
run() { # name seed
    case $1 in
        embedded | embedded-2) "$bin" "${common[@]}" --seed "$2" --threads 2 --store sim://s3x > "$out/$1-$2.json" ;;
        one-shot) serve "$2" one-shot --sessions "$sessions" ;;
        one-shot-unary) serve "$2" one-shot-unary --sessions "$sessions" --unary ;;
        one-shot-pipelined) serve "$2" one-shot-pipelined --sessions "$sessions" --pipelined ;;
        interactive) serve "$2" interactive --sessions "$sessions" --interactive ;;
        one-shot-1000) serve "$2" one-shot-1000 --sessions 1000 ;;
        ping) serve "$2" ping --sessions "$sessions" --ping ;;
        empty) serve "$2" empty --sessions "$sessions" --empty ;;
    esac
}
names=(embedded one-shot one-shot-unary one-shot-pipelined interactive embedded-2 one-shot-1000 ping empty)
for seed in $(seq 1 "$seeds"); do
    for i in "${!names[@]}"; do
        run "${names[$(( (i + seed - 1) % ${#names[@]} ))]}" "$seed"
    done
    for run in one-shot one-shot-pipelined; do
        at=embedded-at-load
        [ "$run" = one-shot-pipelined ] && at=embedded-at-pipelined-load
        rate=$(python3 -c "import json; print(int(json.load(open('$out/$run-$seed.json'))['txn_per_s']))")
        "$bin" "${common[@]}" --seed "$seed" --threads 2 --store sim://s3x --rate "$rate" > "$out/$at-$seed.json"
    done
    rate=$(python3 -c "import json; print(int(json.load(open('$out/one-shot-$seed.json'))['txn_per_s'] * $open_fraction))")
    serve "$seed" one-shot-open --sessions "$sessions" --rate "$rate"
    "$bin" "${common[@]}" --seed "$seed" --threads 2 --store sim://s3x --rate "$rate" > "$out/embedded-open-$seed.json"
    echo "seed $seed done"
done
python3 - "$out" "$seeds" <<'PY'
import json, statistics, sys
d, seeds = sys.argv[1], int(sys.argv[2])
names = ['embedded', 'embedded-2', 'embedded-at-load', 'one-shot', 'one-shot-unary', 'embedded-at-pipelined-load',
         'one-shot-pipelined', 'interactive', 'one-shot-1000', 'ping', 'empty', 'embedded-open', 'one-shot-open']
def load(name, s):
    r = json.load(open(f'{d}/{name}-{s}.json'))
    c, x = r['commit_latency'], r.get('extra', {})
    return dict(tps=r['txn_per_s'], p50=c['p50_us'] / 1e3, p99=c['p99_us'] / 1e3,
                txn50=r['txn_latency']['p50_us'] / 1e3, aborted=r['aborted'],
                scpu=x.get('server_cpu_us_per_txn'), ccpu=x.get('client_cpu_us_per_txn'))
print('| seed | run | txn/s | commit p50 ms | commit p99 ms | server CPU µs/txn | client CPU µs/txn | txn/s / embedded |')
print('|---:|---|---:|---:|---:|---:|---:|---:|')
ratio, p50_gap, p50_gap_load, pipe_gap, open_gap = {n: [] for n in names}, [], [], [], []
def embedded(s):  # the mean of the seed's two embedded runs
    a, b = load('embedded', s), load('embedded-2', s)
    return {k: (a[k] + b[k]) / 2 for k in ('tps', 'p50')}
for s in range(1, seeds + 1):
    e = embedded(s)
    for n in names:
        r = load(n, s)
        ratio[n].append(r['tps'] / e['tps'])
        cpu = lambda v: '' if v is None else f'{v:.1f}'
        print(f"| {s} | {n} | {r['tps']:,.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {cpu(r['scpu'])} | {cpu(r['ccpu'])} | {r['tps'] / e['tps']:.3f}x |")
    p50_gap.append(load('one-shot', s)['p50'] - e['p50'])
    p50_gap_load.append(load('one-shot', s)['p50'] - load('embedded-at-load', s)['p50'])
    pipe_gap.append(load('one-shot-pipelined', s)['p50'] - load('embedded-at-pipelined-load', s)['p50'])
    open_gap.append(load('one-shot-open', s)['p50'] - load('embedded-open', s)['p50'])
print()
for n in names[2:]:
    print(f'{n}: median throughput {statistics.median(ratio[n]):.3f}x the embedded runs')
floor = [load('one-shot-unary', s)['tps'] / load('ping', s)['tps'] for s in range(1, seeds + 1)]
print(f'one-shot-unary against ping (the floor of a call): median {statistics.median(floor):.3f}x')
floor = [load('one-shot', s)['tps'] / load('empty', s)['tps'] for s in range(1, seeds + 1)]
print(f'one-shot against empty (the floor of a streamed batch): median {statistics.median(floor):.3f}x')
ratio = [load('one-shot', s)['tps'] / load('one-shot-unary', s)['tps'] for s in range(1, seeds + 1)]
print(f'one-shot (stream) against one-shot-unary: median {statistics.median(ratio):.3f}x')
print(f'one-shot commit p50 minus the embedded run\'s: median {statistics.median(p50_gap):+.2f} ms; '
      f'minus the embedded engine\'s at the same load: median {statistics.median(p50_gap_load):+.2f} ms')
ratio = [load('one-shot-pipelined', s)['tps'] / load('one-shot', s)['tps'] for s in range(1, seeds + 1)]
print(f'one-shot-pipelined against one-shot: median {statistics.median(ratio):.3f}x')
print(f'one-shot-pipelined commit p50 minus the embedded engine\'s at the same load: '
      f'median {statistics.median(pipe_gap):+.2f} ms (per seed: {", ".join(f"{g:+.2f}" for g in pipe_gap)})')
sent = [json.load(open(f'{d}/one-shot-pipelined-{s}.json'))['extra']['commit_from_send_p50_ms'] for s in range(1, seeds + 1)]
print(f'one-shot-pipelined commit p50 from sending the request (also the wait at a busy server): '
      f'median {statistics.median(sent):.2f} ms (per seed: {", ".join(f"{g:.2f}" for g in sent)})')
print(f'one-shot-open commit p50 minus embedded-open\'s (both open loop at the same rate): '
      f'median {statistics.median(open_gap):+.2f} ms (per seed: {", ".join(f"{g:+.2f}" for g in open_gap)})')
PY
