"""Allreduce latency from Python, OSU methodology, for ferry's package or mpi4py.

Usage:
  ferry run -n N python3 bench/python_allreduce.py ferry [SIZE ...]
  mpirun -n N /usr/bin/python3 bench/python_allreduce.py mpi4py [SIZE ...]

Per size in bytes (default 8 and 1048576): float32 sums, 200 warm-up + 1000 timed calls up to
8 KiB and 10 + 100 above; only the allreduce is timed and a barrier separates the calls; the
figure is the mean over ranks of each rank's mean time (as crates/ferry/examples/osu_allreduce
and bench/c/osu_allreduce.c). ferry's call is in place (`allreduce(buf, out=buf)`), the input
restored outside the timed region as the Rust benchmark does; mpi4py's is out of place on
numpy buffers (`Allreduce(x, y)`), as MPI programs call it. A last line `object` times one
Python float through each package's value API (`comm.allreduce(1.0)`: ferry reduces a double,
mpi4py pickles the object). Each result is checked once, untimed.
"""

import sys
import time

import numpy as np

LARGE = 8192


def main():
    impl = sys.argv[1] if len(sys.argv) > 1 else "ferry"
    sizes = [int(s) for s in sys.argv[2:]] or [8, 1 << 20]
    if impl == "ferry":
        import ferry

        comm = ferry.init()
        rank, nranks = comm.rank, comm.size
        backend = comm.backend

        def reduce_buf(x, y):
            comm.allreduce(y, out=y)

        def restore(x, y):
            y[:] = x

        def reduce_value(v):
            return comm.allreduce(v)

        barrier = comm.barrier

        def mean_over_ranks(v):
            return comm.allreduce(v) / nranks

        def finish():
            comm.finish()

    elif impl == "mpi4py":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank, nranks = comm.Get_rank(), comm.Get_size()
        backend = MPI.Get_library_version().split(",")[0].strip()

        def reduce_buf(x, y):
            comm.Allreduce(x, y, op=MPI.SUM)

        def restore(x, y):
            pass

        def reduce_value(v):
            return comm.allreduce(v, op=MPI.SUM)

        barrier = comm.Barrier

        def mean_over_ranks(v):
            return comm.allreduce(v, op=MPI.SUM) / nranks

        def finish():
            pass

    else:
        sys.exit(f"python_allreduce: unknown implementation {impl} (ferry or mpi4py)")

    if rank == 0:
        print(f"# python allreduce ({impl}, {backend}), {nranks} ranks, float32 sum")
        print("# Size       Avg Latency(us)")
    for size in sizes:
        n = size // 4
        iters, warmup = (100, 10) if size > LARGE else (1000, 200)
        x = (np.arange(n, dtype=np.float32) % 97) * np.float32(0.5)
        y = x.copy()
        total = 0.0
        for i in range(warmup + iters):
            restore(x, y)
            t0 = time.perf_counter()
            reduce_buf(x, y)
            dt = time.perf_counter() - t0
            if i >= warmup:
                total += dt
            barrier()
        restore(x, y)
        reduce_buf(x, y)
        if not np.array_equal(y, x * np.float32(nranks)):
            sys.exit(f"python_allreduce: rank {rank}: wrong result at {size} B")
        avg = mean_over_ranks(total * 1e6 / iters)
        if rank == 0:
            print(f"{size:<10}{avg:>18.2f}", flush=True)
    total = 0.0
    for i in range(1200):
        t0 = time.perf_counter()
        v = reduce_value(1.0)
        dt = time.perf_counter() - t0
        if i >= 200:
            total += dt
        barrier()
    if v != float(nranks):
        sys.exit(f"python_allreduce: rank {rank}: wrong object result {v}")
    avg = mean_over_ranks(total * 1e6 / 1000)
    if rank == 0:
        print(f"{'object':<10}{avg:>18.2f}", flush=True)
    finish()


if __name__ == "__main__":
    main()
