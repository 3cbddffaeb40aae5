/* osu_bw (MPI): streaming bandwidth rank 0 -> rank 1, OSU 5.x methodology, written for
 * ferry's comparison; same output format as crates/ferry/examples/osu_bw.rs.
 * Per iteration: rank 0 posts a window of 64 Isends and waits, then receives a 4-byte ack;
 * rank 1 posts 64 Irecvs, waits, acks. 10 + 100 iterations up to 8 KiB, 2 + 20 above.
 * MB/s with MB = 1e6 bytes. Options as the ferry example: -m [MIN:]MAX sizes, -i ITERS and
 * -x WARMUP override the iteration counts. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LARGE 8192
#define WINDOW 64

int main(int argc, char **argv) {
    long min = 1, max = 1L << 22;
    int iters_opt = -1, skip_opt = -1;
    int rank, size;
    MPI_Request req[WINDOW];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "-m")) {
            const char *v = argv[++i], *colon = strchr(v, ':');
            if (colon) {
                min = atol(v);
                max = atol(colon + 1);
            } else {
                max = atol(v);
            }
        } else if (!strcmp(argv[i], "-i")) {
            iters_opt = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "-x")) {
            skip_opt = atoi(argv[++i]);
        }
    }
    if (min < 1) min = 1;
    if (size < 2) {
        if (rank == 0) fprintf(stderr, "osu_bw: needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    char *sbuf = malloc(max), *rbuf = malloc(max);
    char ack[4] = {0};
    memset(sbuf, 'a', max);
    memset(rbuf, 'b', max);
    if (rank == 0) {
        printf("# C/MPI osu_bw (OSU methodology, window %d)\n", WINDOW);
        printf("# Size      Bandwidth (MB/s)\n");
    }
    long first = 1;
    while (first < min) first *= 2;
    for (long s = first; s <= max; s *= 2) {
        int iters = s > LARGE ? 20 : 100, skip = s > LARGE ? 2 : 10;
        if (iters_opt > 0) iters = iters_opt;
        if (skip_opt >= 0) skip = skip_opt;
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < iters + skip; i++) {
            if (i == skip) t0 = MPI_Wtime();
            if (rank == 0) {
                for (int j = 0; j < WINDOW; j++)
                    MPI_Isend(sbuf, (int)s, MPI_CHAR, 1, 100, MPI_COMM_WORLD, &req[j]);
                MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
                MPI_Recv(ack, 4, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                for (int j = 0; j < WINDOW; j++)
                    MPI_Irecv(rbuf, (int)s, MPI_CHAR, 0, 100, MPI_COMM_WORLD, &req[j]);
                MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
                MPI_Send(ack, 4, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
            }
        }
        double t = MPI_Wtime() - t0;
        if (rank == 0) printf("%-10ld%18.2f\n", s, (double)s * WINDOW * iters / 1e6 / t);
        fflush(stdout);
    }
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
