/* laik.h from C: the queries of LAIK's public space.h/core.h beyond the ones the examples
 * rely on most (range algebra, partitioning predicates, ranges per mapping, cloned groups,
 * locations). Rank 0 prints one line per check; every rank checks the same facts. */
#include <laik.h>
#include <string.h>

static int failures = 0;

static void check(Laik_Group* world, const char* what, bool ok)
{
    if (!ok) {
        fprintf(stderr, "rank %d: %s: wrong\n", laik_myid(world), what);
        failures++;
    } else if (laik_myid(world) == 0) {
        printf("%s: ok\n", what);
    }
}

/* every task gets two separate ranges (tags 1 and 2: two mappings) */
static void two_each(Laik_RangeReceiver* r, Laik_PartitionerParams* p)
{
    int n = laik_size(p->group);
    int64_t size = laik_space_size(p->space);
    Laik_Range range;
    for (int t = 0; t < n; t++) {
        laik_range_init_1d(&range, p->space, size * t / (2 * n), size * (t + 1) / (2 * n));
        laik_append_range(r, t, &range, 1, 0);
        laik_range_init_1d(&range, p->space, size / 2 + size * t / (2 * n),
                           size / 2 + size * (t + 1) / (2 * n));
        laik_append_range(r, t, &range, 2, 0);
    }
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    int n = laik_size(world), me = laik_myid(world);

    Laik_Space* sp = laik_new_space_2d(inst, 10, 6);
    Laik_Range a, b, c;
    laik_range_init_2d(&a, sp, 0, 6, 0, 4);
    laik_range_init_2d(&b, sp, 4, 10, 2, 6);
    Laik_Range* x = laik_range_intersect(&a, &b);
    check(world, "intersect", x && x->from.i[0] == 4 && x->to.i[0] == 6 && x->from.i[1] == 2 &&
                                  x->to.i[1] == 4);
    laik_range_init_2d(&c, sp, 7, 10, 0, 2);
    check(world, "disjoint intersect is NULL", laik_range_intersect(&a, &c) == NULL);
    laik_range_init_copy(&c, &a);
    check(world, "copy is equal", laik_range_isEqual(&c, &a) && !laik_range_isEqual(&a, &b));
    laik_range_expand(&c, &b);
    check(world, "expand", c.from.i[0] == 0 && c.to.i[0] == 10 && c.to.i[1] == 6);
    check(world, "within", laik_range_within_range(&a, &c) && !laik_range_within_range(&c, &a));
    check(world, "within space", laik_range_within_space(&c, sp));
    const Laik_Range* whole = laik_space_asrange(sp);
    check(world, "space as range", whole->to.i[0] == 10 && whole->to.i[1] == 6 &&
                                       laik_range_size(whole) == 60);
    laik_range_init_2d(&c, sp, 3, 3, 0, 6);
    check(world, "empty", laik_range_isEmpty(&c) && !laik_range_isEmpty(&a));
    check(world, "index equal", laik_index_isEqual(1, &a.from, &c.from) == false &&
                                    laik_index_isEqual(2, &a.from, &a.from));
    check(world, "is reduction", laik_is_reduction(LAIK_RO_Sum) &&
                                     !laik_is_reduction(LAIK_RO_None));

    Laik_Space* s1 = laik_new_space_1d(inst, 40);
    Laik_Partitioning* all = laik_new_partitioning(laik_All, world, s1, 0);
    Laik_Partitioning* master = laik_new_partitioning(laik_Master, world, s1, 0);
    Laik_Partitioning* block = laik_new_partitioning(laik_new_block_partitioner1(), world, s1, 0);
    Laik_Partitioning* block2 = laik_new_partitioning(laik_new_block_partitioner1(), world, s1, 0);
    Laik_Partitioning* two = laik_new_partitioning(
        laik_new_partitioner("two-each", two_each, 0, LAIK_PF_GroupByTag), world, s1, 0);
    check(world, "isAll", laik_partitioning_isAll(all) && (n == 1) == laik_partitioning_isAll(block));
    check(world, "isSingle", laik_partitioning_isSingle(master) == 0 &&
                                 laik_partitioning_isSingle(block) == (n == 1 ? 0 : -1));
    check(world, "coversSpace", laik_partitioning_coversSpace(block) &&
                                    laik_partitioning_coversSpace(two));
    check(world, "isEqual", laik_partitioning_isEqual(block, block2) &&
                                !laik_partitioning_isEqual(block, two));
    int64_t f0, t0, f1, t1;
    check(world, "two mappings", laik_my_mapcount(two) == 2 &&
                                     laik_my_maprangecount(two, 0) == 1 &&
                                     laik_my_maprangecount(two, 1) == 1 &&
                                     laik_my_maprangecount(two, 2) == 0);
    const Laik_Range* m1 = laik_taskrange_get_range(laik_my_maprange(two, 1, 0));
    laik_my_range_1d(two, 1, &f1, &t1);
    laik_my_range_1d(two, 0, &f0, &t0);
    check(world, "range of mapping 1", m1->from.i[0] == f1 && m1->to.i[0] == t1 && f1 >= 20 &&
                                           t0 <= 20 && laik_my_maprange(two, 1, 1) == NULL);

    Laik_Group* clone = laik_clone_group(world);
    check(world, "clone group", laik_size(clone) == n && laik_myid(clone) == me);
    char* loc = laik_group_location(world, me);
    check(world, "own location", loc && strcmp(loc, laik_mylocation(inst)) == 0);

    laik_finalize(inst);
    return failures ? 1 : 0;
}
