#!/bin/sh
# Builds LAIK's own example and test programs from a LAIK checkout against ferry's laik.h,
# exactly as docs/C-API.md says a LAIK program is built, and judges them with the
# conformance cases (the same runner and compare modes as the Rust examples).
#
#   crates/ferry-c/laik-sources.sh LAIK_CHECKOUT [PROGRAM ...]
#
# PROGRAM defaults to every LAIK program the conformance cases name, plus the test programs of
# LAIK's tests/src that have no cases (anytest, locationtest: they must build; run them by
# hand, locationtest on 4 processes, anytest prints one result line). The repository carries
# no LAIK code; this script only reads the checkout it is given. Needs cc, cargo and
# ../shared/conformance next to the repository. Knobs of the runner
# (crates/ferry/tests/conformance.rs) pass through, e.g. FERRY_CONFORMANCE_BACKENDS=tcp,shm.
set -eu
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 LAIK_CHECKOUT [PROGRAM ...]" >&2
    exit 2
fi
laik=$(cd "$1" && pwd)
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
programs=${*:-"vsum vsum2 vsum3 jac1d jac2d jac3d markov markov2 propagation2d spmv spmv2 ping_pong resize kvstest spacestest anytest locationtest"}

cargo build --release -p ferry-c -p ferry-cli
out=$(mktemp -d "${TMPDIR:-/tmp}/laik-sources.XXXXXX")
trap 'rm -rf "$out"' EXIT
built=0
failed=""
for p in $programs; do
    src=""
    for dir in examples tests/src tests; do
        if [ -f "$laik/$dir/$p.c" ]; then src="$laik/$dir/$p.c"; break; fi
    done
    if [ -z "$src" ]; then
        echo "laik-sources: $p.c not in $laik/examples or $laik/tests" >&2
        failed="$failed $p"
        continue
    fi
    if cc -I crates/ferry-c/include "$src" -L target/release -lferry -lm -o "$out/$p"; then
        built=$((built + 1))
    else
        echo "laik-sources: $src does not compile against crates/ferry-c/include/laik.h" >&2
        failed="$failed $p"
    fi
done
echo "laik-sources: $built programs built${failed:+, not built:$failed}"
[ "$built" -gt 0 ] || exit 1
# programs without conformance cases (anytest, locationtest) are only built
cases="$root/../shared/conformance/cases.tsv"
judged=0
for f in "$out"/*; do
    if awk -F'\t' -v p="$(basename "$f")" '$2 == p { found = 1 } END { exit !found }' "$cases"; then
        judged=$((judged + 1))
    fi
done
if [ "$judged" -eq 0 ]; then
    echo "laik-sources: none of the built programs has conformance cases"
    [ -z "$failed" ]
    exit
fi

LD_LIBRARY_PATH="$root/target/release${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
FERRY_CONFORMANCE_EXAMPLES="$out" \
FERRY_CONFORMANCE_BACKENDS="${FERRY_CONFORMANCE_BACKENDS:-tcp,shm,hybrid}" \
    cargo test --release -p ferry --test conformance -- --nocapture
[ -z "$failed" ]
