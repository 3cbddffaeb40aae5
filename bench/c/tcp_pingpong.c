/* tcp_pingpong: the raw TCP loopback floor for ferry's comparison (no MPI, no ferry).
 * Two processes (fork) connected over 127.0.0.1 with TCP_NODELAY.
 *   -s        receiver polls with non-blocking recv (spin) -- what a polling library can reach
 *   (default) blocking recv: the receiver sleeps in the kernel and is woken per message
 *   -b        bandwidth instead of latency: window of 64 messages, then a 4-byte ack
 *   -m MAX    largest size (default 4 MiB); -p pins the processes to CPUs 0 and 1
 * Output format as the osu programs: '#' header, then "size figure" (us or MB/s).
 * Iterations as OSU: latency 1000+10000 up to 8 KiB, 10+100 above; bw 10+100 / 2+20. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LARGE 8192
#define WINDOW 64

static int spin;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void send_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            die("send");
        }
        p += w;
        n -= (size_t)w;
    }
}

static void recv_all(int fd, char *p, size_t n) {
    while (n > 0) {
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            die("recv");
        }
        if (r == 0) {
            fprintf(stderr, "tcp_pingpong: peer closed\n");
            exit(1);
        }
        p += r;
        n -= (size_t)r;
    }
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

int main(int argc, char **argv) {
    long max = 1L << 22;
    int bw = 0, pinning = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-s")) spin = 1;
        else if (!strcmp(argv[i], "-b")) bw = 1;
        else if (!strcmp(argv[i], "-p")) pinning = 1;
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) max = atol(argv[++i]);
    }
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0) die("socket");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0) die("bind");
    if (listen(ls, 1) < 0) die("listen");
    socklen_t al = sizeof a;
    getsockname(ls, (struct sockaddr *)&a, &al);
    pid_t child = fork();
    if (child < 0) die("fork");
    int rank = child == 0 ? 1 : 0;
    int fd;
    if (rank == 1) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) die("connect");
    } else {
        fd = accept(ls, NULL, NULL);
        if (fd < 0) die("accept");
    }
    close(ls);
    if (pinning) pin(rank);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (spin) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    char *buf = malloc(max), ack[4] = {0};
    memset(buf, 'a', max);
    if (rank == 0) {
        printf("# raw TCP loopback %s %s (floor)\n", bw ? "bandwidth" : "ping-pong",
               spin ? "polling (non-blocking recv spin)" : "blocking recv");
        printf(bw ? "# Size      Bandwidth (MB/s)\n" : "# Size          Latency (us)\n");
    }
    for (long s = 1; s <= max; s *= 2) {
        int iters, skip;
        if (bw) iters = s > LARGE ? 20 : 100, skip = s > LARGE ? 2 : 10;
        else iters = s > LARGE ? 100 : 10000, skip = s > LARGE ? 10 : 1000;
        double t0 = now();
        for (int i = 0; i < iters + skip; i++) {
            if (i == skip) t0 = now();
            if (bw) {
                if (rank == 0) {
                    for (int j = 0; j < WINDOW; j++) send_all(fd, buf, s);
                    recv_all(fd, ack, 4);
                } else {
                    for (int j = 0; j < WINDOW; j++) recv_all(fd, buf, s);
                    send_all(fd, ack, 4);
                }
            } else if (rank == 0) {
                send_all(fd, buf, s);
                recv_all(fd, buf, s);
            } else {
                recv_all(fd, buf, s);
                send_all(fd, buf, s);
            }
        }
        double t = now() - t0;
        if (rank == 0) {
            if (bw) printf("%-10ld%18.2f\n", s, (double)s * WINDOW * iters / 1e6 / t);
            else printf("%-10ld%18.2f\n", s, t * 1e6 / (2.0 * iters));
            fflush(stdout);
        }
    }
    close(fd);
    free(buf);
    if (rank == 0) {
        int st = 0;
        waitpid(child, &st, 0);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    }
    return 0;
}
