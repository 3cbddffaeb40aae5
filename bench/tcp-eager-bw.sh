#!/usr/bin/env bash
# TCP bandwidth of the eager sizes (16-64 KiB) and the first rendezvous size (128 KiB):
# ferry's osu_bw against Open MPI's TCP BTL, interleaved over many rounds, so that the noise of
# osu_bw's 2 + 20 iterations above 8 KiB averages out. Each round runs, for every program:
#   full   : `osu_bw -m MAX` (every size from 1 B, as bench/compare-openmpi.sh runs it)
#   single : `osu_bw -m S:S` for each size S alone
# and prints, per mode and size, the best and the median of the rounds for each program and
# the ratios ferry / Open MPI (best against best, median against median).
#
# Usage: bench/tcp-eager-bw.sh [-r ROUNDS] [-s SIZES] [-m MAX] [-b BASE_DIR] [-k KEEP_DIR]
#   -r ROUNDS  rounds (default 10)
#   -s SIZES   comma-separated sizes in bytes (default 16384,32768,65536,131072)
#   -m MAX     largest size of the full-range runs (default 1048576, as the comparison)
#   -b DIR     also run a second ferry build, DIR/ferry and DIR/osu_bw (e.g. a copy of
#              main's target/release/ferry and target/release/examples/osu_bw), as "base"
#   -k DIR     where raw outputs go (default target/bench-tcp-eager/<UTC timestamp>)
#   -M MODES   comma-separated subset of full,single (default both)
# Needs target/release/ferry and target/release/examples/osu_bw (cargo build --release -p
# ferry-cli --bin ferry -p ferry --example osu_bw) and Open MPI (mpicc, mpirun).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=10
SIZES=16384,32768,65536,131072
MAX=1048576
BASE=
MODES=full,single
RAW="$ROOT/target/bench-tcp-eager/$(date -u +%Y%m%dT%H%M%SZ)"
while getopts "r:s:m:b:k:M:h" opt; do
    case $opt in
        r) ROUNDS=$OPTARG ;;
        s) SIZES=$OPTARG ;;
        m) MAX=$OPTARG ;;
        b) BASE=$OPTARG ;;
        k) RAW=$OPTARG ;;
        M) MODES=$OPTARG ;;
        *) sed -n '2,20p' "$0"; exit 2 ;;
    esac
done
mkdir -p "$RAW"

MPIRUN=mpirun
command -v mpirun.openmpi >/dev/null && MPIRUN=mpirun.openmpi
MPICC=mpicc
command -v mpicc.openmpi >/dev/null && MPICC=mpicc.openmpi
MPIFLAGS=()
[ "$(id -u)" = 0 ] && MPIFLAGS+=(--allow-run-as-root --oversubscribe)
OMPI_TCP=(--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo)
"$MPICC" -O2 -o "$RAW/c_osu_bw" "$ROOT/bench/c/osu_bw.c"

FERRY="$ROOT/target/release/ferry"
OSU="$ROOT/target/release/examples/osu_bw"
for f in "$FERRY" "$OSU" ${BASE:+"$BASE/ferry" "$BASE/osu_bw"}; do
    [ -x "$f" ] || { echo "tcp-eager-bw: $f missing (build it first)" >&2; exit 1; }
done
PROGS=(ferry ompi)
[ -n "$BASE" ] && PROGS+=(base)

# one PROG MODE TAG ARGS...: one run into $RAW/PROG.MODE.TAG.ROUND.txt
one() {
    local prog=$1 mode=$2 tag=$3
    shift 3
    local f="$RAW/$prog.$mode.$tag.$round.txt"
    local cmd
    case $prog in
        ferry) cmd=("$FERRY" run -n 2 --backend tcp -- "$OSU" "$@") ;;
        base) cmd=("$BASE/ferry" run -n 2 --backend tcp -- "$BASE/osu_bw" "$@") ;;
        ompi) cmd=("$MPIRUN" "${MPIFLAGS[@]}" -np 2 "${OMPI_TCP[@]}" "$RAW/c_osu_bw" "$@") ;;
    esac
    if ! timeout 300 "${cmd[@]}" >"$f" 2>"$f.err"; then
        echo "tcp-eager-bw: $prog $mode $tag failed (round $round), see $f.err" >&2
    fi
}

has_mode() { case ",$MODES," in *",$1,"*) return 0 ;; esac; return 1; }
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
echo "tcp-eager-bw: raw outputs in $RAW, load $LOAD_BEFORE" >&2
for round in $(seq 1 "$ROUNDS"); do
    echo "tcp-eager-bw: round $round of $ROUNDS" >&2
    # The order of the programs alternates between rounds, so that neither always runs first.
    order=("${PROGS[@]}")
    if [ $((round % 2)) = 0 ]; then
        order=()
        for ((i = ${#PROGS[@]} - 1; i >= 0; i--)); do order+=("${PROGS[$i]}"); done
    fi
    if has_mode full; then
        for p in "${order[@]}"; do one "$p" full all -m "$MAX"; done
    fi
    if has_mode single; then
        for s in ${SIZES//,/ }; do
            for p in "${order[@]}"; do one "$p" single "$s" -m "$s:$s"; done
        done
    fi
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$RAW" "$SIZES" "$ROUNDS" "$LOAD_BEFORE" "$LOAD_AFTER" "${PROGS[@]}" <<'EOF'
import glob, os, statistics, sys

raw, sizes, rounds, load_before, load_after = sys.argv[1:6]
progs = sys.argv[6:]
sizes = [int(s) for s in sizes.split(",")]

def figures(prog, mode, size):
    tag = "all" if mode == "full" else str(size)
    out = []
    for f in sorted(glob.glob(os.path.join(raw, f"{prog}.{mode}.{tag}.*.txt"))):
        for line in open(f):
            parts = line.split()
            if len(parts) == 2 and parts[0] == str(size):
                out.append(float(parts[1]))
    return out

print(f"# tcp osu_bw, {rounds} rounds, MB/s; load before {load_before}, after {load_after}")
head = "| mode | size |" + "".join(f" {p} best | {p} median |" for p in progs)
head += " ferry/ompi best | ferry/ompi median |"
if "base" in progs:
    head += " ferry/base best | ferry/base median |"
print(head)
print("|" + "---|" * (head.count("|") - 1))
for mode in ("full", "single"):
    for size in sizes:
        stats = {}
        for p in progs:
            v = figures(p, mode, size)
            stats[p] = (max(v), statistics.median(v), len(v)) if v else None
        if all(s is None for s in stats.values()):
            continue
        row = f"| {mode} | {size // 1024} KiB |"
        for p in progs:
            s = stats[p]
            row += f" {s[0]:.0f} | {s[1]:.0f} |" if s else " - | - |"
        def ratio(a, b):
            if not stats.get(a) or not stats.get(b):
                return " - | - |"
            return f" {stats[a][0] / stats[b][0]:.2f} | {stats[a][1] / stats[b][1]:.2f} |"
        row += ratio("ferry", "ompi")
        if "base" in progs:
            row += ratio("ferry", "base")
        print(row)
EOF
