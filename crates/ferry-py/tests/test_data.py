"""The data layer: partitionings, switches, containers as numpy views."""

import numpy as np
import pytest

import ferry
from ferry import Partitioner, Space


def test_block_switch_preserves_values_in_views(comm):
    r, n = comm.rank, comm.size
    space = Space(40)
    a = comm.container(space, name="t-block")
    a.switch(comm.partitioning(space, Partitioner.master()), flow="none")
    if r == 0:
        v = a.local_data()
        v[:] = np.arange(40)
        del v
    a.switch(comm.partitioning(space, Partitioner.block()))
    (f, t), = a.my_ranges()
    (b, _), m = a.mapping(0)
    assert m.tolist()[f[0] - b[0]:t[0] - b[0]] == list(range(f[0], t[0]))
    # A view shares the container's memory: a write shows in the next view.
    m[f[0] - b[0]] = -1.0
    assert a.local_data()[f[0] - b[0]] == -1.0
    del m
    total = comm.allreduce(float(t[0] - f[0]))
    assert total == 40.0


def test_switch_refuses_while_a_view_is_alive(comm):
    space = Space(8)
    a = comm.container(space, name="t-guard")
    p = comm.partitioning(space, Partitioner.all())
    a.switch(p, flow="none")
    v = a.local_data()
    with pytest.raises(BufferError, match="view"):
        a.switch(p)
    del v
    a.switch(p)


def test_reduction_through_a_switch(comm):
    r, n = comm.rank, comm.size
    space = Space(3)
    s = comm.container(space, dtype="int64", name="t-sum")
    s.switch(comm.partitioning(space, Partitioner.all()), flow="none")
    s.fill(r + 1)
    s.switch(comm.partitioning(space, Partitioner.master()), op=ferry.SUM)
    if r == 0:
        assert s.local_data().tolist() == [n * (n + 1) // 2] * 3


def test_two_dimensional_mapping_is_indexed_y_then_x(comm):
    space = Space(6, 4)
    a = comm.container(space, name="t-2d")
    a.switch(comm.partitioning(space, Partitioner.master()), flow="none")
    if comm.rank == 0:
        (b, e), m = a.mapping(0)
        assert (b, e) == ([0, 0], [6, 4]) and m.shape == (4, 6)
        m[:, :] = np.arange(24).reshape(4, 6)
        assert a.local_data()[6 * 2 + 5] == m[2, 5]


def test_weight_function_errors_are_raised(comm):
    def bad(i):
        raise KeyError("weight")

    with pytest.raises(KeyError):
        comm.partitioning(Space(10), Partitioner.block(index_weight=bad))


def test_shrink_and_migrate(comm):
    r, n = comm.rank, comm.size
    if n == 1:
        pytest.skip("needs two ranks")
    space = Space(12)
    tw = comm.partitioning(space, Partitioner.block(task_weight=lambda t: 0.0 if t == 0 else 1.0))
    g = comm.shrink([0])
    assert g.size == n - 1 and g.index_of(0) is None and g.members == list(range(1, n))
    moved = tw.migrate(g)
    assert moved.group.size == n - 1
