#!/usr/bin/env bash
# Start-up time from launch to the completion of the first barrier, 2 to 256 ranks on this
# host (oversubscribed where ranks outnumber cores), ferry on tcp and shm against Open MPI's
# MPI_Init + MPI_Barrier under `mpirun --oversubscribe`, all in ONE invocation (X8).
#
# Each round runs every configuration once, interleaved (ferry tcp, ferry shm, Open MPI for
# each rank count), so that all three see the same machine load; the figure is the median of
# the rounds, with the fastest and slowest run beside it to show the noise. The clock starts
# when this script starts the launcher (wall-clock nanoseconds passed in FERRY_LAUNCH_T0 /
# LAUNCH_T0) and stops when rank 0 leaves the barrier:
#   ferry   : target/release/examples/t_startup (init, barrier, then a checked allreduce)
#   Open MPI: bench/c/startup.c compiled with mpicc at run time (MPI_Init, MPI_Barrier)
#
# Writes the table between <!-- startup:begin --> and <!-- startup:end --> in the output file
# (default docs/PERFORMANCE.md) and the plot (start-up time against ranks, SVG) to
# docs/startup.svg.
#
# Usage: bench/startup.sh [-r RUNS] [-n "2 4 ... 256"] [-o OUTPUT.md] [-p PLOT.svg] [-k DIR] [-M]
#   -r RUNS   rounds (default 3)
#   -n LIST   rank counts (default "2 4 8 16 32 64 128 256")
#   -o FILE   markdown file to update (default docs/PERFORMANCE.md)
#   -p FILE   SVG plot to write (default docs/startup.svg)
#   -k DIR    raw outputs (default target/bench-startup/<UTC timestamp>)
#   -m MAX    run Open MPI only up to MAX ranks (default: all counts)
#   -M        leave Open MPI out
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=3
COUNTS="2 4 8 16 32 64 128 256"
OUT="$ROOT/docs/PERFORMANCE.md"
PLOT="$ROOT/docs/startup.svg"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RAW="$ROOT/target/bench-startup/$STAMP"
WITH_MPI=1
MPI_MAX=1000000
while getopts "r:n:o:p:k:m:Mh" opt; do
    case $opt in
        r) RUNS=$OPTARG ;;
        n) COUNTS=$OPTARG ;;
        o) OUT=$OPTARG ;;
        p) PLOT=$OPTARG ;;
        k) RAW=$OPTARG ;;
        m) MPI_MAX=$OPTARG ;;
        M) WITH_MPI=0 ;;
        *) sed -n '2,28p' "$0"; exit 2 ;;
    esac
done
mkdir -p "$RAW"
CMDLINE="bench/startup.sh $*"

cd "$ROOT"
cargo build --release -p ferry-cli -p ferry --example t_startup >&2
# Copies, so that a rebuild while the benchmark runs does not change what it measures.
mkdir -p "$RAW/bin"
cp "$ROOT/target/release/ferry" "$ROOT/target/release/examples/t_startup" "$RAW/bin/"
FERRY="$RAW/bin/ferry"
PROG="$RAW/bin/t_startup"

if [ "$WITH_MPI" = 1 ]; then
    MPIRUN=mpirun
    command -v mpirun.openmpi >/dev/null && MPIRUN=mpirun.openmpi
    MPICC=mpicc
    command -v mpicc.openmpi >/dev/null && MPICC=mpicc.openmpi
    if ! command -v "$MPICC" >/dev/null || ! command -v "$MPIRUN" >/dev/null; then
        echo "startup.sh: Open MPI (mpicc, mpirun) not found; install openmpi-bin and" \
             "libopenmpi-dev or pass -M" >&2
        exit 1
    fi
    "$MPICC" -O2 -o "$RAW/startup_mpi" "$ROOT/bench/c/startup.c"
    MPIFLAGS=(--oversubscribe)
    [ "$(id -u)" = 0 ] && MPIFLAGS+=(--allow-run-as-root)
    MPI_VERSION=$("$MPIRUN" --version 2>/dev/null | head -1)
fi

# One run: prints "since launch" seconds, or "fail".
run_one() { # NAME N COMMAND...
    local name=$1 n=$2
    shift 2
    local log="$RAW/$name-$n-$ROUND.txt"
    local t0
    t0=$(date +%s%N)
    if FERRY_LAUNCH_T0=$t0 LAUNCH_T0=$t0 timeout 300 "$@" >"$log" 2>&1; then
        sed -n 's/.*since launch \([0-9.]*\) s.*/\1/p' "$log" | head -1
    else
        echo fail
    fi
}

RESULTS="$RAW/results.tsv"
printf 'round\tconfig\tranks\tseconds\n' >"$RESULTS"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for ROUND in $(seq 1 "$RUNS"); do
    for n in $COUNTS; do
        for b in tcp shm; do
            s=$(run_one "ferry-$b" "$n" "$FERRY" run -n "$n" --backend "$b" "$PROG")
            printf '%s\t%s\t%s\t%s\n' "$ROUND" "ferry $b" "$n" "${s:-fail}" >>"$RESULTS"
            echo "round $ROUND: ferry $b $n ranks: ${s:-fail} s" >&2
        done
        if [ "$WITH_MPI" = 1 ] && [ "$n" -le "$MPI_MAX" ]; then
            s=$(run_one openmpi "$n" "$MPIRUN" "${MPIFLAGS[@]}" -n "$n" "$RAW/startup_mpi")
            printf '%s\t%s\t%s\t%s\n' "$ROUND" "Open MPI" "$n" "${s:-fail}" >>"$RESULTS"
            echo "round $ROUND: Open MPI $n ranks: ${s:-fail} s" >&2
        fi
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$RESULTS" "$OUT" "$PLOT" "$CMDLINE" "$STAMP" "$LOAD_BEFORE" "$LOAD_AFTER" \
    "$(nproc)" "${MPI_VERSION:-}" "$(git -C "$ROOT" rev-parse --short HEAD)" <<'PY'
import os, re, statistics, sys
results, out, plot, cmdline, stamp, load0, load1, cores, mpiver, commit = sys.argv[1:11]
rows = [l.rstrip("\n").split("\t") for l in open(results)][1:]
data = {}
for _, cfg, n, s in rows:
    data.setdefault(cfg, {}).setdefault(int(n), []).append(s)
configs = [c for c in ("ferry tcp", "ferry shm", "Open MPI") if c in data]
counts = sorted({int(r[2]) for r in rows})

def ok(v):
    return [float(x) for x in v if x != "fail"]

def med(cfg, n):
    v = ok(data[cfg].get(n, []))
    return statistics.median(v) if v else None

lines = []
lines.append(f"Measured {stamp} at commit {commit} on {cores} cores shared with other work "
             f"(load average {load0} before, {load1} after), `{cmdline}`"
             + (f", {mpiver}" if mpiver else "") + ".")
lines.append("Seconds from starting the launcher to rank 0 leaving the first barrier, median of "
             "the rounds [fastest-slowest]; per rank in ms; `fail` counts runs that failed.")
lines.append("")
head = "| ranks |" + "".join(f" {c} s | {c} ms/rank |" for c in configs)
if "Open MPI" in data:
    head += " Open MPI / ferry tcp | Open MPI / ferry shm |"
lines.append(head)
lines.append("|" + "---|" * (head.count("|") - 1))
for n in counts:
    cells = [str(n)]
    for c in configs:
        v = data[c].get(n, [])
        good = ok(v)
        fails = len(v) - len(good)
        if good:
            m = statistics.median(good)
            txt = f"{m:.3f} [{min(good):.3f}-{max(good):.3f}]"
            if fails:
                txt += f", {fails} fail"
            cells += [txt, f"{1000 * m / n:.2f}"]
        else:
            cells += [f"{fails} fail", "-"]
    if "Open MPI" in data:
        for c in ("ferry tcp", "ferry shm"):
            a, b = med("Open MPI", n), med(c, n) if c in data else None
            cells.append(f"{a / b:.1f}x" if a and b else "-")
    lines.append("| " + " | ".join(cells) + " |")
lines.append("")
base = 16 if 16 in counts else counts[0]
top = counts[-1]
def best(cfg, n):
    v = ok(data[cfg].get(n, []))
    return min(v) if v else None

for c in ("ferry tcp", "ferry shm"):
    if c in data and med(c, base) and med(c, top):
        r = (med(c, top) / top) / (med(c, base) / base)
        rb = (best(c, top) / top) / (best(c, base) / base)
        lines.append(f"- {c}: per-rank start-up at {top} ranks is {r:.2f}x that at {base} ranks "
                     f"(medians; {rb:.2f}x with the fastest runs).")
lines.append(f"- Plot: [{os.path.basename(plot)}]({os.path.basename(plot)}).")
table = "\n".join(lines)

begin, end = "<!-- startup:begin -->", "<!-- startup:end -->"
text = open(out).read() if os.path.exists(out) else ""
block = f"{begin}\n{table}\n{end}"
if begin in text and end in text:
    text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
else:
    text = text.rstrip("\n") + "\n\n## Start-up time (X8)\n\n" + block + "\n"
open(out, "w").write(text)

# The plot: seconds against ranks, both logarithmic.
import math
W, H, L, R, T, B = 640, 400, 70, 150, 30, 50
ys = [m for c in configs for n in counts for m in [med(c, n)] if m]
lo = 10 ** math.floor(math.log10(min(ys)))
hi = 10 ** math.ceil(math.log10(max(ys)))
x = lambda n: L + (W - L - R) * (math.log2(n) - math.log2(counts[0])) / max(1e-9, math.log2(counts[-1]) - math.log2(counts[0]))
y = lambda s: H - B - (H - T - B) * (math.log10(s) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
colours = {"ferry tcp": "#1f77b4", "ferry shm": "#2ca02c", "Open MPI": "#d62728"}
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{L}" y="18">Launch to first barrier ({stamp}, {cores} cores, median of rounds)</text>']
for n in counts:
    svg.append(f'<line x1="{x(n):.1f}" y1="{T}" x2="{x(n):.1f}" y2="{H - B}" stroke="#ddd"/>')
    svg.append(f'<text x="{x(n):.1f}" y="{H - B + 16}" text-anchor="middle">{n}</text>')
d = lo
while d <= hi * 1.0001:
    svg.append(f'<line x1="{L}" y1="{y(d):.1f}" x2="{W - R}" y2="{y(d):.1f}" stroke="#ddd"/>')
    svg.append(f'<text x="{L - 6}" y="{y(d) + 4:.1f}" text-anchor="end">{d:g} s</text>')
    d *= 10
svg.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">ranks (log scale)</text>')
for i, c in enumerate(configs):
    pts = [(x(n), y(m)) for n in counts for m in [med(c, n)] if m]
    col = colours[c]
    svg.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'
               % (col, " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)))
    for a, b in pts:
        svg.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{col}"/>')
    svg.append(f'<line x1="{W - R + 15}" y1="{T + 20 * i + 10}" x2="{W - R + 40}" y2="{T + 20 * i + 10}" stroke="{col}" stroke-width="2"/>')
    svg.append(f'<text x="{W - R + 46}" y="{T + 20 * i + 14}">{c}</text>')
svg.append("</svg>")
open(plot, "w").write("\n".join(svg) + "\n")
print(table)
PY
echo "startup.sh: raw outputs in $RAW" >&2
