/* laik.h from C: a lower-triangular sparse matrix-vector product written against the LAIK
 * calls LAIK's spmv uses (block partitioner weighted by row non-zeros, Master / All
 * partitionings, Init + Sum and Preserve + Sum switches). Prints what the spmv conformance
 * cases expect. Usage: laik_rowsum [n] */
#include <laik.h>

static double nonzeros(Laik_Index* row, const void* unused)
{
    (void) unused;
    return (double) row->i[0];
}

/* row r holds columns 0..r-1, all with value n - r; the vector is v[c] = c + 1 */
static double row_product(int n, int64_t r)
{
    double acc = 0.0;
    for (int64_t c = 0; c < r; c++) acc += (double) (n - r) * (double) (c + 1);
    return acc;
}

static void print_total(Laik_Data* d, Laik_Group* g, const char* what)
{
    if (laik_myid(g) != 0) return;
    double *p, s = 0.0;
    uint64_t cnt;
    laik_get_map_1d(d, 0, (void**) &p, &cnt);
    for (uint64_t k = 0; k < cnt; k++) s += p[k];
    printf("Res sum (%s): %f\n", what, s);
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* g = laik_world(inst);
    int n = argc > 1 ? atoi(argv[1]) : 0;
    if (n <= 0 || n > 10000) n = 10000;

    Laik_Space* rows = laik_new_space_1d(inst, n);
    Laik_Data* res = laik_new_data(rows, laik_Double);
    Laik_Partitioning* mine = laik_new_partitioning(laik_new_block_partitioner_iw1(nonzeros, 0),
                                                    g, rows, 0);
    Laik_Partitioning* master = laik_new_partitioning(laik_Master, g, rows, 0);

    laik_switchto_partitioning(res, mine, LAIK_DF_None, LAIK_RO_None);
    double* p;
    uint64_t cnt, off;
    int64_t lo, hi;
    laik_get_map_1d(res, 0, (void**) &p, &cnt);
    for (int k = 0; k < laik_my_rangecount(mine); k++) {
        laik_my_range_1d(mine, k, &lo, &hi);
        for (int64_t r = lo; r < hi; r++)
            if (laik_global2local_1d(res, r, &off)) p[off] = row_product(n, r);
    }
    laik_switchto_partitioning(res, master, LAIK_DF_Preserve, LAIK_RO_None);
    print_total(res, g, "regular");

    laik_iter_reset(inst);
    laik_switchto_partitioning(res, laik_new_partitioning(laik_All, g, rows, 0), LAIK_DF_Init,
                               LAIK_RO_Sum);
    laik_get_map_1d(res, 0, (void**) &p, &cnt);
    for (int k = 0; k < laik_my_rangecount(mine); k++) {
        laik_my_range_1d(mine, k, &lo, &hi);
        for (int64_t r = lo; r < hi; r++) p[r] += row_product(n, r);
    }
    laik_switchto_partitioning(res, master, LAIK_DF_Preserve, LAIK_RO_Sum);
    print_total(res, g, "reduce");
    laik_finalize(inst);
    return 0;
}
