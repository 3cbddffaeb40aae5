#!/usr/bin/env bash
# Allreduce from Python against Rust and against mpi4py over Open MPI, in ONE invocation:
# every round runs, back to back on the same machine load, the Rust benchmark
# (crates/ferry/examples/osu_allreduce), the Python one over ferry's package, the Python one
# over Debian's mpi4py (/usr/bin/python3, python3-mpi4py) under mpirun and, for scale, the C one
# over Open MPI (bench/c/osu_allreduce.c), for 8 B and 1 MiB, per backend (ferry --backend B
# against Open MPI's matching BTLs). Writes the table into
# docs/PERFORMANCE.md between <!-- python-allreduce:begin --> and <!-- python-allreduce:end -->.
#
# Usage: bench/python-allreduce.sh [-r RUNS] [-n RANKS] [-b BACKENDS] [-p PYTHON] [-o FILE]
#   -r RUNS      rounds (default 5); figure = best of the rounds, median in parentheses
#   -n RANKS     ranks (default 2: the machine has 2 cores)
#   -b LIST      comma-separated subset of shm,tcp (default both)
#   -p PYTHON    interpreter with ferry's package installed (default python3)
#   -o FILE      markdown file to update (default docs/PERFORMANCE.md)
# Needs target/release/ferry and the osu_allreduce example
# (cargo build --release -p ferry-cli --bin ferry -p ferry --example osu_allreduce), the
# package (python3 -m pip install ./crates/ferry-py) and python3-mpi4py with numpy for
# /usr/bin/python3 (installed with apt-get when missing).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=5
RANKS=2
BACKENDS=shm,tcp
PY=python3
OUT="$ROOT/docs/PERFORMANCE.md"
while getopts "r:n:b:p:o:h" opt; do
    case $opt in
        r) RUNS=$OPTARG ;;
        n) RANKS=$OPTARG ;;
        b) BACKENDS=$OPTARG ;;
        p) PY=$OPTARG ;;
        o) OUT=$OPTARG ;;
        *) sed -n '2,20p' "$0"; exit 2 ;;
    esac
done
CMDLINE="bench/python-allreduce.sh $*"
if ! /usr/bin/python3 -c "import mpi4py, numpy" 2>/dev/null; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get install -y -qq python3-mpi4py python3-numpy
fi
"$PY" -c "import ferry" || { echo "python-allreduce: $PY cannot import ferry (pip install ./crates/ferry-py)" >&2; exit 1; }

FERRY="$ROOT/target/release/ferry"
EX="$ROOT/target/release/examples"
MPIFLAGS=()
[ "$(id -u)" = 0 ] && MPIFLAGS+=(--allow-run-as-root --oversubscribe)
RAW="$ROOT/target/bench-python/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$RAW"
MPICC=mpicc
command -v mpicc.openmpi >/dev/null && MPICC=mpicc.openmpi
"$MPICC" -O2 -o "$RAW/c_osu_allreduce" "$ROOT/bench/c/osu_allreduce.c"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

for ((r = 1; r <= RUNS; r++)); do
    for b in ${BACKENDS//,/ }; do
        case $b in
            shm) OMPI=(--mca pml ob1 --mca btl self,vader) ;;
            tcp) OMPI=(--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo) ;;
            *) echo "python-allreduce: unknown backend $b" >&2; exit 2 ;;
        esac
        echo "round $r/$RUNS: $b" >&2
        for m in 8:8 1048576:1048576; do
            timeout 300 "$FERRY" run -n "$RANKS" --backend "$b" -- "$EX/osu_allreduce" -m "$m"
        done >"$RAW/rust_${b}_$r"
        timeout 300 "$FERRY" run -n "$RANKS" --backend "$b" -- \
            "$PY" "$ROOT/bench/python_allreduce.py" ferry >"$RAW/pyferry_${b}_$r"
        timeout 300 mpirun "${MPIFLAGS[@]}" -np "$RANKS" "${OMPI[@]}" \
            /usr/bin/python3 "$ROOT/bench/python_allreduce.py" mpi4py >"$RAW/mpi4py_${b}_$r"
        timeout 300 mpirun "${MPIFLAGS[@]}" -np "$RANKS" "${OMPI[@]}" \
            "$RAW/c_osu_allreduce" -m 1048576 >"$RAW/c_${b}_$r"
    done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$RAW" "$OUT" "$RUNS" "$RANKS" "$BACKENDS" "$CMDLINE" "$LOAD_BEFORE" "$LOAD_AFTER" <<'PYEOF'
import glob, os, re, statistics, sys, time
raw, out, runs, ranks, backends, cmdline, before, after = sys.argv[1:]
def figures(path):
    d = {}
    for line in open(path):
        m = re.match(r"^(\d+|object)\s+([\d.]+)\s*$", line)
        if m:
            d[m.group(1)] = float(m.group(2))
    return d
def cell(vals):
    if not vals:
        return "-"
    f = lambda v: f"{v:.3g}" if v < 100 else f"{v:.0f}"
    return f"{f(min(vals))} ({f(statistics.median(vals))})"
rows = []
for b in backends.split(","):
    for size, label in (("8", "8 B"), ("1048576", "1 MiB"), ("object", "one float, value API")):
        got = {}
        for impl in ("rust", "pyferry", "mpi4py", "c"):
            got[impl] = [figures(p).get(size) for p in sorted(glob.glob(f"{raw}/{impl}_{b}_*"))]
            got[impl] = [v for v in got[impl] if v is not None]
        best = {k: min(v) if v else None for k, v in got.items()}
        ratio = lambda a, c: f"{best[a] / best[c]:.2f}x" if best[a] and best[c] else "-"
        rows.append(f"| {b} allreduce {label}, {ranks} ranks | {cell(got['rust'])} | {cell(got['pyferry'])} | {cell(got['mpi4py'])} | {cell(got['c'])} | {ratio('pyferry', 'rust')} | {ratio('pyferry', 'mpi4py')} | {ratio('mpi4py', 'c')} |")
stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
table = f"""Generated {stamp} by `{cmdline.strip()}` ({runs} rounds, the four interleaved in each round; load average before {before}, after {after}). Figures in microseconds: best of the rounds (median in parentheses); lower is better. Raw outputs: `{os.path.relpath(raw, os.path.dirname(os.path.dirname(os.path.abspath(out))))}`.

| figure | Rust ferry | Python ferry | Python mpi4py | C Open MPI | ferry: Python / Rust | Python: ferry / mpi4py | Open MPI: Python / C |
|---|---|---|---|---|---|---|---|
""" + "\n".join(rows) + "\n"
text = open(out).read()
begin, end = "<!-- python-allreduce:begin -->", "<!-- python-allreduce:end -->"
if begin not in text:
    sys.exit(f"python-allreduce: {out} has no {begin} marker")
pre, rest = text.split(begin, 1)
_, post = rest.split(end, 1)
open(out, "w").write(pre + begin + "\n" + table + end + post)
print(table)
PYEOF
