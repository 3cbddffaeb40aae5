#!/usr/bin/env bash
# Measures the allreduce crossovers behind crates/ferry-coll/src/select.rs: runs
# osu_allreduce once per forced algorithm (-a ALG) and prints one table, size x algorithm
# (avg latency in us, best of RUNS runs), plus what `auto` picks.
# Usage: bench/crossovers.sh [-b BACKEND] [-n RANKS] [-m MAX] [-r RUNS] [-a "ALG ..."]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BACKEND=shm
RANKS=4
MAX=1048576
RUNS=1
ALGS="direct master binomial rdouble ring pipeline auto"
while getopts "b:n:m:r:a:h" opt; do
    case $opt in
        b) BACKEND=$OPTARG ;;
        n) RANKS=$OPTARG ;;
        m) MAX=$OPTARG ;;
        r) RUNS=$OPTARG ;;
        a) ALGS=$OPTARG ;;
        *) sed -n '2,6p' "$0"; exit 2 ;;
    esac
done
(cd "$ROOT" && cargo build --release -q -p ferry-cli --bin ferry -p ferry --example osu_allreduce)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PROG=("$ROOT/target/release/examples/osu_allreduce")
if [ "$BACKEND" = hybrid ]; then
    PROG=(sh -c 'FERRY_NODE=n$((FERRY_RANK / 2)) exec "$0" "$@"' "${PROG[@]}")
fi
for r in $(seq 1 "$RUNS"); do
    for a in $ALGS; do
        timeout 900 "$ROOT/target/release/ferry" run -n "$RANKS" --backend "$BACKEND" -- \
            "${PROG[@]}" -m "$MAX" -a "$a" >"$TMP/$a.$r" 2>"$TMP/$a.$r.err" ||
            echo "crossovers: $a failed: $(head -c 300 "$TMP/$a.$r.err")" >&2
    done
done
echo "# allreduce avg latency (us), backend $BACKEND, $RANKS ranks, best of $RUNS; load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$TMP" "$RUNS" $ALGS <<'PY'
import sys, os
tmp, runs, algs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
best = {}
sizes = []
for a in algs:
    for r in range(1, runs + 1):
        p = os.path.join(tmp, f"{a}.{r}")
        if not os.path.exists(p):
            continue
        for line in open(p):
            f = line.split()
            if len(f) == 2 and not line.startswith("#"):
                s, v = int(f[0]), float(f[1])
                if s not in sizes:
                    sizes.append(s)
                k = (a, s)
                best[k] = min(best.get(k, v), v)
print("| size | " + " | ".join(algs) + " | fastest |")
print("|---" * (len(algs) + 2) + "|")
for s in sizes:
    row = [best.get((a, s)) for a in algs]
    cand = [(v, a) for v, a in zip(row, algs) if v is not None and a != "auto"]
    fastest = min(cand)[1] if cand else "-"
    print(f"| {s} | " + " | ".join("-" if v is None else f"{v:.2f}" for v in row) + f" | {fastest} |")
PY
