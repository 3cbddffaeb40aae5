/* Open MPI side of bench/startup.sh: MPI_Init and one MPI_Barrier. Rank 0 prints the time
 * from LAUNCH_T0 (wall-clock nanoseconds since the epoch, set just before mpirun starts) to
 * the barrier's completion, in the format of ferry's t_startup: "since launch T s". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Barrier(MPI_COMM_WORLD);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0) {
        const char *t0 = getenv("LAUNCH_T0");
        double since = -1.0;
        if (t0) {
            long long start = atoll(t0);
            long long done = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
            since = (double)(done - start) / 1e9;
        }
        printf("startup ok: %d ranks, backend openmpi, since launch %.3f s\n", size, since);
    }
    MPI_Finalize();
    return 0;
}
