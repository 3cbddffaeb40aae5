/* laik.h from C: a 2d Jacobi relaxation written against the LAIK calls LAIK's jac2d uses
 * (bisection + halo / corner-halo partitionings, 2d mappings with strides, reservations,
 * pre-calculated transitions and action sequences, a Master gather). Prints what the jac2d
 * conformance cases expect.
 * Usage: laik_heat2d [-n] [-s] [-r] [-e] [-a] [size [iterations [repart]]] */
#include <laik.h>

static void borders(Laik_Data* d, Laik_Partitioning* p, int size)
{
    double* b;
    uint64_t ny, stride, nx;
    int64_t x0, x1, y0, y1;
    laik_my_range_2d(p, 0, &x0, &x1, &y0, &y1);
    laik_get_map_2d(d, 0, (void**) &b, &ny, &stride, &nx);
    for (uint64_t x = 0; x < nx; x++) {
        if (y0 == 0) b[x] = -5.0;
        if (y1 == size) b[(ny - 1) * stride + x] = 10.0;
    }
    for (uint64_t y = 0; y < ny; y++) {
        if (x0 == 0) b[y * stride] = -10.0;
        if (x1 == size) b[y * stride + nx - 1] = 5.0;
    }
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* g = laik_world(inst);
    int corners = 1, sum = 0, reserve = 0, trans = 0, actions = 0, a = 1;
    for (; a < argc && argv[a][0] == '-'; a++) {
        char o = argv[a][1];
        corners &= o != 'n';
        sum |= o == 's';
        reserve |= o == 'r';
        trans |= o == 'e';
        actions |= o == 'a';
    }
    int size = argc > a ? atoi(argv[a]) : 0, iters = argc > a + 1 ? atoi(argv[a + 1]) : 0;
    int repart = argc > a + 2 ? atoi(argv[a + 2]) : 0;
    if (size == 0) size = 2500;
    if (iters == 0) iters = 50;
    if (laik_myid(g) == 0) {
        printf("%d x %d cells (mem %.1f MB), running %d iterations with %d tasks", size, size,
               .000016 * size * size, iters, laik_size(g));
        if (!corners) printf(" (halo without corners)");
        if (repart > 0) printf("\n  with repartitioning every %d iterations\n", repart);
        printf("\n");
    }
    Laik_Space* sp = laik_new_space_2d(inst, size, size);
    Laik_Data* d[2] = { laik_new_data(sp, laik_Double), laik_new_data(sp, laik_Double) };
    Laik_Partitioning* pw = laik_new_partitioning(laik_new_bisection_partitioner(), g, sp, 0);
    Laik_Partitioning* pr = laik_new_partitioning(
        corners ? laik_new_cornerhalo_partitioner(1) : laik_new_halo_partitioner(1), g, sp, pw);
    Laik_Reservation* res[2] = { 0, 0 };
    for (int k = 0; reserve && k < 2; k++) {
        res[k] = laik_reservation_new(d[k]);
        laik_reservation_add(res[k], pr);
        laik_reservation_add(res[k], pw);
        laik_reservation_alloc(res[k]);
        laik_data_use_reservation(d[k], res[k]);
    }
    Laik_Transition *toR = 0, *toW = 0;
    Laik_ActionSeq* seq[2][2] = { { 0, 0 }, { 0, 0 } };
    if (trans || actions) {
        toR = laik_calc_transition(sp, pw, pr, LAIK_DF_Preserve, LAIK_RO_None);
        toW = laik_calc_transition(sp, pr, pw, LAIK_DF_None, LAIK_RO_None);
        for (int k = 0; actions && k < 2; k++) {
            seq[k][0] = laik_calc_actions(d[k], toR, res[k], res[k]);
            seq[k][1] = laik_calc_actions(d[k], toW, res[k], res[k]);
        }
    }
    Laik_Space* one = laik_new_space_1d(inst, 1);
    Laik_Data* acc = laik_new_data(one, laik_Double);
    laik_switchto_partitioning(acc, laik_new_partitioning(laik_All, g, one, 0), LAIK_DF_None,
                               LAIK_RO_None);

    double *r, *w, *s;
    uint64_t ny, sw, nx, rny, sr, rnx;
    int64_t x0, x1, y0, y1;
    laik_switchto_partitioning(d[0], pw, LAIK_DF_None, LAIK_RO_None);
    laik_my_range_2d(pw, 0, &x0, &x1, &y0, &y1);
    laik_get_map_2d(d[0], 0, (void**) &w, &ny, &sw, &nx);
    for (uint64_t y = 0; y < ny; y++)
        for (uint64_t x = 0; x < nx; x++) w[y * sw + x] = (double) ((x0 + x + y0 + y) & 6);
    borders(d[0], pw, size);
    laik_switchto_partitioning(d[1], pr, LAIK_DF_None, LAIK_RO_None);

    int it = 0, cur = 0;
    for (; it < iters; it++) {
        int rd = cur, wr = 1 - cur;
        cur = wr;
        if (actions) {
            laik_exec_actions(seq[rd][0]);
            laik_exec_actions(seq[wr][1]);
        } else if (trans) {
            laik_exec_transition(d[rd], toR);
            laik_exec_transition(d[wr], toW);
        } else {
            laik_switchto_partitioning(d[rd], pr, LAIK_DF_Preserve, LAIK_RO_None);
            laik_switchto_partitioning(d[wr], pw, LAIK_DF_None, LAIK_RO_None);
        }
        laik_get_map_2d(d[rd], 0, (void**) &r, &rny, &sr, &rnx);
        laik_get_map_2d(d[wr], 0, (void**) &w, &ny, &sw, &nx);
        borders(d[wr], pw, size);
        int64_t ya = y0 == 0, xa = x0 == 0;
        int64_t yb = y1 == size ? (int64_t) ny - 1 : (int64_t) ny;
        int64_t xb = x1 == size ? (int64_t) nx - 1 : (int64_t) nx;
        if (x0 > 0) r += 1;
        if (y0 > 0) r += sr;
        double resid = 0.0;
        for (int64_t y = ya; y < yb; y++)
            for (int64_t x = xa; x < xb; x++) {
                double v = 0.25 * (r[(y - 1) * sr + x] + r[y * sr + x - 1] + r[y * sr + x + 1] +
                                   r[(y + 1) * sr + x]);
                if (it % 10 == 0) resid += (r[y * sr + x] - v) * (r[y * sr + x] - v);
                w[y * sw + x] = v;
            }
        if (it % 10 == 0) {
            laik_switchto_flow(acc, LAIK_DF_None, LAIK_RO_None);
            laik_get_map_1d(acc, 0, (void**) &s, 0);
            *s = resid;
            laik_switchto_flow(acc, LAIK_DF_Preserve, LAIK_RO_Sum);
            laik_get_map_1d(acc, 0, (void**) &s, 0);
            if (laik_myid(g) == 0) printf("Residuum after %2d iters: %f\n", it + 1, *s);
            if (*s < .001) break;
        }
    }
    if (sum) {
        Laik_Data* last = d[cur];
        laik_switchto_partitioning(last, laik_new_partitioning(laik_Master, g, sp, 0),
                                   LAIK_DF_Preserve, LAIK_RO_None);
        if (laik_myid(g) == 0) {
            double total = 0.0;
            laik_get_map_2d(last, 0, (void**) &w, &ny, &sw, &nx);
            for (uint64_t y = 0; y < ny; y++)
                for (uint64_t x = 0; x < nx; x++) total += w[y * sw + x];
            printf("Global value sum after %d iterations: %f\n", it, total);
        }
    }
    laik_finalize(inst);
    return 0;
}
