/* laik.h from C: element/node propagation on a 2d mesh written against the LAIK calls LAIK's
 * propagation2d uses (application partitioners giving each process several ranges, one
 * mapping per range, global <-> map-local index translation, Init + Sum and Preserve + Sum
 * switches to the same partitioning to add up shared node copies, an All sum). Prints what
 * the propagation2d conformance cases expect. Usage: laik_mesh [size [maxiter]] */
#include <laik.h>

typedef struct {
    int rx, ry, size;
    int64_t lx, ly;
} Mesh;

static Mesh mesh;

/* element rows of task t: `size` ranges of `size` elements */
static void element_rows(Laik_RangeReceiver* r, Laik_PartitionerParams* p)
{
    for (int t = 0; t < laik_size(p->group); t++) {
        int64_t ix = t % mesh.rx, iy = t / mesh.rx;
        for (int64_t jy = iy * mesh.size; jy < (iy + 1) * mesh.size; jy++) {
            Laik_Range row;
            int64_t from = jy * mesh.lx + ix * mesh.size;
            laik_range_init_1d(&row, p->space, from, from + mesh.size);
            laik_append_range(r, t, &row, 0, 0);
        }
    }
}

/* node rows of task t: the size + 1 rows of nodes bounding its elements */
static void node_rows(Laik_RangeReceiver* r, Laik_PartitionerParams* p)
{
    for (int t = 0; t < laik_size(p->group); t++) {
        int64_t ix = t % mesh.rx, iy = t / mesh.rx;
        for (int64_t y = iy * mesh.size; y <= (iy + 1) * mesh.size; y++) {
            Laik_Range row;
            int64_t from = y * (mesh.lx + 1) + ix * mesh.size;
            laik_range_init_1d(&row, p->space, from, from + mesh.size + 1);
            laik_append_range(r, t, &row, 0, 0);
        }
    }
}

static double* row_of(Laik_Data* d, int64_t first, uint64_t* len)
{
    int map;
    uint64_t off;
    double* base;
    if (!laik_global2maplocal_1d(d, first, &map, &off)) return 0;
    laik_get_map_1d(d, map, (void**) &base, len);
    if (laik_maplocal2global_1d(d, map, off) != first) return 0;
    return base + off;
}

static void boundary(Laik_Data* nodes, Laik_Partitioning* pn, int me, double v)
{
    int ix = me % mesh.rx, iy = me / mesh.rx, rows = laik_my_rangecount(pn);
    for (int k = 0; k < rows; k++) {
        int64_t from, to;
        uint64_t len;
        laik_my_range_1d(pn, k, &from, &to);
        double* n = row_of(nodes, from, &len);
        if (ix == 0) n[0] = v;
        if (ix == mesh.rx - 1) n[to - from - 1] = v;
        if ((iy == 0 && k == 0) || (iy == mesh.ry - 1 && k == rows - 1))
            for (int64_t q = 0; q < to - from; q++) n[q] = v;
    }
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* g = laik_world(inst);
    int size = argc > 1 ? atoi(argv[1]) : 0, maxiter = argc > 2 ? atoi(argv[2]) : 0;
    if (size <= 0) size = 10;
    if (maxiter <= 0) maxiter = 5;
    int procs = laik_size(g), me = laik_myid(g), ry = 1;
    for (int d = 1; d * d <= procs; d++)
        if (procs % d == 0) ry = d;
    mesh = (Mesh){ procs / ry, ry, size, (int64_t) size * (procs / ry), (int64_t) size * ry };

    Laik_Space* es = laik_new_space_1d(inst, mesh.lx * mesh.ly);
    Laik_Space* ns = laik_new_space_1d(inst, (mesh.lx + 1) * (mesh.ly + 1));
    Laik_Partitioning* pe = laik_new_partitioning(
        laik_new_partitioner("element-rows", element_rows, 0, LAIK_PF_None), g, es, 0);
    Laik_Partitioning* pn = laik_new_partitioning(
        laik_new_partitioner("node-rows", node_rows, 0, LAIK_PF_None), g, ns, 0);
    Laik_Data* elems = laik_new_data(es, laik_Double);
    Laik_Data* nodes = laik_new_data(ns, laik_Double);
    laik_switchto_partitioning(elems, pe, LAIK_DF_None, LAIK_RO_None);
    laik_switchto_partitioning(nodes, pn, LAIK_DF_None, LAIK_RO_None);
    int erows = laik_my_rangecount(pe);
    if (laik_my_mapcount(pn) != erows + 1) {
        printf("expected %d node mappings, got %d\n", erows + 1, laik_my_mapcount(pn));
        return 1;
    }
    for (int m = 0; m < laik_my_mapcount(pe); m++) {
        double* e;
        uint64_t len;
        laik_get_map_1d(elems, m, (void**) &e, &len);
        for (uint64_t q = 0; q < len; q++) e[q] = 1.0;
    }
    laik_fill_double(nodes, 0.0);
    boundary(nodes, pn, me, 0.0);

    double v = 1.0;
    for (int it = 0; it < maxiter; it++) {
        for (int k = 0; k < erows; k++) {
            int64_t from, to, nf, nt, nf2, nt2;
            uint64_t len;
            laik_my_range_1d(pe, k, &from, &to);
            laik_my_range_1d(pn, k, &nf, &nt);
            laik_my_range_1d(pn, k + 1, &nf2, &nt2);
            double* e = row_of(elems, from, &len);
            double *lo = row_of(nodes, nf, &len), *hi = row_of(nodes, nf2, &len);
            for (int q = 0; q < size; q++) e[q] += 0.25 * (lo[q] + lo[q + 1] + hi[q] + hi[q + 1]);
        }
        laik_switchto_partitioning(nodes, pn, LAIK_DF_Init, LAIK_RO_Sum);
        for (int k = 0; k < erows; k++) {
            int64_t from, to, nf, nt, nf2, nt2;
            uint64_t len;
            laik_my_range_1d(pe, k, &from, &to);
            laik_my_range_1d(pn, k, &nf, &nt);
            laik_my_range_1d(pn, k + 1, &nf2, &nt2);
            double* e = row_of(elems, from, &len);
            double *lo = row_of(nodes, nf, &len), *hi = row_of(nodes, nf2, &len);
            for (int q = 0; q < size; q++) {
                double share = 0.25 * e[q];
                lo[q] += share;
                lo[q + 1] += share;
                hi[q] += share;
                hi[q + 1] += share;
            }
        }
        laik_switchto_flow(nodes, LAIK_DF_Preserve, LAIK_RO_Sum);
        boundary(nodes, pn, me, v);
        if (it + 1 < maxiter) v *= 2.0;
    }
    double local = 0.0, *e;
    uint64_t len;
    for (int m = 0; laik_get_map_1d(elems, m, (void**) &e, &len); m++)
        for (uint64_t q = 0; q < len; q++) local += e[q];
    Laik_Space* one = laik_new_space_1d(inst, 1);
    Laik_Data* acc = laik_new_data(one, laik_Double);
    laik_switchto_partitioning(acc, laik_new_partitioning(laik_All, g, one, 0), LAIK_DF_None,
                               LAIK_RO_None);
    double* s;
    laik_get_map_1d(acc, 0, (void**) &s, 0);
    *s = local;
    laik_switchto_flow(acc, LAIK_DF_Preserve, LAIK_RO_Sum);
    laik_get_map_1d(acc, 0, (void**) &s, 0);
    if (me == 0) {
        printf("expected : %f\n", 1.0);
        printf("calculated: %f\n", *s / ((double) mesh.lx * mesh.ly * v));
    }
    laik_finalize(inst);
    return 0;
}
