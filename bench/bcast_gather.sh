#!/usr/bin/env bash
# Seed 004's collective experiment (§4.2.2, Table 4.1) reproduced on ferry, plus the chain
# (topology-following) allreduce against the flat automatic one (X7).
#
# 004: broadcast and gather at 32 ranks, 1/100/1000 ints, linear/ring/binomial, each with a
# transport connected all-to-all at start against one connected along a ring (its TCPSessions,
# which forwarded every other message). ferry connects lazily (a pair connects on its first
# message) and never forwards, so its two modes are: `lazy` (only the algorithm's pairs ever
# connect) and `mesh` (every pair connected first by an all-to-all of empty messages, the cost
# reported as set-up). 004's "ring" is ferry's `chain` (each rank talks to rank +-1 only).
# Broadcast and gather run twice: `persistent` (set up once with Comm::bcast_init /
# gather_init, then start + wait per call, as 004 timed them) and `call` (the one-shot call
# repeated), so the table shows what the persistent object saves.
#
# Every configuration runs ITERS timed calls after 5 warm-up calls (004 discarded 5 of 100),
# rounds interleaved so they see the same load; the figure is the median over rounds of the
# slowest rank's mean call time (examples/bcast_gather prints it as avg_us).
#
# Writes the tables between <!-- bcast-gather:begin --> and <!-- bcast-gather:end --> of the
# output file (default docs/PERFORMANCE.md).
#
# Usage: bench/bcast_gather.sh [-r ROUNDS] [-i ITERS] [-b "tcp shm"] [-o OUTPUT.md] [-k DIR]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=3
ITERS=100
BACKENDS="tcp shm"
OUT="$ROOT/docs/PERFORMANCE.md"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RAW="$ROOT/target/bench-bcast-gather/$STAMP"
while getopts "r:i:b:o:k:h" opt; do
    case $opt in
        r) ROUNDS=$OPTARG ;;
        i) ITERS=$OPTARG ;;
        b) BACKENDS=$OPTARG ;;
        o) OUT=$OPTARG ;;
        k) RAW=$OPTARG ;;
        *) sed -n '2,22p' "$0"; exit 2 ;;
    esac
done
FERRY="$ROOT/target/release/ferry"
EX="$ROOT/target/release/examples/bcast_gather"
for f in "$FERRY" "$EX"; do
    [ -x "$f" ] || { echo "missing $f: cargo build --release -p ferry-cli -p ferry --examples" >&2; exit 1; }
done
mkdir -p "$RAW"
LOG="$RAW/runs.txt"
: > "$LOG"

one() { # backend ranks op alg ints conn mode
    local line
    if line=$(timeout 120 "$FERRY" run -n "$2" --backend "$1" "$EX" "$3" "$4" "$5" "$6" "$ITERS" 5 "$7" 2>>"$RAW/stderr.txt"); then
        echo "$1 $2 $line" >> "$LOG"
    else
        echo "$1 $2 $3 $4 $5 $6 mode $7 FAILED" >> "$LOG"
    fi
}

for r in $(seq "$ROUNDS"); do
    echo "round $r/$ROUNDS" >&2
    for b in $BACKENDS; do
        for op in bcast gather; do
            for alg in linear chain binomial; do
                for ints in 1 100 1000; do
                    for conn in lazy mesh; do one "$b" 32 "$op" "$alg" "$ints" "$conn" persistent; done
                    one "$b" 32 "$op" "$alg" "$ints" lazy call
                done
            done
        done
        for n in 16 64; do
            for alg in auto chain; do
                for ints in 1 1000; do one "$b" "$n" allreduce "$alg" "$ints" lazy call; done
            done
        done
    done
done

python3 - "$LOG" "$OUT" "$ROUNDS" "$ITERS" <<'PY'
import statistics, sys, re, datetime
log, out, rounds, iters = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
runs = {}
failed = []
for l in open(log):
    w = l.split()
    if w[-1] == "FAILED":
        failed.append(" ".join(w[:-1]))
        continue
    b, n, op, alg, ints, conn = w[:6]
    kv = dict(zip(w[6::2], w[7::2]))
    runs.setdefault((b, int(n), op, alg, int(ints), conn, kv.get("mode", "call")), []).append(kv)
def med(k, key):
    v = [float(r[key]) for r in runs.get(k, [])]
    return statistics.median(v) if v else None
def fmt(x, d=1):
    return "-" if x is None else f"{x:.{d}f}"
lines = []
lines.append(f"Seed 004's experiment, 32 ranks on 2 cores (oversubscribed), {iters} timed calls after 5 "
             f"warm-up ones, median of {rounds} interleaved rounds of the slowest rank's mean call time "
             f"(us). Persistent: set up once (`Comm::bcast_init` / `gather_init`; init in ms), then "
             f"start + wait per call; call: the one-shot collective repeated. `lazy`: only the "
             f"algorithm's pairs connect; `mesh`: every pair connected first (set-up in ms). Peers: "
             f"the most peers one rank exchanged messages with.")
lines.append("")
lines.append("| backend | op | algorithm | ints | persistent lazy us | persistent mesh us | mesh/lazy | call lazy us | persistent/call | peers lazy | init ms | mesh set-up ms |")
lines.append("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
def ratio(a, b):
    return "-" if not b or a is None else f"{a / b:.2f}"
for b in sorted({k[0] for k in runs}):
    for op in ("bcast", "gather"):
        for alg in ("linear", "chain", "binomial"):
            for ints in (1, 100, 1000):
                kl = (b, 32, op, alg, ints, "lazy", "persistent")
                km = (b, 32, op, alg, ints, "mesh", "persistent")
                kc = (b, 32, op, alg, ints, "lazy", "call")
                lz, ms, cl = med(kl, "avg_us"), med(km, "avg_us"), med(kc, "avg_us")
                lines.append(f"| {b} | {op} | {alg} | {ints} | {fmt(lz)} | {fmt(ms)} | {ratio(ms, lz)} | "
                             f"{fmt(cl)} | {ratio(lz, cl)} | {fmt(med(kl, 'peers'), 0)} | "
                             f"{fmt(med(kl, 'init_ms'), 2)} | {fmt(med(km, 'setup_ms'), 1)} |")
lines.append("")
lines.append("Chain (topology-following, X7) against the flat automatic allreduce (sum), same runs:")
lines.append("")
lines.append("| backend | ranks | ints | flat us | chain us | chain/flat | peers flat | peers chain |")
lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
for b in sorted({k[0] for k in runs}):
    for n in (16, 64):
        for ints in (1, 1000):
            kf = (b, n, "allreduce", "auto", ints, "lazy", "call")
            kc = (b, n, "allreduce", "chain", ints, "lazy", "call")
            f, c = med(kf, "avg_us"), med(kc, "avg_us")
            ratio = "-" if not f or c is None else f"{c / f:.2f}"
            lines.append(f"| {b} | {n} | {ints} | {fmt(f)} | {fmt(c)} | {ratio} | "
                         f"{fmt(med(kf, 'peers'), 0)} | {fmt(med(kc, 'peers'), 0)} |")
if failed:
    lines.append("")
    lines.append("Failed runs: " + "; ".join(failed))
body = "\n".join(lines)
text = open(out).read()
begin, end = "<!-- bcast-gather:begin -->", "<!-- bcast-gather:end -->"
if begin in text and end in text:
    a, z = text.index(begin) + len(begin), text.index(end)
    text = text[:a] + "\n" + body + "\n" + text[z:]
else:
    text = text.rstrip("\n") + "\n\n" + begin + "\n" + body + "\n" + end + "\n"
open(out, "w").write(text)
print(body)
PY
echo "raw runs: $LOG" >&2
