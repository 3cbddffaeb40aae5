#!/usr/bin/env bash
# Runs ferry and Open MPI side by side, in ONE invocation and on the same sizes, and writes the
# ratio table (ferry / Open MPI) into docs/PERFORMANCE.md between the markers
#   <!-- compare-openmpi:begin --> ... <!-- compare-openmpi:end -->
#
# What runs (each case RUNS times, ferry and Open MPI interleaved in every round so that both
# see the same machine load; figure = best of the runs, median shown too):
#   tcp    : ferry --backend tcp    vs  mpirun --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo
#   shm    : ferry --backend shm    vs  mpirun --mca pml ob1 --mca btl self,vader
#   hybrid : ferry --backend hybrid with FERRY_NODE = n(rank/2) (4 ranks on 2 "nodes")
#            vs  mpirun --mca pml ob1 --mca btl self,vader,tcp (Open MPI's own node-aware setup)
#   floors : bench/c/tcp_pingpong (polling and blocking), bench/c/shm_pingpong
# Figures: latency 8 B (2 ranks), bandwidth 64 KiB and 1 MiB (2 ranks), allreduce 8 B and
# 1 MiB (2 and 4 ranks). All C programs are ours (bench/c/), with the OSU 5.x methodology of
# the ferry examples (crates/ferry/examples/osu_*.rs).
#
# Usage: bench/compare-openmpi.sh [-r RUNS] [-o OUTPUT.md] [-k KEEP_DIR] [-b BACKENDS]
#   -r RUNS      repetitions (default 3)
#   -o FILE      markdown file to update (default docs/PERFORMANCE.md)
#   -k DIR       where raw outputs go (default target/bench-compare/<UTC timestamp>)
#   -b LIST      comma-separated subset of tcp,shm,hybrid (default all three)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=3
OUT="$ROOT/docs/PERFORMANCE.md"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RAW="$ROOT/target/bench-compare/$STAMP"
BACKENDS="tcp,shm,hybrid"
while getopts "r:o:k:b:h" opt; do
    case $opt in
        r) RUNS=$OPTARG ;;
        o) OUT=$OPTARG ;;
        k) RAW=$OPTARG ;;
        b) BACKENDS=$OPTARG ;;
        *) sed -n '2,25p' "$0"; exit 2 ;;
    esac
done
mkdir -p "$RAW"
CMDLINE="bench/compare-openmpi.sh $*"

# --- Open MPI --------------------------------------------------------------------------------
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    echo "compare-openmpi: installing Open MPI (openmpi-bin libopenmpi-dev)" >&2
    if [ "$(id -u)" = 0 ]; then
        apt-get install -y openmpi-bin libopenmpi-dev
    else
        sudo apt-get install -y openmpi-bin libopenmpi-dev
    fi
fi
MPIRUN=mpirun
command -v mpirun.openmpi >/dev/null && MPIRUN=mpirun.openmpi
MPICC=mpicc
command -v mpicc.openmpi >/dev/null && MPICC=mpicc.openmpi
MPIFLAGS=()
[ "$(id -u)" = 0 ] && MPIFLAGS+=(--allow-run-as-root --oversubscribe)
OMPI_TCP=(--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo)
OMPI_SHM=(--mca pml ob1 --mca btl self,vader)
OMPI_HYB=(--mca pml ob1 --mca btl self,vader,tcp --mca btl_tcp_if_include lo)

# --- builds ----------------------------------------------------------------------------------
BIN="$RAW/bin"
mkdir -p "$BIN"
for p in osu_latency osu_bw osu_allreduce; do
    "$MPICC" -O2 -o "$BIN/c_$p" "$ROOT/bench/c/$p.c"
done
cc -O2 -o "$BIN/tcp_pingpong" "$ROOT/bench/c/tcp_pingpong.c"
cc -O2 -o "$BIN/shm_pingpong" "$ROOT/bench/c/shm_pingpong.c"
(cd "$ROOT" && cargo build --release -q -p ferry-cli --bin ferry -p ferry \
    --example osu_latency --example osu_bw --example osu_allreduce)
FERRY="$ROOT/target/release/ferry"
EX="$ROOT/target/release/examples"

# --- running ---------------------------------------------------------------------------------
# run NAME CMD...: one run into $RAW/NAME.<round>.txt; a failure is recorded, not fatal.
round=0
run() {
    local name=$1
    shift
    local f="$RAW/$name.$round.txt"
    printf '%q ' "$@" >"$f.cmd"
    if ! timeout 600 "$@" >"$f" 2>"$f.err"; then
        echo "compare-openmpi: $name failed (round $round), see $f.err" >&2
        echo "FAILED" >>"$f"
    fi
}
# hybrid placement: ranks 0,1 on node n0 and 2,3 on node n1.
NODE_WRAP=(sh -c 'FERRY_NODE=n$((FERRY_RANK / 2)) exec "$0" "$@"')

has() { case ",$BACKENDS," in *",$1,"*) return 0 ;; esac; return 1; }

echo "compare-openmpi: raw outputs in $RAW" >&2
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$RUNS"); do
    echo "compare-openmpi: round $round of $RUNS" >&2
    run floor_tcp_spin "$BIN/tcp_pingpong" -s -m 8
    run floor_tcp_block "$BIN/tcp_pingpong" -m 8
    run floor_tcp_spin_bw "$BIN/tcp_pingpong" -s -b -m 1048576
    run floor_shm "$BIN/shm_pingpong" -m 8
    if has tcp; then
        run ferry_tcp_lat "$FERRY" run -n 2 --backend tcp -- "$EX/osu_latency" -m 8
        run ompi_tcp_lat "$MPIRUN" "${MPIFLAGS[@]}" -np 2 "${OMPI_TCP[@]}" "$BIN/c_osu_latency" -m 8
        run ferry_tcp_bw "$FERRY" run -n 2 --backend tcp -- "$EX/osu_bw" -m 1048576
        run ompi_tcp_bw "$MPIRUN" "${MPIFLAGS[@]}" -np 2 "${OMPI_TCP[@]}" "$BIN/c_osu_bw" -m 1048576
        for n in 2 4; do
            run "ferry_tcp_ar$n" "$FERRY" run -n $n --backend tcp -- "$EX/osu_allreduce" -m 1048576
            run "ompi_tcp_ar$n" "$MPIRUN" "${MPIFLAGS[@]}" -np $n "${OMPI_TCP[@]}" "$BIN/c_osu_allreduce" -m 1048576
        done
    fi
    if has shm; then
        run ferry_shm_lat "$FERRY" run -n 2 --backend shm -- "$EX/osu_latency" -m 8
        run ompi_shm_lat "$MPIRUN" "${MPIFLAGS[@]}" -np 2 "${OMPI_SHM[@]}" "$BIN/c_osu_latency" -m 8
        run ferry_shm_bw "$FERRY" run -n 2 --backend shm -- "$EX/osu_bw" -m 1048576
        run ompi_shm_bw "$MPIRUN" "${MPIFLAGS[@]}" -np 2 "${OMPI_SHM[@]}" "$BIN/c_osu_bw" -m 1048576
        for n in 2 4; do
            run "ferry_shm_ar$n" "$FERRY" run -n $n --backend shm -- "$EX/osu_allreduce" -m 1048576
            run "ompi_shm_ar$n" "$MPIRUN" "${MPIFLAGS[@]}" -np $n "${OMPI_SHM[@]}" "$BIN/c_osu_allreduce" -m 1048576
        done
    fi
    if has hybrid; then
        run ferry_hybrid_ar4 "$FERRY" run -n 4 --backend hybrid -- "${NODE_WRAP[@]}" "$EX/osu_allreduce" -m 1048576
        run ompi_hybrid_ar4 "$MPIRUN" "${MPIFLAGS[@]}" -np 4 "${OMPI_HYB[@]}" "$BIN/c_osu_allreduce" -m 1048576
    fi
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# --- summary ---------------------------------------------------------------------------------
python3 - "$RAW" "$RUNS" "$OUT" "$CMDLINE" "$LOAD_BEFORE" "$LOAD_AFTER" "$ROOT" <<'PY'
import os, statistics, sys, datetime
raw, runs, out, cmdline, load0, load1, root = sys.argv[1:8]
runs = int(runs)

def values(name, size):
    vals = []
    for r in range(1, runs + 1):
        path = os.path.join(raw, f"{name}.{r}.txt")
        if not os.path.exists(path):
            continue
        for line in open(path):
            parts = line.split()
            if len(parts) == 2 and parts[0] == str(size):
                try:
                    vals.append(float(parts[1]))
                except ValueError:
                    pass
    return vals

def fig(name, size, higher_better):
    v = values(name, size)
    if not v:
        return None, None, 0
    best = max(v) if higher_better else min(v)
    return best, statistics.median(v), len(v)

def fmt(x):
    if x is None:
        return "n/a"
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"

rows = []
# (row label, ferry run, ompi run, size, unit, higher_better, goal text, floor run)
spec = []
for b in ["tcp", "shm"]:
    spec += [
        (f"{b} latency 8 B, 2 ranks", f"ferry_{b}_lat", f"ompi_{b}_lat", 8, "us", False,
         "<= 1.0x" + (" and <= 1.3x polling floor" if b == "tcp" else ""),
         "floor_tcp_spin" if b == "tcp" else "floor_shm"),
        (f"{b} bandwidth 64 KiB", f"ferry_{b}_bw", f"ompi_{b}_bw", 65536, "MB/s", True, ">= 1.0x",
         "floor_tcp_spin_bw" if b == "tcp" else None),
        (f"{b} bandwidth 1 MiB", f"ferry_{b}_bw", f"ompi_{b}_bw", 1048576, "MB/s", True, ">= 1.0x",
         "floor_tcp_spin_bw" if b == "tcp" else None),
    ]
    for n in (2, 4):
        for size, label in ((8, "8 B"), (1048576, "1 MiB")):
            goal = "<= 1.0x" if (b == "shm" or (n == 4 and size == 8)) else "-"
            spec.append((f"{b} allreduce {label}, {n} ranks", f"ferry_{b}_ar{n}", f"ompi_{b}_ar{n}",
                         size, "us", False, goal, None))
for size, label in ((8, "8 B"), (1048576, "1 MiB")):
    spec.append((f"hybrid allreduce {label}, 4 ranks (ferry: 2 nodes over TCP; Open MPI: one host, vader)", "ferry_hybrid_ar4", "ompi_hybrid_ar4",
                 size, "us", False, "-", None))

lines = []
lines.append(f"Generated {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} by `{cmdline.strip()}`"
             f" ({runs} rounds, ferry and Open MPI interleaved in each round; load average before {load0}, after {load1}).")
lines.append("Figures: best of the rounds (median in parentheses). Ratio = ferry / Open MPI on the best figures;"
             " for latency lower is better, for bandwidth higher is better. Raw outputs: `" + os.path.relpath(raw, root) + "`.")
lines.append("")
lines.append("| figure | unit | ferry | Open MPI | ratio | goal | floor |")
lines.append("|---|---|---|---|---|---|---|")
for label, fr, om, size, unit, hb, goal, floor in spec:
    fb, fm, fn = fig(fr, size, hb)
    ob, omed, on = fig(om, size, hb)
    if fn == 0 and on == 0:
        continue
    ratio = f"{fb / ob:.2f}x" if fb and ob else "n/a"
    fl = ""
    if floor:
        flb, flm, _ = fig(floor, size, hb)
        fl = f"{fmt(flb)} ({fmt(flm)})"
        if fb and flb and floor == "floor_tcp_spin":
            fl += f", ferry/floor {fb / flb:.2f}x"
    lines.append(f"| {label} | {unit} | {fmt(fb)} ({fmt(fm)}) | {fmt(ob)} ({fmt(omed)}) | {ratio} | {goal} | {fl} |")
flb, flm, _ = fig("floor_tcp_block", 8, False)
lines.append("")
lines.append(f"Blocking TCP ping-pong (receiver sleeps in recv), 8 B: {fmt(flb)} us best ({fmt(flm)} median).")
lines.append("")
lines.append("Commands (one round):")
lines.append("")
lines.append("```")
for f in sorted(os.listdir(raw)):
    if f.endswith(".1.txt.cmd"):
        cmd = open(os.path.join(raw, f)).read().strip()
        cmd = cmd.replace(root + "/", "")
        lines.append(cmd)
lines.append("```")
block = "\n".join(lines)

begin, end = "<!-- compare-openmpi:begin -->", "<!-- compare-openmpi:end -->"
doc = open(out).read() if os.path.exists(out) else "# Performance\n\n"
if begin in doc and end in doc:
    pre = doc[: doc.index(begin) + len(begin)]
    post = doc[doc.index(end):]
    doc = pre + "\n" + block + "\n" + post
else:
    doc += "\n## ferry vs Open MPI\n\n" + begin + "\n" + block + "\n" + end + "\n"
open(out, "w").write(doc)
print(block)
PY
