/* laik.h from C: a Markov chain pulled along a fan-in graph, written against the LAIK calls
 * LAIK's markov uses (an application partitioner that extends each process's block of states
 * by the sources of their in-edges, with LAIK_PF_Merge and the single-index hint, Preserve
 * switches from the block to that read partitioning, a Master collection, and with -i/-c the
 * source offsets kept in a container of a type from laik_type_register, which goes to the
 * master and back before it is used). Prints what the markov conformance cases expect.
 * Usage: laik_pull [-s] [-v] [-f] [-i] [-c] [states [fan-in [iters]]] */
#include <laik.h>

typedef struct {
    int n, in;
    int* from;   /* n x (in + 1) sources, column 0 = the state itself */
    double* p;   /* transition probabilities */
} Graph;

static void build(Graph* g, int fine)
{
    int w = g->in + 1;
    double* out = calloc(g->n, sizeof(double));
    for (int i = 0; i < g->n; i++) {
        int step = 1;
        g->from[i * w] = i;
        g->p[i * w] = 5.0;
        for (int j = 1; j <= g->in; j++) {
            g->from[i * w + j] = (i + step) % g->n;
            g->p[i * w + j] = (double) ((j + i) % (5 * g->in)) + 1;
            step = 2 * step + j + fine * (i % 37);
            while (step > g->n) step -= g->n;
        }
    }
    for (int k = 0; k < g->n * w; k++) out[g->from[k]] += g->p[k];
    for (int k = 0; k < g->n * w; k++) g->p[k] /= out[g->from[k]];
    free(out);
}

static void sources(Laik_RangeReceiver* r, Laik_PartitionerParams* p)
{
    Graph* g = laik_partitioner_data(p->partitioner);
    for (int k = 0; k < laik_partitioning_rangecount(p->other); k++) {
        Laik_TaskRange* tr = laik_partitioning_get_taskrange(p->other, k);
        const Laik_Range* own = laik_taskrange_get_range(tr);
        for (int64_t s = own->from.i[0]; s < own->to.i[0]; s++)
            for (int j = 0; j <= g->in; j++)
                laik_append_index_1d(r, laik_taskrange_get_task(tr), g->from[s * (g->in + 1) + j]);
    }
}

/* Offsets of every state's sources in the read mapping, one element of (in + 1) ints per
 * state in a container of a registered type; sent to the master and back (Preserve) and
 * checked, so the values used are those the switches carried. */
static Laik_Data* offsets(Laik_Space* sp, Laik_Data* probe, Laik_Partitioning* pw,
                          Laik_Partitioning* pr, Laik_Partitioning* pm, Graph* g)
{
    int w = g->in + 1;
    Laik_Type* t = laik_type_register("l-indexes", w * sizeof(int));
    Laik_Data* idx = laik_new_data(sp, t);
    laik_switchto_partitioning(probe, pr, LAIK_DF_None, LAIK_RO_None);
    uint64_t held;
    laik_get_map_1d(probe, 0, 0, &held);
    /* no local index 0 to translate on a rank that reads nothing (more ranks than states) */
    int64_t base = held ? laik_local2global_1d(probe, 0) : 0, lo, hi;
    laik_switchto_partitioning(idx, pw, LAIK_DF_None, LAIK_RO_None);
    int* o;
    uint64_t cnt;
    laik_get_map_1d(idx, 0, (void**) &o, &cnt);
    laik_my_range_1d(pw, 0, &lo, &hi);
    for (int64_t i = lo; i < hi; i++)
        for (int j = 0; j < w; j++) o[(i - lo) * w + j] = (int) (g->from[i * w + j] - base);
    laik_switchto_partitioning(idx, pm, LAIK_DF_Preserve, LAIK_RO_None);
    laik_switchto_partitioning(idx, pw, LAIK_DF_Preserve, LAIK_RO_None);
    laik_get_map_1d(idx, 0, (void**) &o, &cnt);
    if (cnt != (uint64_t) (hi - lo)) {
        fprintf(stderr, "offsets: %llu elements back, %lld expected\n",
                (unsigned long long) cnt, (long long) (hi - lo));
        exit(1);
    }
    for (int64_t i = lo; i < hi; i++)
        for (int j = 0; j < w; j++)
            if (o[(i - lo) * w + j] != (int) (g->from[i * w + j] - base)) {
                fprintf(stderr, "offsets: state %lld source %d came back as %d\n",
                        (long long) i, j, o[(i - lo) * w + j]);
                exit(1);
            }
    return idx;
}

static void run(Laik_Data* d[2], Laik_Partitioning* pw, Laik_Partitioning* pr,
                Laik_Partitioning* pm, Graph* g, int iters, int state, Laik_Group* world,
                Laik_Data* idx)
{
    int* o = 0;
    uint64_t ocnt;
    if (idx) laik_get_map_1d(idx, 0, (void**) &o, &ocnt);
    double *v, *src;
    uint64_t cnt, off;
    int64_t lo, hi;
    laik_switchto_partitioning(d[0], pw, LAIK_DF_None, LAIK_RO_None);
    laik_get_map_1d(d[0], 0, (void**) &v, &cnt);
    for (uint64_t k = 0; k < cnt; k++) v[k] = state < 0 ? 1.0 / g->n : 0.0;
    if (state >= 0 && laik_global2local_1d(d[0], state, &off)) v[off] = 1.0;
    Laik_Data* cur = d[0];
    for (int it = 0; it < iters; it++) {
        Laik_Data* next = d[1 - (it & 1)];
        laik_switchto_partitioning(cur, pr, LAIK_DF_Preserve, LAIK_RO_None);
        laik_switchto_partitioning(next, pw, LAIK_DF_None, LAIK_RO_None);
        laik_get_map_1d(cur, 0, (void**) &src, &cnt);
        int64_t base = cnt ? laik_local2global_1d(cur, 0) : 0;
        laik_get_map_1d(next, 0, (void**) &v, &cnt);
        laik_my_range_1d(pw, 0, &lo, &hi);
        for (int64_t i = lo; i < hi; i++) {
            const int* f = g->from + i * (g->in + 1);
            const double* p = g->p + i * (g->in + 1);
            double x;
            if (o) {
                const int* of = o + (i - lo) * (g->in + 1);
                x = src[of[0]] * p[0];
                for (int j = 1; j <= g->in; j++) x += src[of[j]] * p[j];
            } else {
                x = src[i - base] * p[0];
                for (int j = 1; j <= g->in; j++) x += src[f[j] - base] * p[j];
            }
            v[i - lo] = x;
        }
        cur = next;
    }
    laik_switchto_partitioning(cur, pm, LAIK_DF_Preserve, LAIK_RO_None);
    if (laik_myid(world) == 0) {
        laik_get_map_1d(cur, 0, (void**) &v, &cnt);
        double sum = 0.0;
        for (int k = 0; k < g->n; k++) sum += v[k];
        printf("  result probs: p0 = %g, p1 = %g, p2 = %g, Sum: %f\n", v[0], v[1], v[2], sum);
    }
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    int single = 0, verbose = 0, fine = 0, indirect = 0, compact = 0, a = 1;
    for (; a < argc && argv[a][0] == '-'; a++) {
        single |= argv[a][1] == 's';
        indirect |= argv[a][1] == 'i' || argv[a][1] == 'c';
        compact |= argv[a][1] == 'c';
        verbose |= argv[a][1] == 'v';
        fine |= argv[a][1] == 'f';
    }
    int n = argc > a ? atoi(argv[a]) : 0, in = argc > a + 1 ? atoi(argv[a + 1]) : 0;
    int iters = argc > a + 2 ? atoi(argv[a + 2]) : 10;
    if (n == 0) n = 1000000;
    if (in == 0) in = 10;
    if (laik_myid(world) == 0) {
        printf("Init Markov chain with %d states, max fan-in %d\n", n, in);
        printf("Run %d iterations each.%s%s%s\n", iters,
               single ? " Partitioner using single indexes." : "",
               compact ? " Using compact mapping." : "", indirect ? " Using indirection." : "");
    }
    Graph g = { n, in, malloc(sizeof(int) * n * (in + 1)), malloc(sizeof(double) * n * (in + 1)) };
    build(&g, fine);
    if (verbose)
        for (int i = 0; i < n; i++) {
            printf("State %2d: stay %.3f ", i, g.p[i * (in + 1)]);
            for (int j = 1; j <= in; j++)
                printf("<=(%.3f)=%-2d  ", g.p[i * (in + 1) + j], g.from[i * (in + 1) + j]);
            printf("\n");
        }

    Laik_Space* sp = laik_new_space_1d(inst, n);
    Laik_Data* d[2] = { laik_new_data(sp, laik_Double), laik_new_data(sp, laik_Double) };
    Laik_Partitioning* pw = laik_new_partitioning(laik_new_block_partitioner1(), world, sp, 0);
    Laik_Partitioning* pr = laik_new_partitioning(
        laik_new_partitioner("sources", sources, &g,
                             LAIK_PF_Merge | (single ? LAIK_PF_SingleIndex : 0) |
                                 (compact ? LAIK_PF_Compact : 0)),
        world, sp, pw);
    Laik_Partitioning* pm = laik_new_partitioning(laik_Master, world, sp, 0);
    Laik_Data* idx = indirect ? offsets(sp, d[0], pw, pr, pm, &g) : 0;
    const char* starts[3] = { "state 0 prob 1", "state 1 prob 1", "all probs equal" };
    for (int k = 0; k < 3; k++) {
        if (laik_myid(world) == 0) printf("Start with %s ...\n", starts[k]);
        run(d, pw, pr, pm, &g, iters, k < 2 ? k : -1, world, idx);
    }
    free(g.from);
    free(g.p);
    laik_finalize(inst);
    return 0;
}
