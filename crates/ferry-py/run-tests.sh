#!/usr/bin/env bash
# The Python package's tests: installs it with pip into a virtual environment (with maturin,
# numpy and pytest), runs the pytest suite as rank 0 of 1 and under the launcher on four ranks
# over tcp and shm, and checks that the Python ports of vsum and jac2d print what the Rust
# examples print. Needs target/release/ferry and the examples
# (`cargo build --release --workspace --bins --examples`).
#
# FERRY_PY_VENV: where the virtual environment goes (default target/ferry-py-venv).
# The package is built with the mpi backend when mpicc and mpirun are installed, and the
# suite then runs under mpirun too (with CI=true, their absence is a failure).
set -euo pipefail
cd "$(dirname "$0")/../.."

mpi=""
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  mpi=1
fi

venv=${FERRY_PY_VENV:-target/ferry-py-venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
"$py" -m pip install -q --upgrade pip
"$py" -m pip install -q maturin numpy pytest
MATURIN_PEP517_ARGS="${mpi:+--features mpi}" \
  "$py" -m pip install -q --force-reinstall --no-deps ./crates/ferry-py

ferry=target/release/ferry
failed=0

"$py" -m pytest -x -q -p no:cacheprovider crates/ferry-py/tests || failed=1
for backend in tcp shm; do
  echo "ferry-py: pytest on 4 ranks over $backend"
  timeout 600 "$ferry" run -n 4 --backend "$backend" \
    "$py" -m pytest -x -q -p no:cacheprovider crates/ferry-py/tests || failed=1
done

if [ -n "$mpi" ]; then
  echo "ferry-py: pytest on 4 ranks over mpi (mpirun)"
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 FERRY_BACKEND=mpi timeout 600 \
    mpirun --allow-run-as-root --oversubscribe -n 4 \
    "$py" -m pytest -x -q -p no:cacheprovider crates/ferry-py/tests || failed=1
elif [ "${CI:-}" = true ]; then
  echo "FAIL ferry-py: no mpicc/mpirun, the mpi backend is not tested"
  failed=1
else
  echo "SKIPPED ferry-py over mpi: no mpicc/mpirun"
fi

# A peer that dies: the survivor's receive raises FerryError naming rank, peer and cause.
for backend in tcp shm; do
  got=$(timeout 120 "$ferry" run -n 2 --keep-going --backend "$backend" \
    "$py" crates/ferry-py/tests/peer_failure.py 2>/dev/null || true)
  if grep -q "^caught kind=PeerFailed rank=0 peer=1 " <<<"$got"; then
    echo "ok   python peer failure ($backend)"
  else
    echo "FAIL python peer failure ($backend): $got"
    failed=1
  fi
done

# A spare joins at a resize point: the grown world includes it, on every rank.
for backend in tcp shm; do
  got=$(timeout 120 "$ferry" run -n 2 --spares 1 --job-name "ferry-py-el-$$-$backend" \
    --backend "$backend" "$py" crates/ferry-py/tests/elastic.py 2>&1 || true)
  if grep -q "^world 2 -> 3, epoch 1, members \[0, 1, 2\]$" <<<"$got"; then
    echo "ok   python resize point admits a spare ($backend)"
  else
    echo "FAIL python resize point admits a spare ($backend): $got"
    failed=1
  fi
done

# name ranks compare args: the Python port must print what the Rust example prints.
cases=(
  "vsum 1 exact 100"
  "vsum 1 exact"
  "vsum 3 sorted 100"
  "vsum 4 sorted 100"
  "jac2d 1 exact -s 100"
  "jac2d 4 exact -s 100"
  "jac2d 4 exact -s -n 100"
  "jac2d 2 exact 200 20"
  "jac2d 4 exact -s 1000"
)
out=$(mktemp -d "${TMPDIR:-/tmp}/ferry-py.XXXXXX")
trap 'rm -rf "$out"' EXIT
for c in "${cases[@]}"; do
  read -r name ranks mode args <<<"$c"
  for backend in tcp shm; do
    [ "$ranks" = 1 ] && [ "$backend" = shm ] && continue
    # shellcheck disable=SC2086
    timeout 600 "$ferry" run -n "$ranks" --backend "$backend" \
      "$py" "examples/python/$name.py" $args >"$out/py" || { echo "FAIL $c ($backend): exit $?"; failed=1; continue; }
    # shellcheck disable=SC2086
    timeout 600 "$ferry" run -n "$ranks" --backend "$backend" \
      "target/release/examples/$name" $args >"$out/rs"
    if [ "$mode" = sorted ]; then
      sort -o "$out/py" "$out/py"
      sort -o "$out/rs" "$out/rs"
    fi
    if cmp -s "$out/py" "$out/rs"; then
      echo "ok   python $c ($backend)"
    else
      echo "FAIL python $c ($backend): output differs from the Rust example"
      diff "$out/py" "$out/rs" | head -10
      failed=1
    fi
  done
done
exit $failed
