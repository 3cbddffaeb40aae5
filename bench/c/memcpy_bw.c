/* memcpy_bw: the single-copy floor for ferry's comparison (no MPI, no ferry): one core copies
 * a buffer of each size with memcpy, source and destination reused so that both stay in cache
 * as long as they fit (a transfer that copies once cannot beat this; one that copies in and out
 * pays it twice). Sizes 1 B .. MAX in powers of two (-m MAX, default 4 MiB); per size, enough
 * copies for ~64 MiB, best of 5 trials.
 * Output: '#' header, then "size MB/s" per line (MB = 10^6 bytes, OSU convention). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    long max = 1L << 22;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "-m")) max = atol(argv[++i]);
    char *src = aligned_alloc(4096, (max + 4095) / 4096 * 4096);
    char *dst = aligned_alloc(4096, (max + 4095) / 4096 * 4096);
    if (!src || !dst) {
        fprintf(stderr, "memcpy_bw: cannot allocate %ld bytes\n", max);
        return 1;
    }
    memset(src, 'a', max);
    memset(dst, 'b', max);
    printf("# raw memcpy, one core, cache-resident buffers (floor)\n");
    printf("# Size      Bandwidth (MB/s)\n");
    for (long s = 1; s <= max; s *= 2) {
        long reps = (64L << 20) / s;
        if (reps < 10) reps = 10;
        double best = 1e30;
        for (int trial = 0; trial < 5; trial++) {
            double t0 = now();
            for (long r = 0; r < reps; r++) {
                memcpy(dst, src, s);
                /* Keep the compiler from merging or dropping the copies. */
                __asm__ __volatile__("" : : "r"(dst) : "memory");
            }
            double t = now() - t0;
            if (t < best) best = t;
        }
        printf("%-10ld%18.2f\n", s, (double)s * reps / best / 1e6);
        fflush(stdout);
    }
    return 0;
}
