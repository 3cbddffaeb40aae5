#!/usr/bin/env bash
# Cost of communication monitoring (P5): wall time of jac2d, jac3d and markov2 on 4 ranks
# unmonitored, with FERRY_MONITOR=record:DIR and with FERRY_MONITOR=check:DIR (against a
# recording made first), interleaved round by round so that all three modes see the same
# machine load; median of REPS runs per mode and the ratios to the unmonitored median.
#
# Usage: bench/monitor-overhead.sh [REPS]   (from the repository root; default REPS=7)
# Needs: cargo build --release -p ferry-cli -p ferry --examples
# Env:   BACKEND=shm (any of tcp shm hybrid)  RANKS=4  OUT=file (Markdown table, default stdout)
#        FERRY=path/to/ferry  EX=dir/of/examples
#
# Prints a Markdown table for docs/PERFORMANCE.md: per example the median wall seconds of each
# mode (`ferry run`, start-up included), record/off and check/off, and the spread of the
# unmonitored runs ((max - min) / median) as the noise of the machine during the measurement.
set -u
cd "$(dirname "$0")/.." || exit 1
REPS=${1:-7}
BACKEND=${BACKEND:-shm}
RANKS=${RANKS:-4}
FERRY=${FERRY:-target/release/ferry}
EX=${EX:-target/release/examples}
WORK=$(mktemp -d /tmp/ferry-bench-monitor.XXXXXX) || exit 1
trap 'rm -rf "$WORK"' EXIT

# The stencils on the evaluation command lines of bench/examples.sh; markov2 with more states
# and iterations than there (400 states run in 20 ms, all start-up) so that it also takes
# seconds.
CASES=(
  "jac2d 5000"
  "jac3d 250"
  "markov2 200000 10 300"
)

for f in "$FERRY" "$EX/jac2d" "$EX/jac3d" "$EX/markov2"; do
  if [ ! -x "$f" ]; then
    echo "missing $f: run cargo build --release -p ferry-cli -p ferry --examples" >&2
    exit 1
  fi
done

now() { date +%s.%N; }

# run_one MODE CASE REF -> prints seconds, or FAIL
run_one() {
  local mode=$1 case=$2 ref=$3 monitor=""
  case $mode in
    off) monitor="" ;;
    record) monitor="record:$WORK/rec" ;;
    check) monitor="check:$ref,react=abort" ;;
  esac
  rm -rf "$WORK/rec"
  local t0 t1
  t0=$(now)
  # shellcheck disable=SC2086
  if ! FERRY_MONITOR=$monitor "$FERRY" run -n "$RANKS" --backend "$BACKEND" \
      "$EX"/$case >/dev/null 2>"$WORK/err"; then
    echo FAIL
    sed -n 1,5p "$WORK/err" >&2
    return
  fi
  t1=$(now)
  echo "$t0 $t1" | awk '{ printf "%.3f", $2 - $1 }'
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END {
  if (NR == 0) { print "nan"; exit } if (NR % 2) print a[(NR + 1) / 2];
  else printf "%.3f", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
spread() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ a[NR] = $1 } END {
  if (NR < 2) { print "-"; exit } m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2;
  printf "%.1f %%", 100 * (a[NR] - a[1]) / m }'; }

{
  echo "| example (4 ranks, $BACKEND) | off (s) | record (s) | check (s) | record/off | check/off | spread of off runs |"
  echo "|---|---|---|---|---|---|---|"
} >"$WORK/table"

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for case in "${CASES[@]}"; do
  name=${case%% *}
  ref="$WORK/ref-$name"
  # The recording the check mode compares with (not timed).
  # shellcheck disable=SC2086
  if ! FERRY_MONITOR="record:$ref" "$FERRY" run -n "$RANKS" --backend "$BACKEND" \
      "$EX"/$case >/dev/null 2>"$WORK/err"; then
    echo "$case: recording failed:" >&2
    cat "$WORK/err" >&2
    exit 1
  fi
  off="" rec="" chk=""
  for i in $(seq 1 "$REPS"); do
    # Rotate the order each round so that no mode always runs first after a pause.
    case $((i % 3)) in
      0) order="off record check" ;;
      1) order="record check off" ;;
      2) order="check off record" ;;
    esac
    for mode in $order; do
      t=$(run_one "$mode" "$case" "$ref")
      [ "$t" = FAIL ] && { echo "$case $mode: FAIL" >&2; exit 1; }
      case $mode in
        off) off="$off $t" ;;
        record) rec="$rec $t" ;;
        check) chk="$chk $t" ;;
      esac
    done
    echo "$case round $i: off/record/check =$off |$rec |$chk" >&2
  done
  m_off=$(echo "$off" | median)
  m_rec=$(echo "$rec" | median)
  m_chk=$(echo "$chk" | median)
  r_rec=$(awk -v a="$m_rec" -v b="$m_off" 'BEGIN { printf "%.3f", a / b }')
  r_chk=$(awk -v a="$m_chk" -v b="$m_off" 'BEGIN { printf "%.3f", a / b }')
  echo "| $case | $m_off | $m_rec | $m_chk | $r_rec | $r_chk | $(echo "$off" | spread) |" >>"$WORK/table"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

{
  cat "$WORK/table"
  echo
  echo "Median of $REPS interleaved runs per mode; load average before: $load_before, after: $load_after."
} >"${OUT:-/dev/stdout}"
