"""Virtual topologies (X6): Cartesian grids, periodic or not, and distributed graphs, with
neighbour allgather and all-to-all, against hand-computed neighbours.

A topology stays on the session's communicator once declared (collectives then keep to the
grid's chain; results do not change), so this file runs after the others (pytest takes the
files in name order)."""

import numpy as np
import pytest


def _grid_1d(r, n, periodic):
    """Behind and ahead of rank r on a line of n ranks (None past an open end)."""
    if periodic:
        return [(r - 1) % n, (r + 1) % n]
    return [r - 1 if r > 0 else None, r + 1 if r + 1 < n else None]


# A 2 x 2 grid, ranks row-major (0 1 / 2 3); per rank: coordinates, then dimension 0 behind,
# ahead, dimension 1 behind, ahead. Rows wrap (extent 2: both neighbours are the other row),
# columns open.
GRID_2X2_ROWS_WRAP = {
    0: ((0, 0), [2, 2, None, 1]),
    1: ((0, 1), [3, 3, 0, None]),
    2: ((1, 0), [0, 0, None, 3]),
    3: ((1, 1), [1, 1, 2, None]),
}


def _alltoall_expected(slots):
    """Neighbour j in slot s sent its block for the slot in which it sees this rank (behind
    <-> ahead): 10 j + (s ^ 1)."""
    return [None if j is None else 10 * j + (s ^ 1) for s, j in enumerate(slots)]


def _as_values(blocks):
    return [None if b is None else int(b[0]) for b in blocks]


@pytest.mark.parametrize("periodic", [False, True])
def test_a_line_shifts_and_exchanges_with_its_two_neighbours(comm, periodic):
    r, n = comm.rank, comm.size
    comm.set_cartesian([n], [periodic])
    assert comm.cart_coords() == [r]
    want = _grid_1d(r, n, periodic)
    assert comm.cart_shift(0, 1) == (want[0], want[1])
    got = comm.neighbor_allgather(np.array([r, -r], dtype=np.int64))
    assert _as_values(got) == want
    for b, j in zip(got, want):
        if b is not None:
            assert b.tolist() == [j, -j] and b.dtype == np.int64
    blocks = [np.array([10 * r + k], dtype=np.int32) for k in range(2)]
    assert _as_values(comm.neighbor_alltoall(blocks)) == _alltoall_expected(want)


def test_a_2x2_grid_with_one_periodic_dimension(comm):
    r, n = comm.rank, comm.size
    if n != 4:
        pytest.skip("needs four ranks")
    comm.set_cartesian([2, 2], [True, False])
    coords, slots = GRID_2X2_ROWS_WRAP[r]
    assert tuple(comm.cart_coords()) == coords
    assert comm.cart_shift(0, 1) == (slots[0], slots[1])
    assert comm.cart_shift(1, 1) == (slots[2], slots[3])
    assert _as_values(comm.neighbor_allgather(np.array([r], dtype=np.float64))) == slots
    blocks = [np.array([10 * r + k], dtype=np.int64) for k in range(4)]
    assert _as_values(comm.neighbor_alltoall(blocks)) == _alltoall_expected(slots)


def test_a_directed_ring_as_a_graph(comm):
    r, n = comm.rank, comm.size
    comm.set_graph([(r - 1) % n], [(r + 1) % n])
    got = comm.neighbor_allgather(np.array([r], dtype=np.int32))
    assert _as_values(got) == [(r - 1) % n]
    got = comm.neighbor_alltoall([np.array([100 + r], dtype=np.int32)])
    assert _as_values(got) == [100 + (r - 1) % n]


def test_bad_topologies_are_errors(comm):
    n = comm.size
    with pytest.raises(Exception, match="grid|size|extent"):
        comm.set_cartesian([n + 1], [False])
    with pytest.raises(Exception):
        comm.cart_shift(5, 1)
