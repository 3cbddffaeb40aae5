/* ferry's virtual topologies from C: a ROWS x COLS grid (periods from the arguments), its
 * coordinates and shifts, neighbour allgather and all-to-all over it, then a directed ring
 * as a distributed graph. Every rank prints its lines; the test compares them with a
 * hand-computed grid. Usage: ferry_cart ROWS COLS PERIOD0 PERIOD1 */
#include <ferry.h>

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                   \
    do {                                                                              \
        int rc_ = (call);                                                             \
        if (rc_ != FERRY_OK) {                                                        \
            printf("rank %d: %s failed: %d %s\n", rank, #call, rc_, ferry_last_error()); \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

static void put(int v)
{
    if (v < 0)
        printf(" -");
    else
        printf(" %d", v);
}

int main(int argc, char** argv)
{
    if (argc != 5) {
        printf("usage: ferry_cart ROWS COLS PERIOD0 PERIOD1\n");
        return 2;
    }
    int dims[2] = { atoi(argv[1]), atoi(argv[2]) };
    int periods[2] = { atoi(argv[3]), atoi(argv[4]) };
    FerryWorld* w = NULL;
    int rank = -1, size = 0;
    if (ferry_init(&w) != FERRY_OK) {
        printf("init failed: %s\n", ferry_last_error());
        return 1;
    }
    CHECK(ferry_rank(w, &rank));
    CHECK(ferry_size(w, &size));

    /* Before a topology, the neighbour calls are errors. */
    int ns = -1, nd = -1;
    if (ferry_neighbor_count(w, &ns, &nd) != FERRY_ERR_INVALID_ARGUMENT) {
        printf("rank %d: neighbour count without a topology did not fail\n", rank);
        return 1;
    }

    CHECK(ferry_cart_create(w, 2, dims, periods));
    int coords[2] = { -1, -1 };
    CHECK(ferry_cart_coords(w, 2, coords));
    printf("cart %d (%d,%d):", rank, coords[0], coords[1]);
    for (int d = 0; d < 2; d++) {
        int src = -2, dst = -2;
        CHECK(ferry_cart_shift(w, d, 1, &src, &dst));
        put(src);
        put(dst);
    }
    printf("\n");

    CHECK(ferry_neighbor_count(w, &ns, &nd));
    if (ns != 4 || nd != 4) {
        printf("rank %d: %d sources, %d destinations\n", rank, ns, nd);
        return 1;
    }
    int got[4] = { -1, -1, -1, -1 };
    CHECK(ferry_neighbor_allgather(w, &rank, sizeof rank, got));
    printf("nbr %d:", rank);
    for (int s = 0; s < 4; s++) put(got[s]);
    printf("\n");

    int send[4], back[4] = { -1, -1, -1, -1 };
    for (int k = 0; k < 4; k++) send[k] = rank * 10 + k;
    CHECK(ferry_neighbor_alltoall(w, send, sizeof send[0], back));
    printf("a2a %d:", rank);
    for (int s = 0; s < 4; s++) put(back[s]);
    printf("\n");

    int sum = rank;
    CHECK(ferry_allreduce(w, &sum, 1, FERRY_INT32, FERRY_SUM));
    if (rank == 0) printf("cart sum %d\n", sum);

    /* A directed ring as a graph: receive from the left, send to the right. */
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    CHECK(ferry_graph_create(w, 1, &left, 1, &right));
    int from = -1;
    CHECK(ferry_neighbor_allgather(w, &rank, sizeof rank, &from));
    printf("graph %d: from %d\n", rank, from);

    /* Bad arguments are status codes. */
    int bad_dims[2] = { size + 1, 1 };
    int rc = ferry_cart_create(w, 2, bad_dims, periods);
    printf("rank %d: wrong grid size -> %s\n", rank,
           rc == FERRY_ERR_INVALID_ARGUMENT ? "invalid argument" : "unexpected");

    CHECK(ferry_finalize(w));
    return 0;
}
