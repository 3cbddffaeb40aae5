"""Point-to-point messages and collectives on numpy arrays."""

import os

import numpy as np
import pytest

import ferry

DTYPES = [np.float64, np.float32, np.int64, np.int32, np.int16, np.int8, np.uint64,
          np.uint32, np.uint16, np.uint8]


def _from_launcher(ferry_name, mpi_name, default):
    """What `ferry run` (FERRY_*) or Open MPI's mpirun (OMPI_COMM_WORLD_*) told the process."""
    return int(os.environ.get(ferry_name, os.environ.get(mpi_name, default)))


def test_rank_and_size_come_from_the_launcher(comm):
    assert comm.size == _from_launcher("FERRY_SIZE", "OMPI_COMM_WORLD_SIZE", "1")
    assert comm.rank == _from_launcher("FERRY_RANK", "OMPI_COMM_WORLD_RANK", "0")
    assert 0 <= comm.rank < comm.size


@pytest.mark.parametrize("dtype", DTYPES)
def test_ring_shift_with_sendrecv(comm, dtype):
    r, n = comm.rank, comm.size
    send = np.full(5, r % 100, dtype=dtype)
    recv = np.zeros(5, dtype=dtype)
    out = comm.sendrecv(send, (r + 1) % n, recv, (r - 1) % n, tag=3)
    assert out is recv
    assert (recv == (r - 1) % n % 100).all()


def test_send_and_receive_into_a_buffer_and_as_a_new_array(comm):
    r, n = comm.rank, comm.size
    if n == 1:
        pytest.skip("needs two ranks")
    if r == 0:
        comm.send(np.arange(6, dtype=np.int32).reshape(2, 3), 1, tag=1)
        comm.send(np.linspace(0, 1, 4), 1, tag=2)
    elif r == 1:
        buf = np.empty((2, 3), dtype=np.int32)
        assert comm.recv(0, tag=1, buf=buf) is buf
        assert buf.tolist() == [[0, 1, 2], [3, 4, 5]]
        got = comm.recv(0, tag=2)
        assert got.dtype == np.float64 and got.tolist() == [0, 1 / 3, 2 / 3, 1]
    comm.barrier()


@pytest.mark.parametrize("op,expect", [
    (ferry.SUM, lambda n: n * (n + 1) // 2),
    (ferry.PROD, lambda n: int(np.prod(np.arange(1, n + 1)))),
    (ferry.MIN, lambda n: 1),
    (ferry.MAX, lambda n: n),
])
def test_allreduce_ops_on_arrays_and_scalars(comm, op, expect):
    r, n = comm.rank, comm.size
    x = np.full(4, r + 1, dtype=np.int64)
    y = comm.allreduce(x, op=op)
    assert y is not x and (x == r + 1).all(), "without out, x is left alone"
    assert (y == expect(n)).all()
    assert comm.allreduce(r + 1, op=op) == expect(n)
    assert comm.allreduce(float(r + 1), op=op) == float(expect(n))


def test_allreduce_in_place_does_not_copy(comm):
    x = np.full(1 << 16, 1.0)
    before = x.__array_interface__["data"][0]
    out = comm.allreduce(x, out=x)
    assert out is x and x.__array_interface__["data"][0] == before
    assert (x == comm.size).all()


def test_ordered_allreduce_is_the_rank_ordered_fold(comm):
    r, n = comm.rank, comm.size
    # On 4 ranks the left fold ((0 + 0.1) + 0.2) + 0.3 and the pairwise (0 + 0.1) + (0.2 + 0.3)
    # differ in the last bit, so an unordered algorithm would not pass.
    got = comm.allreduce(0.1 * r, ordered=True)
    want = 0.0
    for k in range(n):
        want += 0.1 * k
    assert got == want


def test_bcast_and_reduce(comm):
    r, n = comm.rank, comm.size
    root = n - 1
    x = np.arange(3, dtype=np.float32) * (r + 1)
    comm.bcast(x, root=root)
    assert x.tolist() == (np.arange(3, dtype=np.float32) * n).tolist()
    assert comm.bcast(r * 7, root=root) == root * 7
    y = np.array([r, 2 * r], dtype=np.int32)
    comm.reduce(y, root=0, op=ferry.SUM)
    s = n * (n - 1) // 2
    assert y.tolist() == ([s, 2 * s] if r == 0 else [r, 2 * r])


def test_gather_family(comm):
    r, n = comm.rank, comm.size
    g = comm.gather(np.array([r, 10 * r], dtype=np.uint16), root=0)
    if r == 0:
        assert g.shape == (n, 2) and g[:, 1].tolist() == [10 * k for k in range(n)]
    else:
        assert g is None
    ag = comm.allgather(np.array([r], dtype=np.int64))
    assert ag.ravel().tolist() == list(range(n))
    out = np.empty(n, dtype=np.int64)
    assert comm.allgather(np.array([r], dtype=np.int64), out=out) is out
    send = np.arange(2 * n, dtype=np.float64) if r == 0 else None
    recv = np.empty(2)
    comm.scatter(send, recv, root=0)
    assert recv.tolist() == [2 * r, 2 * r + 1]
    a = comm.alltoall(np.arange(n, dtype=np.int32) + 100 * r)
    assert a.tolist() == [100 * k + r for k in range(n)]


def test_bad_destination_raises_naming_rank_and_operation(comm):
    with pytest.raises(ferry.FerryError) as e:
        comm.send(np.zeros(2), comm.size + 3)
    assert e.value.rank == comm.rank
    assert e.value.op == "send" and e.value.kind == "InvalidArgument"
    assert f"rank {comm.rank}" in str(e.value) and "out of range" in str(e.value)


def test_wrong_length_receive_raises_on_the_receiver(comm):
    r, n = comm.rank, comm.size
    if n == 1:
        pytest.skip("needs two ranks")
    if r == 0:
        comm.send(np.zeros(3), 1, tag=11)
    elif r == 1:
        with pytest.raises(ferry.FerryError) as e:
            comm.recv(0, tag=11, buf=np.zeros(2))
        # Every backend names both lengths (the mpi backend's receives never truncate).
        text = str(e.value)
        assert "rank 1" in text
        assert "24 bytes" in text and "16" in text, text
    comm.barrier()


def test_arrays_that_cannot_be_used_in_place_are_refused(comm):
    with pytest.raises(ValueError, match="contiguous"):
        comm.allreduce(np.zeros((4, 4))[:, 1], out=np.zeros((4, 4))[:, 1])
    with pytest.raises(TypeError, match="numpy array"):
        comm.send(np.array(["a"], dtype=object), 0)
    with pytest.raises(TypeError):
        comm.allreduce("text")
    with pytest.raises(ValueError, match="unknown reduction"):
        comm.allreduce(1.0, op="avg")
