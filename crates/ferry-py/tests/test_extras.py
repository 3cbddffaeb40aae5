"""Custom partitioners, the key-value store and resize points from Python."""

import numpy as np
import pytest

import ferry
from ferry import Kvs, Partitioner, Space


def reversed_blocks(space, ntasks, base):
    """Task t owns the t-th block from the end."""
    assert base is None
    n = space.size
    out = []
    for t in range(ntasks):
        k = ntasks - 1 - t
        out.append((t, n * k // ntasks, n * (k + 1) // ntasks))
    return out


def test_a_python_partitioner_decides_who_owns_what(comm):
    r, n = comm.rank, comm.size
    space = Space(30)
    p = comm.partitioning(space, Partitioner.custom("reversed", reversed_blocks))
    k = n - 1 - r
    assert p.ranges_of(comm.group.members[r]) == [([30 * k // n], [30 * (k + 1) // n])]
    # The data follow it: values written under a block partitioning arrive where the Python
    # rule put them.
    a = comm.container(space, dtype="int64", name="t-custom")
    a.switch(comm.partitioning(space, Partitioner.all()), flow="none")
    v = a.local_data()
    v[:] = np.arange(30) * 3
    del v
    a.switch(p)
    (f, t), = a.my_ranges()
    assert a.local_data().tolist() == [3 * i for i in range(f[0], t[0])]


def test_a_derived_python_partitioner_sees_its_base(comm):
    space = Space(12, 4)
    base = comm.partitioning(space, Partitioner.bisection())
    seen = []

    def widen_rows(space, ntasks, base):
        seen.append(base)
        # every task's rows grown by one in y, clipped by the layer
        return [(t, f, (to[0], to[1] + 1), 1) for t, f, to in base]

    p = comm.partitioning(space, Partitioner.custom("rows+1", widen_rows), base=base)
    assert seen and all(len(f) == 2 and len(to) == 2 for _, f, to in seen[0])
    mine = p.ranges_of(comm.group.members[comm.rank])
    own = base.ranges_of(comm.group.members[comm.rank])
    assert [(f, [t[0], min(t[1] + 1, 4)]) for f, t in own] == mine


def test_an_exception_in_a_python_partitioner_is_raised_again(comm):
    def broken(space, ntasks, base):
        raise KeyError("no such layout")

    with pytest.raises(KeyError, match="no such layout"):
        comm.partitioning(Space(5), Partitioner.custom("broken", broken))

    def bad_range(space, ntasks, base):
        return [(0, 0)]

    with pytest.raises(ValueError, match="task, from, to"):
        comm.partitioning(Space(5), Partitioner.custom("bad", bad_range))


def test_kvs_entries_of_every_rank_are_seen_after_sync(comm):
    r, n = comm.rank, comm.size
    kv = Kvs("t-kvs")
    kv.set(f"from-{r}", f"rank {r}")
    kv["shared"] = bytes([r])
    assert "from-0" in kv if r == 0 else "from-0" not in kv
    applied = kv.sync(comm)
    assert applied >= n
    assert kv.keys() == sorted([f"from-{i}" for i in range(n)] + ["shared"])
    assert kv.get("from-0") == b"rank 0"
    # Conflicting writes in one round: the highest rank wins, everywhere the same.
    assert kv["shared"] == bytes([n - 1])
    assert kv.remove(f"from-{r}")
    kv.sync(comm)
    assert kv.keys() == ["shared"] and len(kv) == 1
    assert kv.get("missing") is None
    with pytest.raises(KeyError):
        kv["missing"]
    with pytest.raises(TypeError, match="bytes or str"):
        kv.set("x", 3)


def test_a_resize_point_without_spares_or_removals_changes_nothing(comm):
    r, n = comm.rank, comm.size
    assert comm.join_world() == 0
    assert comm.allow_resize(1) is False
    assert (comm.rank, comm.size, comm.epoch) == (r, n, 0)
    assert comm.previous_group is None
    assert comm.allreduce(1) == n
