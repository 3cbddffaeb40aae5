/* laik.h from C: values held by some processes only, summed at the master, the way LAIK's
 * current ping_pong aggregates the first processes' times of its pairs. An application
 * partitioner gives the whole (small) space to the first process of every pair (close pairs
 * 2k/2k+1 by default, spread pairs k/k+pairs with -s), so the ranges of different processes
 * overlap and some processes (the second of each pair, and an unpaired last one) hold
 * nothing. The program checks that:
 *  - laik_get_map_1d hands out memory exactly to the holders and NULL to everybody else
 *    (LAIK's ping_pong writes through the pointer only `if (base)`);
 *  - a switch to the master with Preserve + Sum adds the holders' copies and nothing else;
 *  - a switch back to the holders with Preserve gives every holder the master's values.
 * Prints one line at the master and exits 1 on the first mismatch.
 * Usage: laik_subset_sum [-s] */
#include <laik.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEN 3

static int spread = 0;

static void firsts(Laik_RangeReceiver* r, Laik_PartitionerParams* p)
{
    Laik_Range all;
    laik_range_init_1d(&all, p->space, 0, laik_space_size(p->space));
    int pairs = laik_size(p->group) / 2;
    for (int k = 0; k < pairs; k++) laik_append_range(r, spread ? k : 2 * k, &all, 0, 0);
}

static int holds(int rank, int size)
{
    int pairs = size / 2;
    return spread ? rank < pairs : (rank % 2 == 0 && rank < 2 * pairs);
}

static int fail(int me, const char* what)
{
    printf("rank %d: %s\n", me, what);
    return 1;
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    spread = argc > 1 && strcmp(argv[1], "-s") == 0;
    int me = laik_myid(world), n = laik_size(world);
    if (n < 2) {
        printf("needs at least 2 processes\n");
        laik_finalize(inst);
        return 1;
    }
    Laik_Data* d = laik_new_data_1d(inst, laik_Double, LEN);
    Laik_Partitioner* pr = laik_new_partitioner("firsts", firsts, 0, 0);
    laik_switchto_new_partitioning(d, world, pr, LAIK_DF_None, LAIK_RO_None);
    double* base = (double*) 1;
    uint64_t cnt = 99;
    laik_get_map_1d(d, 0, (void**) &base, &cnt);
    if ((base != 0) != holds(me, n)) return fail(me, "holder memory wrong after the first switch");
    if (base) {
        if (cnt != LEN) return fail(me, "holder count wrong");
        for (int k = 0; k < LEN; k++) base[k] = 10.0 * (me + 1) + k;
    } else if (cnt != 0)
        return fail(me, "count of a process holding nothing is not 0");
    laik_get_map_1d(d, 0, (void**) &base, 0); /* count may be NULL, as in ping_pong */

    laik_switchto_new_partitioning(d, world, laik_Master, LAIK_DF_Preserve, LAIK_RO_Sum);
    laik_get_map_1d(d, 0, (void**) &base, 0);
    if ((base != 0) != (me == 0)) return fail(me, "master memory wrong after the sum");
    double want[LEN] = {0};
    int holders = 0;
    for (int r = 0; r < n; r++)
        if (holds(r, n)) {
            holders++;
            for (int k = 0; k < LEN; k++) want[k] += 10.0 * (r + 1) + k;
        }
    if (me == 0) {
        for (int k = 0; k < LEN; k++)
            if (base[k] != want[k]) {
                printf("rank 0: element %d is %g, the %d holders' sum is %g\n", k, base[k],
                       holders, want[k]);
                return 1;
            }
        for (int k = 0; k < LEN; k++) base[k] += 1.0;
    }

    laik_switchto_new_partitioning(d, world, pr, LAIK_DF_Preserve, LAIK_RO_None);
    laik_get_map_1d(d, 0, (void**) &base, 0);
    if ((base != 0) != holds(me, n)) return fail(me, "holder memory wrong after the way back");
    if (base)
        for (int k = 0; k < LEN; k++)
            if (base[k] != want[k] + 1.0) return fail(me, "holder did not get the master's values");
    if (me == 0)
        printf("%s pairs of %d processes: %d holders summed at the master and back: ok\n",
               spread ? "spread" : "close", n, holders);
    laik_finalize(inst);
    return 0;
}
