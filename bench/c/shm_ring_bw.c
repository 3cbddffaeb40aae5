/* shm_ring_bw: the pipelined shared-memory copy floor for ferry's comparison (no MPI, no
 * ferry). Two processes (fork) share one anonymous MAP_SHARED ring of 16 slots of 64 KiB; the
 * sender copies each message into the ring chunk by chunk and publishes each chunk (release
 * store of the head counter), the receiver copies chunks out as they appear and hands slots
 * back (tail counter), so both copies run at the same time on two cores: the best a
 * copy-in/copy-out transport streams. OSU osu_bw methodology: per iteration a window of 64
 * messages (-w), all received into one buffer, then a 4-byte acknowledgement; 10 + 100
 * iterations up to 8 KiB, 2 + 20 above. Sizes 1 B .. MAX (-m MAX, default 4 MiB); -p pins the
 * processes to CPUs 0 and 1.
 * Output: '#' header, then "size MB/s" per line (MB = 10^6 bytes). */
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
#define SLOTS 16
#define SLOT (64 * 1024)

struct counter {
    _Alignas(64) _Atomic unsigned long v;
    char pad[56];
};

struct ring {
    struct counter head, tail, ack;
    _Alignas(4096) char slot[SLOTS][SLOT];
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

static void spin_until(_Atomic unsigned long *c, unsigned long want_at_least) {
    while (atomic_load_explicit(c, memory_order_acquire) < want_at_least)
        __builtin_ia32_pause();
}

int main(int argc, char **argv) {
    long max = 1L << 22;
    int window = 64, pinned = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) max = atol(argv[++i]);
        else if (!strcmp(argv[i], "-w") && i + 1 < argc) window = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-p")) pinned = 1;
    }
    struct ring *r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                          -1, 0);
    if (r == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(r, 0, sizeof *r);
    char *buf = malloc(max);
    if (!buf) return 1;
    memset(buf, 'a', max);
    fflush(stdout);
    pid_t child = fork();
    int sender = child != 0;
    if (pinned) pin(sender ? 0 : 1);
    if (sender) {
        printf("# raw shared-memory ring, 16 x 64 KiB slots, pipelined copy-in/copy-out (floor)\n");
        printf("# Size      Bandwidth (MB/s)\n");
    }
    /* Counters only grow: chunks published (head), chunks consumed (tail), windows acked. */
    unsigned long head = 0, tail = 0, acks = 0;
    for (long s = 1; s <= max; s *= 2) {
        int iters = s > LARGE ? 20 : 100, skip = s > LARGE ? 2 : 10;
        double t0 = 0;
        for (int it = 0; it < iters + skip; it++) {
            if (it == skip) t0 = now();
            for (int m = 0; m < window; m++) {
                for (long off = 0; off < s; off += SLOT) {
                    long n = s - off < SLOT ? s - off : SLOT;
                    if (sender) {
                        spin_until(&r->tail.v, head + 1 > SLOTS ? head + 1 - SLOTS : 0);
                        memcpy(r->slot[head % SLOTS], buf + off, n);
                        atomic_store_explicit(&r->head.v, ++head, memory_order_release);
                    } else {
                        spin_until(&r->head.v, tail + 1);
                        memcpy(buf + off, r->slot[tail % SLOTS], n);
                        atomic_store_explicit(&r->tail.v, ++tail, memory_order_release);
                    }
                }
            }
            if (sender) {
                spin_until(&r->ack.v, ++acks);
            } else {
                atomic_store_explicit(&r->ack.v, ++acks, memory_order_release);
            }
        }
        double t = now() - t0;
        if (sender) {
            printf("%-10ld%18.2f\n", s, (double)s * window * iters / t / 1e6);
            fflush(stdout);
        }
    }
    if (sender) waitpid(child, NULL, 0);
    return 0;
}
