/* shm_pingpong: the shared-memory floor for ferry's comparison (no MPI, no ferry).
 * Two processes (fork) share one anonymous MAP_SHARED mapping. Each direction has a flag on
 * its own cache line and a data area; the sender copies the payload in and publishes a
 * sequence number (release store), the receiver spins on the flag (acquire load) and copies
 * the payload out: a copy-in/copy-out ping-pong, the best a 2-copy shm transport can do.
 *   -m MAX (default 4 MiB), -p pins the processes to CPUs 0 and 1.
 * Output: '#' header, then "size latency_us" (half round trip); OSU iteration counts. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LARGE 8192

struct chan {
    _Alignas(64) _Atomic unsigned long seq;
    char pad[56];
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

int main(int argc, char **argv) {
    long max = 1L << 22;
    int pinning = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-p")) pinning = 1;
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) max = atol(argv[++i]);
    }
    size_t bytes = 2 * sizeof(struct chan) + 2 * (size_t)max;
    char *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    struct chan *ch = (struct chan *)m; /* ch[0]: 0 -> 1, ch[1]: 1 -> 0 */
    char *area[2] = {m + 2 * sizeof(struct chan), m + 2 * sizeof(struct chan) + max};
    atomic_store(&ch[0].seq, 0);
    atomic_store(&ch[1].seq, 0);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    int rank = child == 0 ? 1 : 0;
    if (pinning) pin(rank);
    char *priv = malloc(max);
    memset(priv, 'a', max);
    unsigned long seq = 0;
    if (rank == 0) {
        printf("# raw shared-memory ping-pong, flag spin + copy-in/copy-out (floor)\n");
        printf("# Size          Latency (us)\n");
    }
    for (long s = 1; s <= max; s *= 2) {
        int iters = s > LARGE ? 100 : 10000, skip = s > LARGE ? 10 : 1000;
        double t0 = now();
        for (int i = 0; i < iters + skip; i++) {
            if (i == skip) t0 = now();
            seq++;
            if (rank == 0) {
                memcpy(area[0], priv, s);
                atomic_store_explicit(&ch[0].seq, seq, memory_order_release);
                while (atomic_load_explicit(&ch[1].seq, memory_order_acquire) != seq)
                    ;
                memcpy(priv, area[1], s);
            } else {
                while (atomic_load_explicit(&ch[0].seq, memory_order_acquire) != seq)
                    ;
                memcpy(priv, area[0], s);
                memcpy(area[1], priv, s);
                atomic_store_explicit(&ch[1].seq, seq, memory_order_release);
            }
        }
        double t = now() - t0;
        if (rank == 0) {
            printf("%-10ld%18.3f\n", s, t * 1e6 / (2.0 * iters));
            fflush(stdout);
        }
    }
    free(priv);
    if (rank == 0) {
        int st = 0;
        waitpid(child, &st, 0);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    }
    return 0;
}
