#!/usr/bin/env bash
# Does a cluster's shard keep its state bounded as it commits? One
# `serve --cluster` shard with its database in a directory (file://),
# ROWS YCSB records (1 KiB each) loaded through the cluster client, then
# single-key read-modify-write transactions (YCSB workload U, one key
# each, keys chosen uniformly: the benchmark's default) through `Cluster::execute`:
# - run A: SMALL transactions (an open loop at 0.52 SMALL a second for 2 s,
#   so that A stays near SMALL however fast the shard is), then kill -9
#   and restart: how long until the shard listens again;
# - run B: MID transactions (resident memory), on to LARGE (resident
#   memory again), then kill -9 and restart, timed the same way;
# - run W, the worst case: where a kill lands in the checkpoint cycle
#   decides how much log a restart replays, so B's shard is restarted
#   with checkpoints held off (the recovery's own checkpoint leaves an
#   empty tail), runs until its log after the checkpoint is as large as
#   the shard's rule lets it grow (TAIL_MIB, default 18: its 16 MiB
#   trigger and what a checkpoint in flight lets through), and is killed
#   there and restarted with its default rule, timed the same way.
# Before each kill: what the log holds (`milliscale inspect`: what
# recovery would replay after the checkpoint) and the bytes of the
# store's objects. Transactions are counted from the benchmark's reports
# (no warm-up: every committed one counts). What each kill left is kept,
# and restarted only once all three kills are done: in RESTARTS rounds
# (default 5), each restarting a fresh copy of A's, B's and W's state once,
# in an order that rotates. The ratios are taken within a round and their
# medians count: the machine's speed drifts over the minutes between the
# kills, and the checkpoint's load varies by a third from one restart to
# the next. Uses the release build.
# Usage: scripts/bench-cluster-bounded.sh [ROWS] [SMALL] [MID] [LARGE]
set -euo pipefail
rows=${1:-1000000}
small=${2:-20000}
mid=${3:-200000}
large=${4:-2000000}
restarts=${RESTARTS:-5}
# MILLISCALE_BIN: another binary (another commit's, for an A/B).
bin=${MILLISCALE_BIN:-"${CARGO_TARGET_DIR:-$(cd "$(dirname "$0")/.." && pwd)/target}/release/milliscale"}
out=$(mktemp -d)
echo "machine: $(nproc) cores; commit $(git rev-parse --short=12 HEAD); rows=$rows small=$small mid=$mid large=$large; in $out"
pid=
start() { # dir: start the shard (sets pid); the seconds until it listens go to dir/started
    local dir=$1 t0
    : > "$dir/shard.out"
    t0=$(date +%s.%N)
    env ${shard_env:-MILLISCALE_BENCH=1} "$bin" serve --cluster "file://$dir/map" --shard 0 --store "file://$dir/s0" --listen "127.0.0.1:$port" \
        >> "$dir/shard.out" 2>> "$dir/shard.err" &
    pid=$!
    for _ in $(seq 1 2400); do grep -q '^listening' "$dir/shard.out" && break; sleep 0.05; done
    grep -q '^listening' "$dir/shard.out" || { echo "the shard did not start"; tail "$dir/shard.err"; exit 1; }
    python3 -c "print(f'{$(date +%s.%N) - $t0:.2f}')" > "$dir/started"
}
rss_mib() { echo $(( $(awk '/VmRSS/ {print $2}' "/proc/$pid/status") / 1024 )); }
rss_settled() { # the median of 10 samples over 5 s once the load stops (a checkpoint in flight
    # holds its buffers for a moment); prints "MEDIAN (MIN-MAX)"
    local samples=() i
    for i in $(seq 1 10); do samples+=("$(rss_mib)"); sleep 0.5; done
    python3 -c "import statistics, sys; v = sorted(map(int, sys.argv[1:])); print(f'{statistics.median(v):.0f} ({v[0]}-{v[-1]})')" "${samples[@]}"
}
txns() { # dir n [rate]: run until n transactions committed (counted over the
    # runs); with a rate, the first run is an open loop at that many a second
    local dir=$1 n=$2 rate=${3:-} done=0 secs=2 i=0
    while [ "$done" -lt "$n" ]; do
        i=$((i + 1))
        "$bin" bench ycsb --workload u --ops-per-txn 1 --records "$rows" --isolation serializable \
            --duration-s "$secs" --warmup-s 0 --json --threads 2 --client-threads 1 --sessions 128 \
            --seed "$i" --server "127.0.0.1:$port" --cluster ${rate:+--rate "$rate"} > "$dir/run-$i.json"
        rate=
        read -r c r < <(python3 -c "import json; r = json.load(open('$dir/run-$i.json')); print(r['committed'], int(r['txn_per_s']))")
        done=$((done + c))
        # The next run, sized to finish near n.
        secs=$(python3 -c "print(max(1, min(60, round(($n - $done) / max($r, 1)))))")
    done
    echo "$done"
}
log_state() { # dir: what the log holds after the checkpoint
    "$bin" inspect --store "file://$1/s0" --json > "$1/inspect.json" 2> /dev/null || true
    python3 - "$1" <<'PY'
import json, os, sys
d = sys.argv[1]
total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(f'{d}/s0') for f in fs)
try:
    j = json.load(open(f'{d}/inspect.json'))
    s = j['stores'][0] if 'stores' in j else j
    ck = s['manifest'].get('checkpoint') or {}
    r = s['replay']
    print(f"store objects {total / 2**20:,.0f} MiB: checkpoint {ck.get('bytes', 0) / 2**20:,.0f} MiB "
          f"(below CSN {r['from_csn']}), log {s['log_bytes'] / 2**20:,.1f} MiB in {s['log_objects']} objects, "
          f"all of it after the checkpoint: recovery would replay {r['transactions']} transactions "
          f"(CSN {r['from_csn']} to {r['max_csn']})")
except Exception as e:
    print(f"store objects {total / 2**20:,.0f} MiB; inspect unreadable: {e}")
PY
}
fresh() { # dir: a map with one shard, the shard started, the records loaded
    local dir=$1
    mkdir -p "$dir"
    port=$(python3 "$(dirname "$0")/free-port.py")
    "$bin" cluster init --map "file://$dir/map" --shard "127.0.0.1:$port=file://$dir/s0" > /dev/null
    start "$dir"
    local t0
    t0=$(date +%s)
    "$bin" bench ycsb --workload c --records "$rows" --duration-s 1 --warmup-s 0 --json --threads 2 \
        --client-threads 1 --sessions 8 --isolation serializable --server "127.0.0.1:$port" --cluster > "$dir/load.json"
    echo "loaded $rows rows in $(( $(date +%s) - t0 )) s; resident $(rss_mib) MiB"
}
kill_keep() { # dir name: kill -9 the shard, and keep what the kill left (the
    # store and the map) as $out/killed-name for the restarts below
    kill -9 "$pid"; wait "$pid" 2>/dev/null || true
    mkdir -p "$out/killed-$2"
    cp -a "$1/s0" "$1/map" "$out/killed-$2/"
    cp "$1/shard.out" "$out/killed-$2/"  # the port it listened on
}
restart_kept() { # name: restart a copy of killed-name, timed until it listens;
    # prints the seconds and the shard's own account of its recovery, then
    # stops it (SIGTERM) and deletes the copy
    local dir=$out/restart-$1
    rm -rf "$dir"; mkdir -p "$dir"
    cp -a "$out/killed-$1/s0" "$out/killed-$1/map" "$dir/"
    # The copy's pages written out first: a killed shard's log was on the
    # disk already, and the fence's appends would flush them (more for a
    # longer log) inside the timed restart.
    sync
    port=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$out/killed-$1/shard.out" | head -1)
    : > "$dir/shard.err"
    start "$dir"
    echo "$(cat "$dir/started") s; $(grep -h 'recovery:' "$dir/shard.err" | sed 's/^milliscale serve: //')"
    kill "$pid"; wait "$pid" 2>/dev/null || true
    rm -rf "$dir"
}

A=$out/a; fresh "$A"
n=$(txns "$A" "$small" $((small * 52 / 100)))
echo "A: $n transactions; resident $(rss_mib) MiB"
echo "A: before the restart: $(log_state "$A")"
kill_keep "$A" a

B=$out/b; fresh "$B"
n1=$(txns "$B" "$mid")
r1=$(rss_settled); m1=${r1%% *}
echo "B: $n1 transactions; resident $r1 MiB (median of 10 samples over 5 s, and their range)"
n2=$(txns "$B" $((large - n1)))
r2=$(rss_settled); m2=${r2%% *}
echo "B: $((n1 + n2)) transactions; resident $r2 MiB (the same)"
echo "B: before the restart: $(log_state "$B")"
kill_keep "$B" b

# W: B's shard, its tail grown to TAIL_MIB with checkpoints held off.
tail_mib=${TAIL_MIB:-18}
: > "$B/shard.err"
shard_env=MILLISCALE_OPT_CHECKPOINT_LOG_RATIO=1000 start "$B"; shard_env=
"$bin" bench ycsb --workload u --ops-per-txn 1 --records "$rows" --isolation serializable \
    --duration-s 300 --warmup-s 0 --json --threads 2 --client-threads 1 --sessions 128 \
    --seed 99 --server "127.0.0.1:$port" --cluster > "$B/run-w.json" 2> /dev/null &
load=$!
while :; do
    sleep 0.3
    t=$("$bin" inspect --store "file://$B/s0" --json 2> /dev/null | python3 -c \
        "import json, sys; j = json.load(sys.stdin); s = j['stores'][0] if 'stores' in j else j; print(s['log_bytes'] >> 20)" || echo 0)
    [ "$t" -ge "$tail_mib" ] && break
done
kill "$load" 2> /dev/null || true; wait "$load" 2> /dev/null || true
echo "W: before the restart: $(log_state "$B")"
kill_keep "$B" w

# The restarts, in rounds: each round restarts A's, B's and W's killed
# states once, in an order that rotates, so that the machine's drift over
# the minutes between the kills does not enter the ratios; a ratio is
# taken within its round, and the medians over the rounds count.
: > "$out/restarts"
for i in $(seq 1 "$restarts"); do
    case $((i % 3)) in 1) order="a b w" ;; 2) order="b w a" ;; *) order="w a b" ;; esac
    for name in $order; do
        line=$(restart_kept "$name")
        echo "$(echo "$name" | tr a-z A-Z): restart $line"
        echo "$i $name ${line%% s;*}" >> "$out/restarts"
    done
done
python3 - "$out/restarts" "$m1" "$m2" <<'PY'
import collections, statistics, sys
t = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    i, name, s = line.split()
    t[i][name] = float(s)
med = lambda name: statistics.median(r[name] for r in t.values())
ratio = lambda name: [r[name] / r['a'] for r in t.values()]
b, w = ratio('b'), ratio('w')
print(f"restart medians: A {med('a'):.2f} s, B {med('b'):.2f} s, W {med('w'):.2f} s")
print(f"restart B / A: {statistics.median(b):.2f}x (per round {', '.join(f'{x:.2f}' for x in b)}), "
      f"at the largest tail W / A: {statistics.median(w):.2f}x (per round {', '.join(f'{x:.2f}' for x in w)}) "
      f"(goal at most 1.5x); resident after LARGE / after MID: {int(sys.argv[3]) / int(sys.argv[2]):.2f}x (goal at most 1.2x)")
PY
