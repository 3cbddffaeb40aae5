/* laik.h from C: a 1d Jacobi relaxation written against the LAIK calls that LAIK's jac1d uses
 * (block + corner-halo partitionings, two containers alternating read/write, global/local
 * index translation, an All container switched with a Sum flow as all-reduce, repartitioning
 * with task weights). Prints what the jac1d conformance cases expect.
 * Usage: laik_heat1d [kcells [iterations [repart]]] */
#include <assert.h>
#include <laik.h>

static double uneven(int task, const void* round)
{
    return 1.0 + task * (*(const int*) round & 1);
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

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* g = laik_world(inst);
    int k = argc > 1 ? atoi(argv[1]) : 0, iters = argc > 2 ? atoi(argv[2]) : 0;
    int repart = argc > 3 ? atoi(argv[3]) : 0;
    if (k == 0) k = 10000;
    if (iters == 0) iters = 50;
    if (laik_myid(g) == 0) {
        printf("%d k cells (mem %.1f MB), running %d iterations with %d tasks\n", k,
               .016 * k, iters, laik_size(g));
        if (repart > 0) printf("  with repartitioning every %d iterations\n", repart);
    }
    int64_t n = (int64_t) k * 1000;

    Laik_Space* one = laik_new_space_1d(inst, 1);
    Laik_Data* acc = laik_new_data(one, laik_Double);
    laik_switchto_partitioning(acc, laik_new_partitioning(laik_All, g, one, 0),
                               LAIK_DF_None, LAIK_RO_None);

    Laik_Space* sp = laik_new_space_1d(inst, n);
    Laik_Data* buf[2] = { laik_new_data(sp, laik_Double), laik_new_data(sp, laik_Double) };
    Laik_Partitioner* own = laik_new_block_partitioner1();
    Laik_Partitioner* halo = laik_new_cornerhalo_partitioner(1);
    Laik_Partitioning* pw = laik_new_partitioning(own, g, sp, 0);
    Laik_Partitioning* pr = laik_new_partitioning(halo, g, sp, pw);

    double *r, *w;
    uint64_t nr, nw, off;
    int64_t lo, hi;
    laik_switchto_partitioning(buf[0], pw, LAIK_DF_None, LAIK_RO_None);
    laik_my_range_1d(pw, 0, &lo, &hi);
    laik_get_map_1d(buf[0], 0, (void**) &w, &nw);
    for (uint64_t i = 0; i < nw; i++) w[i] = (double) ((lo + (int64_t) i) & 6);
    if (laik_global2local_1d(buf[0], 0, &off)) w[off] = -5.0;
    if (laik_global2local_1d(buf[0], n - 1, &off)) w[off] = 10.0;

    int it = 0;
    Laik_Data* last = buf[0];
    for (; it < iters; it++) {
        Laik_Data* rd = buf[it & 1];
        Laik_Data* wr = buf[1 - (it & 1)];
        laik_switchto_partitioning(rd, pr, LAIK_DF_Preserve, LAIK_RO_None);
        laik_switchto_partitioning(wr, pw, LAIK_DF_None, LAIK_RO_None);
        last = wr;
        laik_get_map_1d(rd, 0, (void**) &r, &nr);
        laik_get_map_1d(wr, 0, (void**) &w, &nw);
        int64_t a = 0, b = (int64_t) nw;
        if (laik_global2local_1d(wr, 0, &off)) {
            w[off] = -5.0;
            a = 1;
        } else {
            assert(laik_local2global_1d(wr, 0) == laik_local2global_1d(rd, 0) + 1);
            r++;
        }
        if (laik_global2local_1d(wr, n - 1, &off)) {
            w[off] = 10.0;
            b--;
        }
        if (it % 10 == 0) {
            double res = 0.0;
            for (int64_t i = a; i < b; i++) {
                double nv = 0.5 * (r[i - 1] + r[i + 1]);
                res += (r[i] - nv) * (r[i] - nv);
                w[i] = nv;
            }
            res = all_sum(acc, res);
            if (laik_myid(laik_data_get_group(acc)) == 0)
                printf("Residuum after %2d iters: %f\n", it + 1, res);
            if (res < .001) break;
        } else {
            for (int64_t i = a; i < b; i++) w[i] = 0.5 * (r[i - 1] + r[i + 1]);
        }
        if (repart > 0 && it > 0 && it % repart == 0) {
            static int round;
            round = it / repart;
            laik_set_task_weight(own, uneven, &round);
            Laik_Partitioning* npw = laik_new_partitioning(own, g, sp, 0);
            Laik_Partitioning* npr = laik_new_partitioning(halo, g, sp, npw);
            laik_switchto_partitioning(wr, npw, LAIK_DF_Preserve, LAIK_RO_None);
            laik_switchto_partitioning(rd, npr, LAIK_DF_None, LAIK_RO_None);
            laik_free_partitioning(pw);
            laik_free_partitioning(pr);
            pw = npw;
            pr = npr;
        }
    }
    double sum = 0.0;
    laik_get_map_1d(last, 0, (void**) &w, &nw);
    for (uint64_t i = 0; i < nw; i++) sum += w[i];
    sum = all_sum(acc, sum);
    if (laik_myid(laik_data_get_group(acc)) == 0)
        printf("Global value sum after %d iterations: %f\n", it, sum);
    laik_finalize(inst);
    return 0;
}
