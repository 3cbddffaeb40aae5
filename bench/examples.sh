#!/usr/bin/env bash
# Times the example programs on the thesis's evaluation command lines (seed 000 §6.2), on 1, 2
# and 4 ranks for
# every backend (tcp, shm, hybrid = shm within a node + TCP between two "nodes" on this host;
# plus mpi when the examples were built with `--features mpi` and mpirun exists).
#
# Usage: bench/examples.sh [REPS]   (from the repository root; default REPS=3, best-of-REPS)
# Needs: cargo build --release --workspace --bins --examples
# Env:   BACKENDS="tcp shm hybrid"  RANKS="1 2 4"  OUT=file (Markdown table, default stdout)
#        FERRY=path/to/ferry  EX=dir/of/examples (e.g. a separate `--features mpi` build)
#
# Prints a Markdown table (wall seconds of `ferry run`, start-up included, best of REPS) and the
# exact commands, for docs/PERFORMANCE.md. A cell reads FAIL when the run exited non-zero or
# printed nothing (its stderr is kept in $LOGDIR).
set -u
cd "$(dirname "$0")/.." || exit 1
REPS=${1:-3}
BACKENDS=${BACKENDS:-"tcp shm hybrid"}
RANKS=${RANKS:-"1 2 4"}
FERRY=${FERRY:-target/release/ferry}
EX=${EX:-target/release/examples}
LOGDIR=${LOGDIR:-$(mktemp -d /tmp/ferry-bench-examples.XXXXXX)}
mkdir -p "$LOGDIR" || exit 1

# Thesis command line -> command line used here (same program and options). The stencils are
# scaled down to 1-2 s on one rank (the thesis sizes need GBs and minutes on 2 cores); vsum3 runs
# 2 phases instead of 10 (each phase sleeps 1 s by design); the others run as in the thesis.
CASES=(
  "jac1d 125000|jac1d 25000"
  "jac2d 11000|jac2d 5000"
  "jac3d 375|jac3d 250"
  "jac3d -g 375|jac3d -g 250"
  "markov 400 4000|markov 400 4000"
  "markov2 400 4000|markov2 400 4000"
  "markov2 -f 400 4000|markov2 -f 400 4000"
  "propagation2d 40 40|propagation2d 40 40"
  "spmv 5000|spmv 5000"
  "spmv2 150 1500|spmv2 150 1500"
  "vsum 20000000|vsum 20000000"
  "vsum2|vsum2"
  "vsum3|vsum3 2"
)

if [ ! -x "$FERRY" ]; then
  echo "missing $FERRY: run cargo build --release --workspace --bins --examples" >&2
  exit 1
fi

# Hybrid: each rank derives its node from its rank, splitting the ranks into two halves.
HYBRID_WRAP='FERRY_NODE=node$((FERRY_RANK / ((FERRY_SIZE + 1) / 2))) exec "$0" "$@"'

if command -v mpirun >/dev/null 2>&1 && [ -x "$EX/vsum" ] \
   && ! FERRY_BACKEND=mpi timeout 20 "$EX/vsum" 10 2>&1 >/dev/null | grep -q "not available"; then
  BACKENDS="$BACKENDS mpi"
fi

now() { date +%s.%N; }

# run_one BACKEND N PROG ARGS... -> prints seconds or FAIL
run_one() {
  local b=$1 n=$2; shift 2
  local prog=$1; shift
  local log="$LOGDIR/$b-$n-$prog.err" t0 t1 out rc
  t0=$(now)
  case $b in
    mpi) out=$(FERRY_BACKEND=mpi timeout 300 mpirun --allow-run-as-root --oversubscribe -n "$n" "$EX/$prog" "$@" 2>"$log"); rc=$? ;;
    hybrid) out=$(timeout 300 "$FERRY" run -n "$n" --backend hybrid -- sh -c "$HYBRID_WRAP" "$EX/$prog" "$@" 2>"$log"); rc=$? ;;
    *) out=$(timeout 300 "$FERRY" run -n "$n" --backend "$b" -- "$EX/$prog" "$@" 2>"$log"); rc=$? ;;
  esac
  t1=$(now)
  if [ $rc -ne 0 ] || [ -z "$out" ]; then echo FAIL; return; fi
  echo "$t0 $t1" | awk '{printf "%.2f", $2 - $1}'
}

header="| thesis command | run here |"
sep="|---|---|"
for b in $BACKENDS; do for n in $RANKS; do header="$header $b $n |"; sep="$sep---:|"; done; done

emit() {
  echo "Wall time in seconds of \`ferry run -n N --backend B target/release/examples/<command>\`"
  echo "(start-up included), best of $REPS; $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "hybrid = 2 nodes on this host (\`sh -c 'FERRY_NODE=node\$((FERRY_RANK / ((FERRY_SIZE + 1) / 2))) exec \"\$0\" \"\$@\"'\`);"
  echo "mpi (if present) = \`FERRY_BACKEND=mpi mpirun --allow-run-as-root --oversubscribe -n N ...\`."
  echo
  echo "$header"
  echo "$sep"
  for c in "${CASES[@]}"; do
    thesis=${c%%|*}; here=${c#*|}
    row="| \`$thesis\` | \`$here\` |"
    for b in $BACKENDS; do
      for n in $RANKS; do
        best=""
        for _ in $(seq "$REPS"); do
          # shellcheck disable=SC2086
          t=$(run_one "$b" "$n" $here)
          if [ "$t" = FAIL ]; then best=FAIL; break; fi
          if [ -z "$best" ] || awk -v a="$t" -v b="$best" 'BEGIN{exit !(a < b)}'; then best=$t; fi
        done
        row="$row $best |"
      done
    done
    echo "$row"
    echo "$row" >&2
  done
}

if [ -n "${OUT:-}" ]; then emit >"$OUT"; cat "$OUT"; else emit; fi
echo "(stderr of the runs: $LOGDIR)" >&2
