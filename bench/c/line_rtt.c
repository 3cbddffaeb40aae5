/* line_rtt: how long one cache line takes to go from CPU 0 to CPU 1 and back (no MPI, no
 * ferry). Two processes (fork), pinned to CPUs 0 and 1, hand a counter in one shared line back
 * and forth N times (-n N, default 200000) and the parent prints the mean round trip.
 * On a virtual machine the round trip tells which placement the two virtual CPUs have right
 * now: a cross-core line transfer is what every shared-memory copy between two ranks is made
 * of, so bandwidth figures taken in a slow placement cannot be compared with ones taken in a
 * fast one. Run it right before a measurement and report it with the figure.
 * Output: "line round trip N ns". */
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

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

int main(int argc, char **argv) {
    long n = 200000;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-n") && i + 1 < argc) n = atol(argv[++i]);
    _Atomic long *line = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                              -1, 0);
    if (line == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    atomic_store(line, 0);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        pin(1);
        for (long i = 0; i < n; i++) {
            while (atomic_load_explicit(line, memory_order_acquire) != 2 * i + 1)
                __builtin_ia32_pause();
            atomic_store_explicit(line, 2 * i + 2, memory_order_release);
        }
        return 0;
    }
    pin(0);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        atomic_store_explicit(line, 2 * i + 1, memory_order_release);
        while (atomic_load_explicit(line, memory_order_acquire) != 2 * i + 2)
            __builtin_ia32_pause();
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("line round trip %.0f ns\n",
           ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (double)n);
    waitpid(child, NULL, 0);
    return 0;
}
