"""jac2d: 2d Jacobi with a 5-point stencil, the Python port of the Rust example.

Usage: ``ferry run -n N python3 jac2d.py [options] [side [maxiter [repart]]]`` (defaults 2500
and 50; repart is only echoed). Options (only the second character counts): ``-n`` halo
without corners, ``-s`` print the value sum at the end, ``-r`` reserve memory for both
partitionings, ``-p`` profiling into ``jac2d_profiling.txt``, ``-h`` usage; ``-e`` and ``-a``
(precomputed transitions in the Rust version) are accepted and change nothing here, as they
change no printed number there. Prints what ``target/release/examples/jac2d`` prints: writes
use the bisection partitioning, reads its (corner) halo of depth 1, the residuum is summed in
rank order every 10 iterations. The stencil runs on numpy views of the containers, combining
in the Rust loop's order, so every digit agrees.
"""

import re
import sys
import time

import numpy as np

import ferry
from ferry import Partitioner, Space

USAGE = """Usage: jac2d [options] [<side> [<maxiter> [<repart>]]]

Options:
 -n : use halo partitioner without corners
 -p : write profiling data to 'jac2d_profiling.txt'
 -s : print value sum at end (warning: sum done at master)
 -r : reserve memory for both partitionings before the loop
 -e : pre-calculate transitions
 -a : pre-calculate action sequences
 -h : print this help text and exit
"""


def atoi(s):
    """C atoi: optional whitespace and sign, then digits; anything else gives 0."""
    m = re.match(r"\s*([+-]?\d+)", s)
    return int(m.group(1)) if m else 0


def set_boundary(c, size):
    """Boundary values in the order the Rust example applies them (columns win at corners)."""
    if c.num_mappings() == 0:
        return
    (f, t) = c.my_ranges()[0]
    (b, _), v = c.mapping(0)
    xs = slice(f[0] - b[0], t[0] - b[0])
    ys = slice(f[1] - b[1], t[1] - b[1])
    if f[1] <= 0 < t[1]:
        v[0 - b[1], xs] = -5.0
    if f[1] <= size - 1 < t[1]:
        v[size - 1 - b[1], xs] = 10.0
    if f[0] <= 0 < t[0]:
        v[ys, 0 - b[0]] = -10.0
    if f[0] <= size - 1 < t[0]:
        v[ys, size - 1 - b[0]] = 5.0


def step(rd, wr, size, with_res):
    """One sweep from rd into wr; the residuum (sum of squared changes) if asked."""
    if wr.num_mappings() == 0:
        return 0.0
    (wf, wt) = wr.my_ranges()[0]
    (rb, _), r = rd.mapping(0)
    (wb, _), w = wr.mapping(0)
    x0, x1 = max(wf[0], 1), min(wt[0], size - 1)
    y0, y1 = max(wf[1], 1), min(wt[1], size - 1)
    if x0 >= x1 or y0 >= y1:
        return 0.0

    def rv(dy, dx):
        return r[y0 + dy - rb[1] : y1 + dy - rb[1], x0 + dx - rb[0] : x1 + dx - rb[0]]

    nv = 0.25 * (((rv(-1, 0) + rv(0, -1)) + rv(0, 1)) + rv(1, 0))
    w[y0 - wb[1] : y1 - wb[1], x0 - wb[0] : x1 - wb[0]] = nv
    if not with_res:
        return 0.0
    d = rv(0, 0) - nv
    # A running sum row by row, x fastest: the Rust loop's order, so the same bits.
    return float(np.cumsum((d * d).ravel())[-1])


def main():
    args = sys.argv[1:]
    opts = set()
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if len(args[i]) > 1:
            opts.add(args[i][1])
        if "h" in opts:
            sys.stdout.write(USAGE)
            sys.stdout.flush()
            sys.exit(1)
        i += 1
    pos = [atoi(a) for a in args[i : i + 3]] + [0, 0, 0]
    size = pos[0] if pos[0] > 0 else 2500
    maxiter = pos[1] if pos[1] > 0 else 50
    repart = pos[2]
    if size > 1 << 20:
        raise SystemExit(f"jac2d: error: side length {size} is too large")

    comm = ferry.init()
    rank, nprocs = comm.rank, comm.size
    if rank == 0:
        h = (
            f"{size} x {size} cells (mem {0.000016 * size * size:.1f} MB), "
            f"running {maxiter} iterations with {nprocs} tasks"
        )
        if "n" in opts:
            h += " (halo without corners)"
        if repart > 0:
            h += f"\n  with repartitioning every {repart} iterations\n"
        print(h)
    start = time.monotonic()
    space = Space(size, size)
    pwrite = comm.partitioning(space, Partitioner.bisection())
    halo = Partitioner.halo(1) if "n" in opts else Partitioner.corner_halo(1)
    pread = comm.partitioning(space, halo, base=pwrite)

    rd = comm.container(space, name="data1")
    wr = comm.container(space, name="data2")
    for c in (rd, wr):
        # Write and read partitionings share one placement: the switch only moves halos.
        c.share_layout(pwrite, pread)
        if "r" in opts:
            c.reserve([pwrite, pread])
        c.switch(pwrite, flow="none")

    if rd.num_mappings() > 0:
        (f, t) = rd.my_ranges()[0]
        (b, _), v = rd.mapping(0)
        ys = np.arange(f[1], t[1])[:, None]
        xs = np.arange(f[0], t[0])[None, :]
        v[f[1] - b[1] : t[1] - b[1], f[0] - b[0] : t[0] - b[0]] = ((xs + ys) & 6).astype(
            np.float64
        )
        del v
    set_boundary(rd, size)

    comm_time = 0.0
    it = 0
    while it < maxiter:
        c0 = time.monotonic()
        rd.switch(pread)
        wr.switch(pwrite, flow="none")
        comm_time += time.monotonic() - c0
        set_boundary(wr, size)
        with_res = it % 10 == 0
        res = step(rd, wr, size, with_res)
        rd, wr = wr, rd
        if with_res:
            c0 = time.monotonic()
            res = comm.allreduce(res, op=ferry.SUM, ordered=True)
            comm_time += time.monotonic() - c0
            if rank == 0:
                print(f"Residuum after {it + 1:2d} iters: {res:.6f}")
            if res < 0.001:
                break
        it += 1

    if "s" in opts:
        rd.switch(comm.partitioning(space, Partitioner.master()))
        if rank == 0:
            _, m = rd.mapping(0)
            s = float(np.cumsum(m[0:size, 0:size].ravel())[-1])
            del m
            print(f"Global value sum after {it} iterations: {s:.6f}")
    if "p" in opts:
        with open("jac2d_profiling.txt", "a") as f:
            f.write(
                f"rank {rank}: {it} iterations, total {time.monotonic() - start:.6f} s, "
                f"switches and reductions {comm_time:.6f} s\n"
            )
    comm.finish()


if __name__ == "__main__":
    try:
        main()
    except ferry.FerryError as e:
        sys.stdout.flush()
        print(f"jac2d: error: {e}", file=sys.stderr)
        sys.exit(1)
