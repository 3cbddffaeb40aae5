/* laik.h from C: reductions over a registered element type of 24 bytes through the program's
 * own functions (laik_type_set_reduce, laik_type_set_init): a sum All -> All, a custom
 * operation onto the master, and an Init flow followed by sums at the master. Every value is
 * checked; rank 0 prints one line per check. With argument "missing", a sum over a registered
 * type without a reduce function must end the program with LAIK's fatal error. */
#include <laik.h>
#include <string.h>

typedef struct {
    double a, b, c;
} Triple;

static int failures = 0;
static long calls = 0;

static void check(Laik_Group* world, const char* what, bool ok)
{
    if (!ok) {
        fprintf(stderr, "rank %d: %s: wrong\n", laik_myid(world), what);
        failures++;
    } else if (laik_myid(world) == 0) {
        printf("%s: ok\n", what);
    }
}

static void reduce(void* out, const void* in1, const void* in2, int count,
                   Laik_ReductionOperation o)
{
    Triple* r = out;
    const Triple* x = in1;
    const Triple* y = in2;
    calls++;
    for (int k = 0; k < count; k++) {
        Triple v;
        if (o == LAIK_RO_Sum) {
            v.a = x[k].a + y[k].a;
            v.b = x[k].b + y[k].b;
            v.c = x[k].c + y[k].c;
        } else if (o == LAIK_RO_Custom) {
            v.a = x[k].a > y[k].a ? x[k].a : y[k].a;
            v.b = x[k].b + y[k].b;
            v.c = x[k].c * y[k].c;
        } else {
            fprintf(stderr, "unexpected reduction %d\n", (int) o);
            exit(2);
        }
        r[k] = v;
    }
}

static void init(void* base, int count, Laik_ReductionOperation o)
{
    Triple* t = base;
    for (int k = 0; k < count; k++) {
        t[k].a = 0;
        t[k].b = 0;
        t[k].c = o == LAIK_RO_Custom ? 1 : 0;
    }
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    int n = laik_size(world), me = laik_myid(world);
    const int64_t N = 5000;
    Triple* base;
    uint64_t count;

    Laik_Type* tt = laik_type_register("triple", sizeof(Triple));
    if (argc > 1 && strcmp(argv[1], "missing") == 0) {
        Laik_Data* d = laik_new_data_1d(inst, tt, N);
        laik_switchto_new_partitioning(d, world, laik_All, LAIK_DF_None, LAIK_RO_None);
        laik_switchto_new_partitioning(d, world, laik_Master, LAIK_DF_Preserve, LAIK_RO_Sum);
        printf("sum without a reduce function did not fail\n");
        laik_finalize(inst);
        return 0;
    }
    laik_type_set_reduce(tt, reduce);
    laik_type_set_init(tt, init);
    Laik_Data* d = laik_new_data_1d(inst, tt, N);

    /* All -> All with a sum */
    laik_switchto_new_partitioning(d, world, laik_All, LAIK_DF_None, LAIK_RO_None);
    laik_get_map_1d(d, 0, (void**) &base, &count);
    for (uint64_t i = 0; i < count; i++) base[i] = (Triple){me + 1, (double) i, 1};
    laik_switchto_new_partitioning(d, world, laik_All, LAIK_DF_Preserve, LAIK_RO_Sum);
    laik_get_map_1d(d, 0, (void**) &base, &count);
    bool ok = count == (uint64_t) N;
    for (uint64_t i = 0; ok && i < count; i++)
        ok = base[i].a == n * (n + 1) / 2.0 && base[i].b == (double) n * i && base[i].c == n;
    check(world, "sum all -> all", ok);

    /* All -> Master with the custom operation */
    laik_switchto_new_partitioning(d, world, laik_All, LAIK_DF_None, LAIK_RO_None);
    laik_get_map_1d(d, 0, (void**) &base, &count);
    for (uint64_t i = 0; i < count; i++) base[i] = (Triple){me + 1.0, (double) i, me + 2.0};
    laik_switchto_new_partitioning(d, world, laik_Master, LAIK_DF_Preserve, LAIK_RO_Custom);
    ok = true;
    if (me == 0) {
        double prod = 1;
        for (int r = 0; r < n; r++) prod *= r + 2;
        laik_get_map_1d(d, 0, (void**) &base, &count);
        ok = count == (uint64_t) N;
        for (uint64_t i = 0; ok && i < count; i++)
            ok = base[i].a == n && base[i].b == (double) n * i && base[i].c == prod;
    }
    check(world, "custom operation at the master", ok);

    /* Init with neutral elements, partial sums, then the sum at the master */
    laik_switchto_new_partitioning(d, world, laik_All, LAIK_DF_Init, LAIK_RO_Sum);
    laik_get_map_1d(d, 0, (void**) &base, &count);
    ok = count == (uint64_t) N;
    for (uint64_t i = 0; ok && i < count; i++) ok = base[i].a == 0 && base[i].b == 0 && base[i].c == 0;
    for (uint64_t i = me; i < count; i += n) base[i] = (Triple){1, (double) i, 2};
    laik_switchto_new_partitioning(d, world, laik_Master, LAIK_DF_Preserve, LAIK_RO_Sum);
    if (me == 0) {
        laik_get_map_1d(d, 0, (void**) &base, &count);
        ok = ok && count == (uint64_t) N;
        for (uint64_t i = 0; ok && i < count; i++)
            ok = base[i].a == 1 && base[i].b == (double) i && base[i].c == 2;
    }
    check(world, "init then sum at the master", ok);
    check(world, "reduce function called", n == 1 || me != 0 || calls > 0);

    /* 2d: Init everywhere, partial values, sums into blocks of rows */
    Laik_Data* d2 = laik_new_data_2d(inst, tt, 7, 5);
    laik_switchto_new_partitioning(d2, world, laik_All, LAIK_DF_Init, LAIK_RO_Sum);
    uint64_t ys, yst, xs;
    laik_get_map_2d(d2, 0, (void**) &base, &ys, &yst, &xs);
    ok = ys == 5 && xs == 7;
    for (uint64_t y = 0; ok && y < ys; y++)
        for (uint64_t x = 0; x < xs; x++)
            if (base[y * yst + x].a != 0 || base[y * yst + x].c != 0) ok = false;
    for (uint64_t y = 0; y < ys; y++)
        for (uint64_t x = 0; x < xs; x++)
            if ((int) ((x + y) % n) == me) base[y * yst + x] = (Triple){1, x + 10.0 * y, 3};
    Laik_Partitioning* rows = laik_switchto_new_partitioning(
        d2, world, laik_new_block_partitioner(1, 1, 0, 0, 0), LAIK_DF_Preserve, LAIK_RO_Sum);
    int64_t x1, x2, y1, y2;
    if (laik_my_rangecount(rows) > 0) {
        laik_my_range_2d(rows, 0, &x1, &x2, &y1, &y2);
        laik_get_map_2d(d2, 0, (void**) &base, &ys, &yst, &xs);
        ok = ok && (int64_t) ys == y2 - y1 && xs == 7;
        for (uint64_t y = 0; ok && y < ys; y++)
            for (uint64_t x = 0; x < xs; x++) {
                Triple v = base[y * yst + x];
                if (v.a != 1 || v.b != x + 10.0 * (y + y1) || v.c != 3) ok = false;
            }
    }
    check(world, "2d init then sums into row blocks", ok);

    laik_finalize(inst);
    return failures ? 1 : 0;
}
