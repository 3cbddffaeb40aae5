/* laik.h from C: the vector-sum workload written against the LAIK calls that LAIK's vsum and
 * vsum2 use (master / block / index-weighted / task-weighted partitionings, a shrinked group
 * with a migrated partitioning, program memory as a mapping, an All -> Master sum; with -2
 * every block partitioning goes round twice, so each process holds two ranges, and nothing
 * shrinks). Prints what the vsum and vsum2 conformance cases expect. Usage: laik_sums [-2] [n] */
#include <laik.h>

static double by_index(Laik_Index* idx, const void* unused)
{
    (void) unused;
    return (double) idx->i[0];
}

static double all_but(int task, const void* skip)
{
    return task == (int) (long) skip ? 0.0 : 1.0;
}

static double local_sum(Laik_Data* d)
{
    double *p, s = 0.0;
    uint64_t n;
    for (int m = 0; laik_get_map_1d(d, m, (void**) &p, &n); m++)
        for (uint64_t k = 0; k < n; k++) s += p[k];
    return s;
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* all = laik_world(inst);
    int cycles = 1, a = 1;
    if (argc > a && argv[a][0] == '-' && argv[a][1] == '2') cycles = 2, a++;
    int n = argc > a ? atoi(argv[a]) : 0;
    if (n <= 0) n = 1000000;
    int me = laik_myid(all);

    Laik_Space* sp = laik_new_space_1d(inst, n);
    Laik_Data* v = laik_new_data(sp, laik_Double);
    double s[4];

    laik_switchto_partitioning(v, laik_new_partitioning(laik_Master, all, sp, 0),
                               LAIK_DF_None, LAIK_RO_None);
    double* p;
    uint64_t cnt;
    if (laik_get_map_1d(v, 0, (void**) &p, &cnt))
        for (uint64_t k = 0; k < cnt; k++) p[k] = (double) k;
    s[0] = local_sum(v);

    Laik_Partitioner* steps[2] = { laik_new_block_partitioner(0, cycles, 0, 0, 0),
                                   laik_new_block_partitioner_iw1(by_index, 0) };
    laik_set_cycle_count(steps[1], cycles);
    for (int k = 0; k < 2; k++) {
        laik_switchto_partitioning(v, laik_new_partitioning(steps[k], all, sp, 0),
                                   LAIK_DF_Preserve, LAIK_RO_None);
        s[k + 1] = local_sum(v);
    }

    s[3] = s[0];
    if (laik_size(all) > 1) {
        Laik_Partitioner* tw = laik_new_block_partitioner(0, cycles, 0, all_but, (void*) 0L);
        Laik_Partitioning* pt = laik_new_partitioning(tw, all, sp, 0);
        laik_switchto_partitioning(v, pt, LAIK_DF_Preserve, LAIK_RO_None);
        s[3] = local_sum(v);
        if (cycles == 2) goto report;
        int gone[1] = { 0 };
        Laik_Group* rest = laik_new_shrinked_group(all, 1, gone);
        laik_partitioning_migrate(pt, rest);
        printf("My world ID %d, in shrinked group: %d\n", me, laik_myid(rest));
        s[3] = laik_myid(rest) >= 0 ? local_sum(v) : 0.0;
        if (laik_data_get_group(v) != rest) {
            printf("container did not follow the migration\n");
            return 1;
        }
    }
report:
    printf("Id %d: partitial sums %.0f, %.0f, %.0f, %.0f\n", me, s[0], s[1], s[2], s[3]);

    Laik_Space* four = laik_new_space_1d(inst, 4);
    Laik_Data* tot = laik_new_data(four, laik_Double);
    laik_set_initial_partitioning(tot, laik_new_partitioning(laik_All, all, four, 0));
    laik_set_map_memory(tot, 0, s, sizeof s);
    laik_switchto_partitioning(tot, laik_new_partitioning(laik_Master, all, four, 0),
                               LAIK_DF_Preserve, LAIK_RO_Sum);
    if (me == 0) {
        laik_get_map_1d(tot, 0, (void**) &p, &cnt);
        printf("Total sums: %.0f, %.0f, %.0f, %.0f\n", p[0], p[1], p[2], p[3]);
    }
    laik_finalize(inst);
    return 0;
}
