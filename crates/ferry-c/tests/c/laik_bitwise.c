/* laik.h from C: LAIK_RO_And and LAIK_RO_Or, LAIK's bitwise reductions over its integer
 * types (neutral elements: all bits set for And, none for Or). For int32, uint64 and uchar
 * containers over a 1d space of N elements:
 *  - All with Init + Or gives every copy 0, All with Init + And all bits set (checked);
 *  - every process sets (Or) or clears (And) bits of its own in every element, then
 *    All -> Master with Preserve + the operation combines the copies at the master;
 *  - All -> All with Preserve + Or (an all-reduce) gives every process the combination;
 *  - All -> block with Preserve + And combines into each process's own range.
 * Each result is compared with the value computed here. With -f the program asks for
 * LAIK_RO_Or over a double container, which LAIK refuses: the switch is a fatal error.
 * Exits 1 on the first mismatch; the master prints one line otherwise. */
#include <laik.h>
#include <stdio.h>
#include <string.h>

#define N 257

/* the bits process r contributes to element i (of a type of `bytes` bytes) */
static uint64_t bits(int r, int64_t i, int bytes)
{
    uint64_t v = (1ull << (r % (8 * bytes))) | ((uint64_t) (i * 37) << 3);
    return bytes == 8 ? v : v & ((1ull << (8 * bytes)) - 1);
}

static uint64_t get(void* base, uint64_t k, int bytes)
{
    switch (bytes) {
    case 1: return ((unsigned char*) base)[k];
    case 4: return (uint32_t) ((int32_t*) base)[k];
    default: return ((uint64_t*) base)[k];
    }
}

static void put(void* base, uint64_t k, int bytes, uint64_t v)
{
    switch (bytes) {
    case 1: ((unsigned char*) base)[k] = (unsigned char) v; break;
    case 4: ((int32_t*) base)[k] = (int32_t) (uint32_t) v; break;
    default: ((uint64_t*) base)[k] = v;
    }
}

static uint64_t ones(int bytes) { return bytes == 8 ? ~0ull : (1ull << (8 * bytes)) - 1; }

static int fail(int me, const char* what, const char* type, int64_t i, uint64_t got,
                uint64_t want)
{
    printf("rank %d: %s over %s: index %lld is %#llx, expected %#llx\n", me, what, type,
           (long long) i, (unsigned long long) got, (unsigned long long) want);
    return 1;
}

/* the combination of every process's contribution to element i */
static uint64_t combined(int n, int64_t i, int bytes, int and)
{
    uint64_t v = and ? ones(bytes) : 0;
    for (int r = 0; r < n; r++) {
        uint64_t b = bits(r, i, bytes);
        v = and ? (v & ~b) : (v | b);
    }
    return v;
}

static int check_type(Laik_Instance* inst, Laik_Type* t, const char* name, int bytes)
{
    Laik_Group* world = laik_world(inst);
    int me = laik_myid(world), n = laik_size(world);
    Laik_Space* sp = laik_new_space_1d(inst, N);
    Laik_Data* d = laik_new_data(sp, t);
    Laik_Partitioning* all = laik_new_partitioning(laik_All, world, sp, 0);
    Laik_Partitioning* master = laik_new_partitioning(laik_Master, world, sp, 0);
    Laik_Partitioning* block = laik_new_partitioning(laik_new_block_partitioner1(), world, sp, 0);
    void* base;
    uint64_t cnt;

    for (int and = 0; and < 2; and++) {
        Laik_ReductionOperation op = and ? LAIK_RO_And : LAIK_RO_Or;
        const char* what = and ? "And" : "Or";
        /* Init: the neutral element everywhere */
        laik_switchto_partitioning(d, all, LAIK_DF_Init, op);
        laik_get_map_1d(d, 0, &base, &cnt);
        for (uint64_t k = 0; k < cnt; k++) {
            uint64_t want = and ? ones(bytes) : 0;
            if (get(base, k, bytes) != want)
                return fail(me, "Init", name, (int64_t) k, get(base, k, bytes), want);
            uint64_t b = bits(me, (int64_t) k, bytes);
            put(base, k, bytes, and ? (want & ~b) : b);
        }
        laik_switchto_partitioning(d, master, LAIK_DF_Preserve, op);
        if (me == 0) {
            laik_get_map_1d(d, 0, &base, &cnt);
            for (uint64_t k = 0; k < cnt; k++) {
                uint64_t want = combined(n, (int64_t) k, bytes, and);
                if (get(base, k, bytes) != want)
                    return fail(me, what, name, (int64_t) k, get(base, k, bytes), want);
            }
        }
        /* every process starts from its own contribution again, then all-reduce */
        laik_switchto_partitioning(d, all, LAIK_DF_None, LAIK_RO_None);
        laik_get_map_1d(d, 0, &base, &cnt);
        for (uint64_t k = 0; k < cnt; k++) {
            uint64_t b = bits(me, (int64_t) k, bytes);
            put(base, k, bytes, and ? (ones(bytes) & ~b) : b);
        }
        laik_switchto_partitioning(d, all, LAIK_DF_Preserve, op);
        laik_get_map_1d(d, 0, &base, &cnt);
        for (uint64_t k = 0; k < cnt; k++) {
            uint64_t want = combined(n, (int64_t) k, bytes, and);
            if (get(base, k, bytes) != want)
                return fail(me, "all-reduce", name, (int64_t) k, get(base, k, bytes), want);
        }
    }
    /* All -> block with And: each process gets its range combined */
    laik_switchto_partitioning(d, all, LAIK_DF_None, LAIK_RO_None);
    laik_get_map_1d(d, 0, &base, &cnt);
    for (uint64_t k = 0; k < cnt; k++)
        put(base, k, bytes, ones(bytes) & ~bits(me, (int64_t) k, bytes));
    laik_switchto_partitioning(d, block, LAIK_DF_Preserve, LAIK_RO_And);
    int64_t from, to;
    if (laik_my_range_1d(block, 0, &from, &to)) {
        laik_get_map_1d(d, 0, &base, &cnt);
        for (int64_t i = from; i < to; i++) {
            uint64_t want = combined(n, i, bytes, 1);
            uint64_t got = get(base, (uint64_t) (i - from), bytes);
            if (got != want) return fail(me, "And into block", name, i, got, want);
        }
    }
    return 0;
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    if (argc > 1 && strcmp(argv[1], "-f") == 0) {
        Laik_Space* sp = laik_new_space_1d(inst, N);
        Laik_Data* d = laik_new_data(sp, laik_Double);
        laik_switchto_new_partitioning(d, world, laik_All, LAIK_DF_None, LAIK_RO_None);
        laik_switchto_new_partitioning(d, world, laik_Master, LAIK_DF_Preserve, LAIK_RO_Or);
        printf("rank %d: LAIK_RO_Or over doubles was accepted\n", laik_myid(world));
        laik_finalize(inst);
        return 0;
    }
    if (check_type(inst, laik_Int32, "int32", 4) || check_type(inst, laik_UInt64, "uint64", 8) ||
        check_type(inst, laik_UChar, "uchar", 1))
        return 1;
    if (laik_myid(world) == 0)
        printf("And and Or on %d processes: ok\n", laik_size(world));
    laik_finalize(inst);
    return 0;
}
