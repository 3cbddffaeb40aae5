/* osu_latency (MPI): ping-pong latency between ranks 0 and 1, OSU 5.x methodology, written
 * for ferry's comparison (bench/compare-openmpi.sh); prints the same format as
 * crates/ferry/examples/osu_latency.rs: '#' header, then "size latency_us" per line.
 * 1000 warm-up + 10000 timed round trips up to 8 KiB, 10 + 100 above; sizes 1 B .. MAX
 * (-m MAX, default 4 MiB; -m MIN:MAX starts at MIN). Latency = half the round trip. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LARGE 8192

int main(int argc, char **argv) {
    long max = 1L << 22, min = 1;
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "-m")) {
            const char *v = argv[++i], *colon = strchr(v, ':');
            if (colon) {
                min = atol(v);
                max = atol(colon + 1);
            } else {
                max = atol(v);
            }
        }
    if (size < 2) {
        if (rank == 0) fprintf(stderr, "osu_latency: needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    char *sbuf = malloc(max), *rbuf = malloc(max);
    memset(sbuf, 'a', max);
    memset(rbuf, 'b', max);
    if (rank == 0) {
        printf("# C/MPI osu_latency (OSU methodology)\n");
        printf("# Size          Latency (us)\n");
    }
    long first = 1;
    while (first < min) first *= 2;
    for (long s = first; s <= max; s *= 2) {
        int iters = s > LARGE ? 100 : 10000, skip = s > LARGE ? 10 : 1000;
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < iters + skip; i++) {
            if (i == skip) t0 = MPI_Wtime();
            if (rank == 0) {
                MPI_Send(sbuf, (int)s, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(rbuf, (int)s, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Recv(rbuf, (int)s, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(sbuf, (int)s, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
            }
        }
        double t = MPI_Wtime() - t0;
        if (rank == 0) printf("%-10ld%18.2f\n", s, t * 1e6 / (2.0 * iters));
        fflush(stdout);
    }
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
