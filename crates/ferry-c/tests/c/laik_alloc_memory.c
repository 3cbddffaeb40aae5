/* laik.h from C: a container's mappings come from the allocator the program sets
 * (laik_set_allocator with laik_new_allocator). A counting allocator records every block it
 * hands out; after each switch (block, then master with Preserve, then block again) the
 * mapping the program gets must lie in a block of the allocator, hold the values written
 * before, and the blocks of the previous partitioning must have gone back through the
 * allocator's free. laik_free returns the last ones. Exits 1 on the first mismatch; the
 * master prints one line otherwise. */
#include <laik.h>
#include <stdio.h>
#include <stdlib.h>

#define N 1000
#define MAXBLOCKS 64

static int me;
static char* block_at[MAXBLOCKS];
static size_t block_size[MAXBLOCKS];
static int live, mallocs, frees;

static void* counting_malloc(Laik_Data* d, size_t size)
{
    (void) d;
    char* p = malloc(size);
    for (int k = 0; k < MAXBLOCKS; k++)
        if (!block_at[k]) {
            block_at[k] = p;
            block_size[k] = size;
            break;
        }
    mallocs++;
    live++;
    return p;
}

static void counting_free(Laik_Data* d, void* p)
{
    (void) d;
    for (int k = 0; k < MAXBLOCKS; k++)
        if (block_at[k] == p) block_at[k] = 0;
    frees++;
    live--;
    free(p);
}

/* whether [p, p + bytes) lies in a live block of the allocator */
static int from_allocator(void* p, size_t bytes)
{
    for (int k = 0; k < MAXBLOCKS; k++)
        if (block_at[k] && (char*) p >= block_at[k] &&
            (char*) p + bytes <= block_at[k] + block_size[k])
            return 1;
    return 0;
}

static int fail(const char* what, long got, long want)
{
    printf("rank %d: %s: %ld, expected %ld\n", me, what, got, want);
    return 1;
}

/* checks the mapping of this process: in the allocator's memory, values 3*g + 1 */
static int check(Laik_Data* d, const char* phase)
{
    double* base;
    uint64_t count;
    laik_get_map_1d(d, 0, (void**) &base, &count);
    if (count == 0) return 0;
    if (!from_allocator(base, count * sizeof(double))) {
        printf("rank %d: %s: mapping not in the allocator's memory\n", me, phase);
        return 1;
    }
    int64_t from = laik_local2global_1d(d, 0);
    for (uint64_t i = 0; i < count; i++)
        if (base[i] != 3.0 * (double) (from + (int64_t) i) + 1.0) {
            printf("rank %d: %s: value at %lld: %g\n", me, phase, (long long) (from + i), base[i]);
            return 1;
        }
    return 0;
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    me = laik_myid(world);
    Laik_Space* sp = laik_new_space_1d(inst, N);
    Laik_Data* d = laik_new_data(sp, laik_Double);
    Laik_Allocator* a = laik_new_allocator(counting_malloc, counting_free, 0);
    laik_set_allocator(d, a);
    if (laik_get_allocator(d) != a) return fail("allocator recorded", 0, 1);

    Laik_Partitioning* block = laik_new_partitioning(laik_new_block_partitioner1(), world, sp, 0);
    Laik_Partitioning* master = laik_new_partitioning(laik_Master, world, sp, 0);
    laik_switchto_partitioning(d, block, LAIK_DF_None, LAIK_RO_None);
    int first = mallocs;
    if (first != 1) return fail("blocks for the block partitioning", first, 1);
    double* base;
    uint64_t count;
    laik_get_map_1d(d, 0, (void**) &base, &count);
    int64_t from = laik_local2global_1d(d, 0);
    for (uint64_t i = 0; i < count; i++) base[i] = 3.0 * (double) (from + (int64_t) i) + 1.0;

    laik_switchto_partitioning(d, master, LAIK_DF_Preserve, LAIK_RO_None);
    if (frees != first) return fail("blocks freed after the switch to the master", frees, first);
    if (live != (me == 0 ? 1 : 0)) return fail("blocks live at the master", live, me == 0);
    if (check(d, "master")) return 1;

    laik_switchto_partitioning(d, block, LAIK_DF_Preserve, LAIK_RO_None);
    if (live != 1) return fail("blocks live after the switch back", live, 1);
    if (check(d, "block again")) return 1;

    laik_free(d);
    if (live != 0 || frees != mallocs) return fail("blocks left after laik_free", live, 0);
    if (me == 0) printf("allocator memory on %d processes: ok\n", laik_size(world));
    laik_finalize(inst);
    return 0;
}
