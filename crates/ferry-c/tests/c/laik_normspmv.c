/* laik.h from C: an iterated, normalised sparse matrix-vector product over a shrinking group,
 * written against the LAIK calls LAIK's spmv2 uses (row blocks weighted by non-zeros, the
 * input vector broadcast by an All partitioning or by Init + Sum, a shrinked group with the
 * rows re-partitioned by the block or the reassign partitioner). Prints what the spmv2
 * conformance cases expect. Usage: laik_normspmv [-r] [-i] [-s iter] [-t task] [iters [size]] */
#include <laik.h>

static double nnz(Laik_Index* row, const void* unused)
{
    (void) unused;
    return (double) row->i[0];
}

static double all_sum(Laik_Data* acc, double x)
{
    double* p;
    laik_switchto_flow(acc, LAIK_DF_None, LAIK_RO_None);
    laik_get_map_1d(acc, 0, (void**) &p, 0);
    *p = x;
    laik_switchto_flow(acc, LAIK_DF_Preserve, LAIK_RO_Sum);
    laik_get_map_1d(acc, 0, (void**) &p, 0);
    return *p;
}

/* sum of a container gathered at the group's first process (only valid there) */
static double gathered_sum(Laik_Data* d, Laik_Group* g, Laik_Space* sp)
{
    laik_switchto_partitioning(d, laik_new_partitioning(laik_Master, g, sp, 0), LAIK_DF_Preserve,
                               LAIK_RO_None);
    double *p, s = 0.0;
    uint64_t n;
    if (laik_myid(g) == 0 && laik_get_map_1d(d, 0, (void**) &p, &n))
        for (uint64_t k = 0; k < n; k++) s += p[k];
    return s;
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* g = laik_world(inst);
    int by_sum = 0, incremental = 0, every = 0, victim = 0, a = 1;
    for (; a < argc && argv[a][0] == '-'; a++) {
        if (argv[a][1] == 'r') by_sum = 1;
        if (argv[a][1] == 'i') incremental = 1;
        if (argv[a][1] == 's' && a + 1 < argc) every = atoi(argv[++a]);
        if (argv[a][1] == 't' && a + 1 < argc) victim = atoi(argv[++a]);
    }
    int iters = argc > a ? atoi(argv[a]) : 0, size = argc > a + 1 ? atoi(argv[a + 1]) : 0;
    if (iters == 0) iters = 10;
    if (size == 0) size = 10000;
    if (laik_myid(g) == 0)
        printf("Running %d iterations, SpM side %d (~%.1f MB), %d tasks\n", iters, size,
               1e-6 * size * size * 6, laik_size(g));

    Laik_Space* sp = laik_new_space_1d(inst, size);
    Laik_Space* one = laik_new_space_1d(inst, 1);
    Laik_Data* res = laik_new_data(sp, laik_Double);
    Laik_Data* inp = laik_new_data(sp, laik_Double);
    Laik_Data* acc = laik_new_data(one, laik_Double);
    Laik_Partitioner* blocks = laik_new_block_partitioner_iw1(nnz, 0);
    Laik_Partitioning* rows = laik_new_partitioning(blocks, g, sp, 0);
    Laik_Partitioning* all = laik_new_partitioning(laik_All, g, sp, 0);
    laik_switchto_partitioning(acc, laik_new_partitioning(laik_All, g, one, 0), LAIK_DF_None,
                               LAIK_RO_None);

    double *in, *out;
    uint64_t n, off;
    int64_t lo, hi;
    laik_switchto_partitioning(inp, laik_new_partitioning(laik_Master, g, sp, 0), LAIK_DF_None,
                               LAIK_RO_None);
    if (laik_get_map_1d(inp, 0, (void**) &in, &n))
        for (uint64_t k = 0; k < n; k++) in[k] = 1.0;
    laik_switchto_partitioning(inp, all, LAIK_DF_Preserve, LAIK_RO_None);

    int next = every;
    for (int it = 0; it < iters; it++) {
        laik_switchto_partitioning(res, rows, LAIK_DF_None, LAIK_RO_None);
        laik_get_map_1d(inp, 0, (void**) &in, &n);
        double mine = 0.0;
        for (int k = 0; k < laik_my_rangecount(rows); k++) {
            laik_my_range_1d(rows, k, &lo, &hi);
            int m;
            laik_global2maplocal_1d(res, lo, &m, &off);
            laik_get_map_1d(res, m, (void**) &out, &n);
            for (int64_t r = lo; r < hi; r++) {
                double v = 0.0;
                for (int64_t c = 0; c < r; c++) v += (double) (size - r) * in[c];
                out[off + (uint64_t) (r - lo)] = v;
                mine += v;
            }
        }
        double sum = all_sum(acc, mine);
        if (laik_myid(g) == 0) printf("Sum at iter %2d: %f\n", it, sum);

        if (by_sum) {
            laik_switchto_partitioning(inp, all, LAIK_DF_Init, LAIK_RO_Sum);
            laik_get_map_1d(inp, 0, (void**) &in, &n);
        } else {
            laik_switchto_partitioning(inp, rows, LAIK_DF_None, LAIK_RO_None);
        }
        for (int k = 0; k < laik_my_rangecount(rows); k++) {
            laik_my_range_1d(rows, k, &lo, &hi);
            for (int64_t r = lo; r < hi; r++) {
                int m, mi;
                uint64_t ro, io;
                laik_global2maplocal_1d(res, r, &m, &ro);
                laik_get_map_1d(res, m, (void**) &out, &n);
                laik_global2maplocal_1d(inp, r, &mi, &io);
                laik_get_map_1d(inp, mi, (void**) &in, &n);
                in[io] = out[ro] / sum;
            }
        }
        laik_switchto_partitioning(inp, all, LAIK_DF_Preserve, by_sum ? LAIK_RO_Sum : LAIK_RO_None);

        if (every > 0 && it == next && it + 1 < iters && laik_size(g) > 1 &&
            laik_size(g) >= victim) {
            next += every;
            int gone[1] = { victim };
            Laik_Group* g2 = laik_new_shrinked_group(g, 1, gone);
            Laik_Partitioning* rows2 = laik_new_partitioning(
                incremental ? laik_new_reassign_partitioner(g2, nnz, 0) : blocks, g2, sp, rows);
            Laik_Partitioning* all2 = laik_new_partitioning(laik_All, g2, sp, 0);
            laik_switchto_partitioning(res, rows2, LAIK_DF_Preserve, LAIK_RO_None);
            laik_switchto_partitioning(inp, all2, LAIK_DF_Preserve, LAIK_RO_None);
            laik_switchto_partitioning(acc, laik_new_partitioning(laik_All, g2, one, 0),
                                       LAIK_DF_None, LAIK_RO_None);
            g = g2;
            rows = rows2;
            all = all2;
            if (laik_myid(g) < 0) break;
        }
    }
    if (laik_myid(g) >= 0) {
        double rs = gathered_sum(res, g, sp), is = gathered_sum(inp, g, sp);
        if (laik_myid(g) == 0) {
            printf("Result sum: %f (should be same as last iter sum)\n", rs);
            printf("Input sum: %f (should be 1.0)\n", is);
        }
    }
    laik_finalize(inst);
    return 0;
}
