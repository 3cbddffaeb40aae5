/* laik.h from C: a Markov chain pushed along a fan-out graph, written against the LAIK calls
 * LAIK's markov2 uses (an application partitioner over a base partitioning's task ranges with
 * LAIK_PF_Merge, Init + Sum and Preserve + Sum switches, a Master collection). Prints what the
 * markov2 conformance cases expect. Usage: laik_chain [-f] [states [fan-out [iters [istate]]]] */
#include <laik.h>

typedef struct {
    int n, out;
    int* to;     /* n x (out + 1) targets, column 0 = the state itself */
    double* w;   /* matching probabilities, each row sums to 1 */
} Graph;

static void build(Graph* g, int fine)
{
    for (int i = 0; i < g->n; i++) {
        int* t = g->to + (size_t) i * (g->out + 1);
        double* w = g->w + (size_t) i * (g->out + 1);
        double total = 5.0;
        int step = 1;
        t[0] = i;
        w[0] = 5.0;
        for (int j = 1; j <= g->out; j++) {
            t[j] = (i + step) % g->n;
            w[j] = (double) ((j + i) % (5 * g->out)) + 1;
            total += w[j];
            step = 2 * step + j + fine * (i % 37);
            while (step > g->n) step -= g->n;
        }
        for (int j = 0; j <= g->out; j++) w[j] /= total;
    }
}

/* every task may write the targets of the states it owns in the base partitioning */
static void targets(Laik_RangeReceiver* r, Laik_PartitionerParams* p)
{
    Graph* g = laik_partitioner_data(p->partitioner);
    int count = laik_partitioning_rangecount(p->other);
    for (int k = 0; k < count; k++) {
        Laik_TaskRange* tr = laik_partitioning_get_taskrange(p->other, k);
        const Laik_Range* own = laik_taskrange_get_range(tr);
        for (int64_t s = own->from.i[0]; s < own->to.i[0]; s++)
            for (int j = 0; j <= g->out; j++)
                laik_append_index_1d(r, laik_taskrange_get_task(tr),
                                     g->to[s * (g->out + 1) + j]);
    }
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    int me = laik_myid(world), a = 1, fine = 0;
    for (; a < argc && argv[a][0] == '-'; a++)
        if (argv[a][1] == 'f') fine = 1;
    int n = argc > a ? atoi(argv[a]) : 0;
    int out = argc > a + 1 ? atoi(argv[a + 1]) : 0;
    int iters = argc > a + 2 ? atoi(argv[a + 2]) : 10;
    int one = argc > a + 3 ? atoi(argv[a + 3]) : -1;
    if (n == 0) n = 100000;
    if (out == 0) out = 10;
    if (n < 6) {
        if (me == 0) printf("State count too small, set to 5\n");
        n = 5;
    }
    if (out >= n) {
        if (me == 0) printf("Fan-out of %d too high (state count: %d), set to %d\n", out, n, n / 2);
        out = n / 2;
    }
    if (one >= n) one = -1;
    if (me == 0) {
        printf("Init Markov chain with %d states, max fan-out %d.\n", n, out);
        printf("Running %d iterations.%s%s%s\n", iters, "", "", "");
        if (one >= 0) printf("Initial values: all 0, just state %d set to 1.\n", one);
        else printf("All initial values set to %f.\n", 1.0 / n);
    }
    Graph g = { n, out, malloc(sizeof(int) * n * (out + 1)), malloc(sizeof(double) * n * (out + 1)) };
    build(&g, fine);

    Laik_Space* sp = laik_new_space_1d(inst, n);
    Laik_Data* d[2] = { laik_new_data(sp, laik_Double), laik_new_data(sp, laik_Double) };
    Laik_Partitioning* rd = laik_new_partitioning(laik_new_block_partitioner1(), world, sp, 0);
    Laik_Partitioning* wr = laik_new_partitioning(
        laik_new_partitioner("targets", targets, &g, LAIK_PF_Merge), world, sp, rd);

    double *src, *dst;
    uint64_t cnt, off;
    int64_t lo, hi;
    laik_switchto_partitioning(d[0], rd, LAIK_DF_None, LAIK_RO_None);
    laik_get_map_1d(d[0], 0, (void**) &src, &cnt);
    for (uint64_t k = 0; k < cnt; k++) src[k] = one < 0 ? 1.0 / n : 0.0;
    if (one >= 0 && laik_global2local_1d(d[0], one, &off)) src[off] = 1.0;

    Laik_Data* last = d[0];
    for (int it = 0; it < iters; it++) {
        Laik_Data* from = d[it & 1];
        Laik_Data* into = d[1 - (it & 1)];
        laik_switchto_partitioning(from, rd, LAIK_DF_Preserve, LAIK_RO_Sum);
        laik_get_map_1d(from, 0, (void**) &src, &cnt);
        laik_my_range_1d(rd, 0, &lo, &hi);
        laik_switchto_partitioning(into, wr, LAIK_DF_Init, LAIK_RO_Sum);
        laik_get_map_1d(into, 0, (void**) &dst, &cnt);
        /* a rank owning no state writes nothing, and has no local index 0 to translate
         * (LAIK's translation fails there, and with more ranks than states that happens) */
        int64_t base = cnt ? laik_local2global_1d(into, 0) : 0;
        for (int64_t s = lo; s < hi; s++)
            for (int j = 0; j <= out; j++) {
                size_t e = (size_t) s * (out + 1) + j;
                dst[g.to[e] - base] += src[s - lo] * g.w[e];
            }
        last = into;
    }
    laik_switchto_partitioning(last, laik_new_partitioning(laik_Master, world, sp, 0),
                               LAIK_DF_Preserve, LAIK_RO_Sum);
    if (me == 0) {
        double* v;
        laik_get_map_1d(last, 0, (void**) &v, &cnt);
        double sum = 0.0;
        for (int k = 0; k < n; k++) sum += v[k];
        printf("Result probs: p0 = %g, p1 = %g, p2 = %g, Sum: %f\n", v[0], v[1], v[2], sum);
    }
    free(g.to);
    free(g.w);
    laik_finalize(inst);
    return 0;
}
