/* ferry's C API from C: point-to-point, collectives, a data container, and error codes for
 * bad arguments. Every rank prints one line per check; the test compares them. */
#include <ferry.h>

#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                                   \
    do {                                                                              \
        int rc_ = (call);                                                             \
        if (rc_ != FERRY_OK) {                                                        \
            printf("rank %d: %s failed: %d %s\n", rank, #call, rc_, ferry_last_error()); \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

int main(void)
{
    FerryWorld* w = NULL;
    int rank = -1, size = 0;
    if (ferry_init(&w) != FERRY_OK) {
        printf("init failed: %s\n", ferry_last_error());
        return 1;
    }
    CHECK(ferry_rank(w, &rank));
    CHECK(ferry_size(w, &size));

    /* ring: send my rank to the right, receive from the left */
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    long token = 1000 + rank, got = -1;
    size_t len = 0;
    CHECK(ferry_send(w, &token, sizeof token, right, 7));
    CHECK(ferry_recv(w, &got, sizeof got, left, 7, &len));
    printf("rank %d: ring got %ld (%zu bytes)\n", rank, got, len);

    /* collectives */
    double v[2] = { rank + 1.0, 2.0 * rank };
    CHECK(ferry_allreduce(w, v, 2, FERRY_DOUBLE, FERRY_SUM));
    printf("rank %d: allreduce %.1f %.1f\n", rank, v[0], v[1]);
    int32_t m = rank * 3;
    CHECK(ferry_allreduce(w, &m, 1, FERRY_INT32, FERRY_MAX));
    printf("rank %d: max %d\n", rank, (int) m);
    char msg[16] = "";
    if (rank == 0) strcpy(msg, "from root");
    CHECK(ferry_bcast(w, msg, sizeof msg, 0));
    printf("rank %d: bcast '%s'\n", rank, msg);
    int mine = rank * rank, all[64];
    CHECK(ferry_allgather(w, &mine, sizeof mine, all));
    int s = 0;
    for (int i = 0; i < size; i++) s += all[i] * (i + 1);
    printf("rank %d: allgather weighted %d\n", rank, s);
    CHECK(ferry_barrier(w));

    /* data layer: master fills 0..99, blocks sum locally, the partial sums reduce at master */
    FerryData* d = NULL;
    uint64_t n = 100;
    CHECK(ferry_data_new(w, FERRY_DOUBLE, 1, &n, &d));
    CHECK(ferry_data_switch(w, d, FERRY_PART_MASTER, FERRY_FLOW_NONE, 0, FERRY_SUM));
    double* base = NULL;
    int64_t from[3], to[3];
    int maps = 0;
    CHECK(ferry_data_mapping_count(d, &maps));
    if (maps > 0) {
        CHECK(ferry_data_mapping(d, 0, (void**) &base, from, to, NULL));
        for (int64_t i = from[0]; i < to[0]; i++) base[i - from[0]] = (double) i;
    }
    CHECK(ferry_data_switch(w, d, FERRY_PART_BLOCK, FERRY_FLOW_PRESERVE, 0, FERRY_SUM));
    CHECK(ferry_data_mapping(d, 0, (void**) &base, from, to, NULL));
    double local = 0;
    for (int64_t i = from[0]; i < to[0]; i++) local += base[i - from[0]];
    printf("rank %d: block [%ld, %ld) sum %.0f\n", rank, (long) from[0], (long) to[0], local);
    FerryData* t = NULL;
    uint64_t one = 1;
    CHECK(ferry_data_new(w, FERRY_DOUBLE, 1, &one, &t));
    CHECK(ferry_data_switch(w, t, FERRY_PART_ALL, FERRY_FLOW_NONE, 0, FERRY_SUM));
    CHECK(ferry_data_mapping(t, 0, (void**) &base, NULL, NULL, NULL));
    *base = local;
    CHECK(ferry_data_switch(w, t, FERRY_PART_MASTER, FERRY_FLOW_PRESERVE, 1, FERRY_SUM));
    if (rank == 0) {
        CHECK(ferry_data_mapping(t, 0, (void**) &base, NULL, NULL, NULL));
        printf("rank 0: total %.0f\n", *base);
    }
    CHECK(ferry_data_free(t));
    CHECK(ferry_data_free(d));

    /* errors are status codes with a message, never an abort */
    int rc = ferry_send(w, &token, sizeof token, size + 5, 1);
    printf("rank %d: bad rank -> %s (%s)\n", rank, ferry_status_string(rc),
           strstr(ferry_last_error(), "outside a world") ? "message names it" : ferry_last_error());
    rc = ferry_rank(NULL, &rank);
    printf("rank %d: null world -> %s\n", rank, ferry_status_string(rc));

    CHECK(ferry_finalize(w));
    return 0;
}
