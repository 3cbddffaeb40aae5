/* laik.h from C: the calls of LAIK's core.h, program.h, space.h, data.h and ext.h about the
 * world, allocators and agents, each checked against what LAIK does:
 *  - laik_get_guid: the decimal location id, the same string on every call;
 *  - laik_set_args: recorded (the program goes on);
 *  - laik_index_global2local on 1d and 2d block partitionings: true with the index in the
 *    own mapping for every own index, false for every other index;
 *  - allocators: laik_allocator_def (policy NewAllocOnRepartition, its malloc/free usable),
 *    a new container's allocator is it, laik_set_allocator / laik_get_allocator record an
 *    own one (policy None, the functions given);
 *  - ext.h without agents: laik_ext_init, laik_get_failed (0 failed), laik_ext_cleanup;
 *  - laik_set_world with the world itself changes nothing; with the world minus its last
 *    process the epoch advances, laik_world returns the new group, the removed process is no
 *    longer managed and ends, the others sum over the new world.
 * With -a the program loads an agent, with -g it asks laik_create_group for an empty group:
 * both are fatal errors. Exits 1 on the first mismatch; the master prints one line. */
#include <laik.h>
#include <stdio.h>
#include <string.h>

static int me;

static int fail(const char* what)
{
    printf("rank %d: %s\n", me, what);
    return 1;
}

static void* my_malloc(Laik_Data* d, size_t n) { (void) d; return malloc(n); }
static void my_free(Laik_Data* d, void* p) { (void) d; free(p); }

static Laik_Agent* no_agent(int argc, char** argv)
{
    (void) argc;
    (void) argv;
    return NULL;
}

static int check_global2local(Laik_Instance* inst, Laik_Group* world, int dims)
{
    int64_t n1 = 50, n2 = 7;
    Laik_Space* sp = dims == 1 ? laik_new_space_1d(inst, n1) : laik_new_space_2d(inst, n1, n2);
    Laik_Partitioning* p = laik_new_partitioning(laik_new_block_partitioner1(), world, sp, 0);
    int64_t from = 0, to = 0;
    Laik_TaskRange* tr = laik_my_range(p, 0);
    if (tr) {
        from = laik_taskrange_get_range(tr)->from.i[0];
        to = laik_taskrange_get_range(tr)->to.i[0];
    }
    for (int64_t x = 0; x < n1; x++) {
        for (int64_t y = 0; y < (dims == 1 ? 1 : n2); y++) {
            Laik_Index g, l;
            laik_index_init(&g, x, y, 0);
            laik_index_init(&l, -1, -1, -1);
            bool mine = x >= from && x < to;
            bool got = laik_index_global2local(p, &g, &l);
            if (got != mine) return fail("laik_index_global2local: wrong answer");
            if (got && (l.i[0] != x - from || (dims == 2 && l.i[1] != y)))
                return fail("laik_index_global2local: wrong local index");
        }
    }
    return 0;
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    me = laik_myid(world);
    int n = laik_size(world);
    if (argc > 1 && strcmp(argv[1], "-a") == 0) {
        laik_ext_load_agent_from_function(inst, no_agent, argc, argv);
        return fail("an agent was loaded");
    }
    if (argc > 1 && strcmp(argv[1], "-g") == 0) {
        laik_create_group(inst, n);
        return fail("an empty group was made");
    }

    char want[32];
    snprintf(want, sizeof(want), "%d", laik_mylocationid(inst));
    char* guid = laik_get_guid(inst);
    if (!guid || strcmp(guid, want) != 0 || strcmp(laik_get_guid(inst), want) != 0)
        return fail("laik_get_guid is not the location id");
    laik_set_args(inst, argc, argv);

    if (check_global2local(inst, world, 1) || check_global2local(inst, world, 2)) return 1;

    Laik_Allocator* def = laik_allocator_def;
    if (!def || def->policy != LAIK_MP_NewAllocOnRepartition || !def->malloc || !def->free)
        return fail("laik_allocator_def");
    Laik_Space* sp = laik_new_space_1d(inst, 100);
    Laik_Data* d = laik_new_data(sp, laik_Int64);
    char* mem = def->malloc(d, 64);
    if (!mem) return fail("laik_allocator_def's malloc");
    memset(mem, 7, 64);
    def->free(d, mem);
    if (laik_get_allocator(d) != def) return fail("a new container's allocator");
    Laik_Allocator* own = laik_new_allocator(my_malloc, my_free, NULL);
    if (own->policy != LAIK_MP_None || own->malloc != my_malloc || own->free != my_free ||
        own->realloc || own->unmap)
        return fail("laik_new_allocator");
    laik_set_allocator(d, own);
    if (laik_get_allocator(d) != own) return fail("laik_get_allocator after laik_set_allocator");
    Laik_Allocator* def2 = laik_new_allocator_def();
    if (def2 == def || def2->policy != LAIK_MP_NewAllocOnRepartition)
        return fail("laik_new_allocator_def");

    laik_ext_init(inst);
    int nfailed = -1;
    int* failed = NULL;
    laik_get_failed(inst, &nfailed, &failed, MAX_FAILED_BUFFER);
    if (nfailed != 0) return fail("laik_get_failed without agents");
    laik_ext_cleanup(inst);

    int epoch = laik_epoch(inst);
    laik_set_world(inst, world);
    if (laik_epoch(inst) != epoch || laik_world(inst) != world)
        return fail("laik_set_world with the world itself");
    int removed = n - 1;
    Laik_Group* g = n > 1 ? laik_new_shrinked_group(world, 1, &removed) : world;
    laik_set_world(inst, g);
    if (laik_world(inst) != g) return fail("laik_world after laik_set_world");
    if (laik_epoch(inst) != epoch + (n > 1)) return fail("the epoch after laik_set_world");
    if (n > 1 && me == removed) {
        if (laik_is_managed(inst)) return fail("a removed process is still managed");
        laik_finalize(inst);
        return 0;
    }
    if (!laik_is_managed(inst)) return fail("a process of the new world is not managed");
    Laik_Group* w = laik_world(inst);
    laik_switchto_new_partitioning(d, w, laik_All, LAIK_DF_None, LAIK_RO_None);
    int64_t* base;
    uint64_t cnt;
    laik_get_map_1d(d, 0, (void**) &base, &cnt);
    for (uint64_t k = 0; k < cnt; k++) base[k] = laik_myid(w) + 1;
    laik_switchto_new_partitioning(d, w, laik_Master, LAIK_DF_Preserve, LAIK_RO_Sum);
    if (laik_myid(w) == 0) {
        int m = laik_size(w);
        laik_get_map_1d(d, 0, (void**) &base, &cnt);
        for (uint64_t k = 0; k < cnt; k++)
            if (base[k] != (int64_t) m * (m + 1) / 2) return fail("sum over the new world");
        printf("world calls on %d processes, %d in the new world: ok\n", n, m);
    }
    laik_finalize(inst);
    return 0;
}
