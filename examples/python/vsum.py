"""vsum: vector sum under changing partitionings, the Python port of the Rust example.

Usage: ``ferry run -n N python3 vsum.py [size]`` (default 1000000; C atoi semantics). Prints
what ``target/release/examples/vsum`` prints: the master fills ``a[i] = i``; the array is
switched (data preserved) through equal blocks, index-weighted blocks and task-weighted
blocks (task 0 weight 0), the last one migrated to the group without rank 0; every rank
prints its four partial sums, and a 4-element container switched from All to Master with a
sum gives the totals.
"""

import re
import sys

import numpy as np

import ferry
from ferry import Partitioner, Space


def atoi(s):
    """C atoi: optional whitespace and sign, then digits; anything else gives 0."""
    m = re.match(r"\s*([+-]?\d+)", s)
    return int(m.group(1)) if m else 0


def local_sum(c):
    """Sum of this rank's elements, range by range."""
    s = 0.0
    for no in range(len(c.my_ranges())):
        (frm, to), m = c.range_mapping(no)
        (base, _), view = c.mapping(m)
        off = frm[0] - base[0]
        s += float(np.sum(view[off : off + to[0] - frm[0]]))
    return s


def main():
    size = atoi(sys.argv[1]) if len(sys.argv) > 1 else 0
    if size <= 0:
        size = 1_000_000
    comm = ferry.init()
    rank, nprocs = comm.rank, comm.size
    space = Space(size)

    a = comm.container(space, name="array")
    a.switch(comm.partitioning(space, Partitioner.master()), flow="none")
    if rank == 0:
        data = a.local_data()
        data[:] = np.arange(len(data), dtype=np.float64)
        del data
    s0 = local_sum(a)

    a.switch(comm.partitioning(space, Partitioner.block()))
    s1 = local_sum(a)

    a.switch(comm.partitioning(space, Partitioner.block(index_weight=float)))
    s2 = local_sum(a)

    if nprocs > 1:
        tw = comm.partitioning(
            space, Partitioner.block(task_weight=lambda t: 0.0 if t == 0 else 1.0)
        )
        a.switch(tw)
        local_sum(a)
        shrinked = comm.shrink([0])
        a.switch(tw.migrate(shrinked))
        idx = shrinked.index_of(rank)
        my_id = -1 if idx is None else idx
        print(f"My world ID {rank}, in shrinked group: {my_id}")
        s3 = local_sum(a) if my_id >= 0 else 0.0
    else:
        s3 = s0
    print(f"Id {rank}: partitial sums {s0:.0f}, {s1:.0f}, {s2:.0f}, {s3:.0f}")

    sspace = Space(4)
    sums = comm.container(sspace, name="sums")
    sums.switch(comm.partitioning(sspace, Partitioner.all()), flow="none")
    data = sums.local_data()
    data[:] = [s0, s1, s2, s3]
    del data
    sums.switch(comm.partitioning(sspace, Partitioner.master()), op=ferry.SUM)
    if rank == 0:
        v = sums.local_data()
        print(f"Total sums: {v[0]:.0f}, {v[1]:.0f}, {v[2]:.0f}, {v[3]:.0f}")
        del v
    comm.finish()


if __name__ == "__main__":
    try:
        main()
    except ferry.FerryError as e:
        sys.stdout.flush()
        print(f"vsum: error: {e}", file=sys.stderr)
        sys.exit(1)
