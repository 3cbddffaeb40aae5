/* A failure seen from C: the last rank kills itself (SIGKILL) while rank 0 waits for a
 * message from it. Rank 0 must get FERRY_ERR_PEER_FAILED and a message naming the dead rank,
 * not an abort, and ends with exit status 0 after printing it. */
#include <ferry.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
    FerryWorld* w = NULL;
    int rank = -1, size = 0;
    if (ferry_init(&w) != FERRY_OK || ferry_rank(w, &rank) != FERRY_OK ||
        ferry_size(w, &size) != FERRY_OK) {
        printf("init failed: %s\n", ferry_last_error());
        return 1;
    }
    int victim = size - 1;
    if (rank == victim) {
        usleep(200 * 1000);
        kill(getpid(), SIGKILL);
        pause();
    }
    if (rank == 0) {
        char buf[8];
        int rc = ferry_recv(w, buf, sizeof buf, victim, 3, NULL);
        char name[32];
        snprintf(name, sizeof name, "rank %d", victim);
        printf("status %s\n", ferry_status_string(rc));
        printf("message names %s: %s\n", name, strstr(ferry_last_error(), name) ? "yes" : "no");
        fprintf(stderr, "ferry_fail: %s\n", ferry_last_error());
        fflush(stdout);
        _exit(rc == FERRY_ERR_PEER_FAILED ? 0 : 2);
    }
    /* other ranks wait for the victim in a barrier and report what they got */
    int rc = ferry_barrier(w);
    fprintf(stderr, "rank %d barrier: %s: %s\n", rank, ferry_status_string(rc), ferry_last_error());
    _exit(rc == FERRY_OK ? 3 : 0);
}
