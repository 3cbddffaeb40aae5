#!/usr/bin/env bash
# Cost of retained messages (T6, `tcp.retain`) in jobs started by hand from a file of
# addresses: osu_latency and osu_bw between two hand-started ranks with retention off and on,
# interleaved round by round so that both see the same machine load, and the retained bytes
# of t_retain over a long run with and without checkpoints (FERRY_STATS=1).
#
# Usage: bench/retain-cost.sh [-r ROUNDS] [-m MAX_BYTES] [-k DIR]
#   -r ROUNDS  rounds of the on/off pair (default 3); the figure is the median per size
#   -m MAX     largest message of osu_latency/osu_bw (default 1048576)
#   -k DIR     raw outputs (default target/bench-retain/<UTC timestamp>)
# Prints markdown tables on stdout; needs `cargo build --release --examples` first.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
EX="$ROOT/target/release/examples"
ROUNDS=3
MAX=1048576
RAW="$ROOT/target/bench-retain/$(date -u +%Y%m%dT%H%M%SZ)"
while getopts "r:m:k:h" opt; do
    case $opt in
        r) ROUNDS=$OPTARG ;;
        m) MAX=$OPTARG ;;
        k) RAW=$OPTARG ;;
        *) sed -n '2,12p' "$0"; exit 2 ;;
    esac
done
mkdir -p "$RAW"

free_ports() {
    python3 - "$1" <<'PY'
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))
PY
}

# hand_job N RETAIN OUT PROGRAM ARGS...: N ranks started one after the other (each takes the
# first free address of the file); rank 0's stdout goes to OUT, every rank's stderr to OUT.err.
hand_job() {
    local n=$1 retain=$2 out=$3
    shift 3
    local ports cfg list="" pids=() i=0
    ports=$(free_ports "$n")
    cfg=$(mktemp "$RAW/cfg.XXXXXX.toml")
    for p in $ports; do list="$list\"127.0.0.1:$p\", "; done
    printf '[tcp]\naddresses = [%s]\nsecret = "bench"\nretain = %s\n' "${list%, }" "$retain" >"$cfg"
    for p in $ports; do
        if [ $i -eq 0 ]; then
            FERRY_BACKEND=tcp FERRY_CONFIG=$cfg "$@" >"$out" 2>>"$out.err" &
        else
            FERRY_BACKEND=tcp FERRY_CONFIG=$cfg "$@" >/dev/null 2>>"$out.err" &
        fi
        pids+=($!)
        for _ in $(seq 1 400); do
            (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null && break
            sleep 0.01
        done
        i=$((i + 1))
    done
    local rc=0
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    rm -f "$cfg"
    return $rc
}

export FERRY_TCP_RETAIN_BYTES=$((6 << 30))
for r in $(seq 1 "$ROUNDS"); do
    for mode in false true; do
        hand_job 2 $mode "$RAW/lat-$mode-$r.txt" "$EX/osu_latency" -m "$MAX"
        hand_job 2 $mode "$RAW/bw-$mode-$r.txt" "$EX/osu_bw" -m "$MAX" -i 20 -x 2
    done
done

python3 - "$RAW" "$ROUNDS" <<'PY'
import sys, statistics, os
raw, rounds = sys.argv[1], int(sys.argv[2])
def table(kind):
    res = {}
    for mode in ("false", "true"):
        for r in range(1, rounds + 1):
            for line in open(os.path.join(raw, f"{kind}-{mode}-{r}.txt")):
                if line.startswith("#") or not line.strip():
                    continue
                size, v = line.split()[:2]
                res.setdefault((int(size), mode), []).append(float(v))
    return res
for kind, unit in (("lat", "latency us"), ("bw", "bandwidth MB/s")):
    res = table(kind)
    print(f"| size | {unit}, retain off | {unit}, retain on | on/off |")
    print("|---:|---:|---:|---:|")
    for size in sorted({s for s, _ in res}):
        off = statistics.median(res[(size, "false")])
        on = statistics.median(res[(size, "true")])
        print(f"| {size} | {off:.2f} | {on:.2f} | {on / off:.2f} |")
    print()
PY

# Retained bytes over a long run: 4 ranks, 2000 iterations of 2 x 16 KB halos each.
for ck in none 10; do
    args=(2000 2000 0)
    if [ "$ck" != none ]; then
        mkdir -p "$RAW/ckpt"
        rm -f "$RAW/ckpt"/*
        args+=("$ck" "$RAW/ckpt")
    fi
    FERRY_STATS=1 hand_job 4 true "$RAW/long-$ck.txt" "$EX/t_retain" "${args[@]}"
    peak=$(grep -h "tcp retained bytes peak" "$RAW/long-$ck.txt.err" | awk '{print $NF}' | sort -n | tail -1)
    echo "t_retain 2000 iterations, checkpoint every $ck: largest retained peak of a rank $peak bytes"
done
echo "raw outputs: $RAW"
