/* laik.h from C: LAIK_RO_Any and LAIK_RO_Single, the reductions that combine nothing (LAIK's
 * own test programs switch halos with LAIK_RO_Any: every copy of an index is equal, any one
 * serves). Over a 1d space of N elements on a block partitioning with a depth-1 corner halo:
 *  - block -> halo with Preserve + Any fills every halo copy with its owner's value;
 *  - each process scales all its copies (owned and halo) by 3, so the copies stay equal, and
 *    halo -> halo with Preserve + Any keeps them;
 *  - halo -> master with Preserve + Sum adds every copy: N * 3 * v plus 2 * 3 * v per border
 *    between neighbouring processes, which the program checks against the value it gets;
 *  - block -> master with Preserve + Single collects the owned values unchanged.
 * Exits 1 on the first mismatch; prints one line at the master otherwise. */
#include <laik.h>
#include <stdio.h>

#define N 999
#define V 1.5

static int fail(int me, const char* what, int64_t i, double got, double want)
{
    printf("rank %d: %s: index %lld is %g, expected %g\n", me, what, (long long) i, got, want);
    return 1;
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    int me = laik_myid(world), n = laik_size(world);
    Laik_Space* sp = laik_new_space_1d(inst, N);
    Laik_Data* d = laik_new_data(sp, laik_Double);
    Laik_Partitioning* block = laik_new_partitioning(laik_new_block_partitioner1(), world, sp, 0);
    Laik_Partitioning* halo =
        laik_new_partitioning(laik_new_cornerhalo_partitioner(1), world, sp, block);

    double* base;
    uint64_t cnt;
    int64_t from, to;
    laik_switchto_partitioning(d, block, LAIK_DF_None, LAIK_RO_None);
    laik_get_map_1d(d, 0, (void**) &base, &cnt);
    laik_my_range_1d(block, 0, &from, &to);
    for (uint64_t k = 0; k < cnt; k++) base[k] = V + (double) (from + (int64_t) k);

    laik_switchto_partitioning(d, halo, LAIK_DF_Preserve, LAIK_RO_Any);
    laik_get_map_1d(d, 0, (void**) &base, &cnt);
    int64_t lo = laik_local2global_1d(d, 0);
    for (uint64_t k = 0; k < cnt; k++) {
        double want = V + (double) (lo + (int64_t) k);
        if (base[k] != want) return fail(me, "halo after block", lo + (int64_t) k, base[k], want);
        base[k] *= 3.0;
    }
    laik_switchto_partitioning(d, halo, LAIK_DF_Preserve, LAIK_RO_Any);
    laik_get_map_1d(d, 0, (void**) &base, &cnt);
    for (uint64_t k = 0; k < cnt; k++) {
        double want = 3.0 * (V + (double) (lo + (int64_t) k));
        if (base[k] != want) return fail(me, "halo after halo", lo + (int64_t) k, base[k], want);
    }
    /* every index once from its owner, plus the two copies at each border */
    double want = 0.0;
    for (int64_t i = 0; i < N; i++) want += 3.0 * (V + (double) i);
    Laik_Partitioning* master = laik_new_partitioning(laik_Master, world, sp, 0);
    laik_switchto_partitioning(d, master, LAIK_DF_Preserve, LAIK_RO_Sum);
    if (me == 0) {
        laik_get_map_1d(d, 0, (void**) &base, &cnt);
        /* the border after the range of every process but the last: its last index b - 1
         * is also in the next process's halo, the next one's first index b in its halo (N
         * is larger than the process counts these runs use, so every process has a range) */
        for (int r = 0; r < laik_partitioning_rangecount(block); r++) {
            Laik_TaskRange* tr = laik_partitioning_get_taskrange(block, r);
            int64_t b = laik_taskrange_get_range(tr)->to.i[0];
            if (laik_taskrange_get_task(tr) + 1 < n)
                want += 3.0 * (V + (double) (b - 1)) + 3.0 * (V + (double) b);
        }
        double sum = 0.0;
        for (uint64_t k = 0; k < cnt; k++) sum += base[k];
        if (sum != want) return fail(me, "sum of all copies", -1, sum, want);
    }
    laik_switchto_partitioning(d, block, LAIK_DF_None, LAIK_RO_None);
    laik_get_map_1d(d, 0, (void**) &base, &cnt);
    for (uint64_t k = 0; k < cnt; k++) base[k] = V * (double) (from + (int64_t) k);
    laik_switchto_partitioning(d, master, LAIK_DF_Preserve, LAIK_RO_Single);
    if (me == 0) {
        laik_get_map_1d(d, 0, (void**) &base, &cnt);
        for (uint64_t k = 0; k < cnt; k++)
            if (base[k] != V * (double) k)
                return fail(me, "master after Single", (int64_t) k, base[k], V * (double) k);
        printf("Any and Single on %d processes: ok\n", n);
    }
    laik_finalize(inst);
    return 0;
}
