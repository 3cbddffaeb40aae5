/* laik.h from C: ping-pong between process pairs written against the LAIK calls LAIK's
 * ping_pong uses (an application partitioner with user data, a reservation for both
 * partitionings, pre-calculated transitions and action sequences, an All -> Master sum).
 * Prints the deterministic lines and the two timing lines the ping_pong cases expect.
 * Usage: laik_pairs [size [iters]] */
#include <laik.h>

static int spread = 0;

static void owners(Laik_RangeReceiver* r, Laik_PartitionerParams* p)
{
    int side = *(int*) laik_partitioner_data(p->partitioner);
    int pairs = laik_size(p->group) / 2;
    int64_t n = (int64_t) laik_space_size(p->space);
    Laik_Range piece;
    for (int k = 0; k < pairs; k++) {
        laik_range_init_1d(&piece, p->space, n * k / pairs, n * (k + 1) / pairs);
        laik_append_range(r, spread ? k + side * pairs : 2 * k + side, &piece, 0, 0);
    }
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* g = laik_world(inst);
    long size = argc > 1 ? atol(argv[1]) : 0;
    int iters = argc > 2 ? atoi(argv[2]) : 0;
    if (size <= 0) size = 100000000;
    if (iters <= 0) iters = 10;
    int pairs = laik_size(g) / 2, me = laik_myid(g);
    if (pairs == 0) {
        printf("Error: need at least one process pair to run ping-pong\n");
        laik_finalize(inst);
        exit(1);
    }
    if (me == 0) {
        printf("Do %d iterations, %d pairs (%s arrangement: 0/%d, %d/%d ...)\n", iters, pairs,
               spread ? "spread" : "close", spread ? pairs : 1, spread ? 1 : 2,
               spread ? 1 + pairs : 3);
        printf(" with %ld doubles (%.3f MB, per pair %.3f MB)\n", size, 8e-6 * size,
               8e-6 * size / pairs);
        printf(" mode: %sreservation, %spre-calculated actions\n", "with ", "with ");
    }
    Laik_Space* sp = laik_new_space_1d(inst, size);
    Laik_Data* a = laik_new_data(sp, laik_Double);
    static int side0 = 0, side1 = 1;
    Laik_Partitioning* p0 = laik_new_partitioning(laik_new_partitioner("first", owners, &side0, 0),
                                                  g, sp, 0);
    Laik_Partitioning* p1 = laik_new_partitioning(laik_new_partitioner("second", owners, &side1, 0),
                                                  g, sp, 0);
    Laik_Reservation* res = laik_reservation_new(a);
    laik_reservation_add(res, p0);
    laik_reservation_add(res, p1);
    laik_reservation_alloc(res);
    laik_data_use_reservation(a, res);
    Laik_Transition* t01 = laik_calc_transition(sp, p0, p1, LAIK_DF_Preserve, LAIK_RO_None);
    Laik_Transition* t10 = laik_calc_transition(sp, p1, p0, LAIK_DF_Preserve, LAIK_RO_None);
    Laik_ActionSeq* to1 = laik_calc_actions(a, t01, res, res);
    Laik_ActionSeq* to0 = laik_calc_actions(a, t10, res, res);

    laik_switchto_partitioning(a, p0, LAIK_DF_None, LAIK_RO_None);
    double* base;
    uint64_t cnt;
    int64_t from, to;
    if (laik_get_map_1d(a, 0, (void**) &base, &cnt)) {
        laik_my_range_1d(p0, 0, &from, &to);
        for (uint64_t k = 0; k < cnt; k++) base[k] = (double) (from + (int64_t) k);
    }
    double t = laik_wtime();
    for (int it = 0; it < iters; it++) {
        laik_exec_actions(to1);
        laik_exec_actions(to0);
    }
    t = laik_wtime() - t;
    /* the values came back unchanged */
    if (laik_get_map_1d(a, 0, (void**) &base, &cnt))
        for (uint64_t k = 0; k < cnt; k++)
            if (base[k] != (double) (from + (int64_t) k)) {
                printf("value %lu changed\n", (unsigned long) k);
                return 1;
            }
    Laik_Space* one = laik_new_space_1d(inst, 1);
    Laik_Data* dt = laik_new_data(one, laik_Double);
    laik_switchto_partitioning(dt, laik_new_partitioning(laik_All, g, one, 0), LAIK_DF_None,
                               LAIK_RO_None);
    laik_get_map_1d(dt, 0, (void**) &base, 0);
    *base = laik_my_rangecount(p0) > 0 ? t : 0.0;
    laik_switchto_partitioning(dt, laik_new_partitioning(laik_Master, g, one, 0),
                               LAIK_DF_Preserve, LAIK_RO_Sum);
    if (me == 0) {
        laik_get_map_1d(dt, 0, (void**) &base, 0);
        t = *base / pairs;
        printf("Time: %.3lf s (average per iteration: %.3lf ms, per phase: %.3lf ms)\n", t,
               t * 1e3 / iters, t * 1e3 / iters / 2);
        printf("GB/s: %lf\n", 16.0 * iters * size / t / 1e9);
    }
    laik_aseq_free(to1);
    laik_aseq_free(to0);
    laik_free_transition(t01);
    laik_free_transition(t10);
    laik_reservation_free(res);
    laik_finalize(inst);
    return 0;
}
