/* osu_allreduce (MPI): MPI_Allreduce latency (MPI_FLOAT, MPI_SUM), OSU 5.x methodology,
 * written for ferry's comparison; same output format as crates/ferry/examples/osu_allreduce.rs.
 * Sizes 4 B .. MAX (-m MAX, default 4 MiB); 200 + 1000 calls up to 8 KiB, 10 + 100 above;
 * only the allreduce is timed, a barrier follows each call; the figure is the average over
 * ranks of each rank's mean time (us). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LARGE 8192

int main(int argc, char **argv) {
    long max = 1L << 22;
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "-m")) max = atol(argv[++i]);
    long n = max / 4;
    float *in = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
    for (long i = 0; i < n; i++) in[i] = (float)(i % 97) * 0.5f, out[i] = 0;
    if (rank == 0) {
        printf("# C/MPI osu_allreduce (OSU methodology, float sum), %d ranks\n", size);
        printf("# Size       Avg Latency(us)\n");
    }
    for (long s = 4; s <= max; s *= 2) {
        int iters = s > LARGE ? 100 : 1000, skip = s > LARGE ? 10 : 200;
        double total = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < iters + skip; i++) {
            double t0 = MPI_Wtime();
            MPI_Allreduce(in, out, (int)(s / 4), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            double t = MPI_Wtime() - t0;
            if (i >= skip) total += t;
            MPI_Barrier(MPI_COMM_WORLD);
        }
        double mean = total * 1e6 / iters, sum = 0;
        MPI_Reduce(&mean, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("%-10ld%18.2f\n", s, sum / size);
        fflush(stdout);
    }
    free(in);
    free(out);
    MPI_Finalize();
    return 0;
}
