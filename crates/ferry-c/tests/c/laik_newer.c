/* laik.h from C: calls of LAIK's newer public headers beyond its examples: block partitioning
 * of 2d/3d spaces along any dimension (checked against the 1d block partitioner over that
 * dimension's extent, and by moving data), laik_set_master, laik_new_space, user time, range
 * lists, range filters, laik_run_partitioner and partitionings computed on demand. Rank 0
 * prints one line per check; every rank checks the same facts and reports what is wrong. */
#include <laik.h>
#include <string.h>
#include <time.h>

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

static double idx_weight(Laik_Index* i, const void* d)
{
    int dim = *(const int*) d;
    for (int k = 0; k < 3; k++)
        if (k != dim && i->i[k] != 0) return -1000.0; /* LAIK passes 0 outside pdim */
    return (double) (i->i[dim] % 3 + 1);
}

static double task_weight(int t, const void* d)
{
    (void) d;
    return (double) (t + 1);
}

/* Every task's range of `p` (a block partitioning of a multi-d space along pdim) spans the
 * whole space outside pdim and, along pdim, equals the task's range in `ref` (1d). */
static bool same_cuts(Laik_Partitioning* p, Laik_Partitioning* ref, int pdim, int dims,
                      const int64_t* ext)
{
    int n = laik_partitioning_rangecount(p);
    if (n != laik_partitioning_rangecount(ref)) return false;
    for (int k = 0; k < n; k++) {
        Laik_TaskRange* a = laik_partitioning_get_taskrange(p, k);
        Laik_TaskRange* b = laik_partitioning_get_taskrange(ref, k);
        const Laik_Range* ra = laik_taskrange_get_range(a);
        const Laik_Range* rb = laik_taskrange_get_range(b);
        if (laik_taskrange_get_task(a) != laik_taskrange_get_task(b)) return false;
        for (int d = 0; d < dims; d++) {
            int64_t f = d == pdim ? rb->from.i[0] : 0, t = d == pdim ? rb->to.i[0] : ext[d];
            if (ra->from.i[d] != f || ra->to.i[d] != t) return false;
        }
    }
    return true;
}

static void blocks(Laik_Instance* inst, Laik_Group* world)
{
    int64_t ext[3] = {7, 11, 5};
    char what[96];
    for (int dims = 2; dims <= 3; dims++) {
        Laik_Space* sp = dims == 2 ? laik_new_space_2d(inst, ext[0], ext[1])
                                   : laik_new_space_3d(inst, ext[0], ext[1], ext[2]);
        for (int pdim = 0; pdim < dims; pdim++) {
            static int dimarg[3] = {0, 1, 2};
            Laik_Space* line = laik_new_space_1d(inst, ext[pdim]);
            for (int v = 0; v < 3; v++) {
                Laik_GetIdxWeight_t iw = v == 1 ? idx_weight : NULL;
                Laik_GetTaskWeight_t tw = v == 2 ? task_weight : NULL;
                Laik_Partitioning* p = laik_new_partitioning(
                    laik_new_block_partitioner(pdim, 2, iw, tw, &dimarg[pdim]), world, sp, 0);
                Laik_Partitioner* lpr = laik_new_block_partitioner(0, 2, iw, tw, &dimarg[0]);
                /* the 1d reference weights its index 0 as the multi-d one weights pdim */
                if (v == 1) laik_set_index_weight(lpr, idx_weight, &dimarg[0]);
                Laik_Partitioning* ref = laik_new_partitioning(lpr, world, line, 0);
                snprintf(what, sizeof(what), "block %dd pdim %d %s", dims, pdim,
                         v == 0 ? "plain" : v == 1 ? "index weights" : "task weights");
                check(world, what, same_cuts(p, ref, pdim, dims, ext) &&
                                       laik_partitioning_coversSpace(p));
            }
        }
    }

    /* values move with a 2d block partitioning along dimension 1 */
    Laik_Data* d = laik_new_data_2d(inst, laik_Double, ext[0], ext[1]);
    laik_switchto_new_partitioning(d, world, laik_Master, LAIK_DF_None, LAIK_RO_None);
    double* base;
    uint64_t ysize, ystride, xsize;
    if (laik_get_map_2d(d, 0, (void**) &base, &ysize, &ystride, &xsize))
        for (uint64_t y = 0; y < ysize; y++)
            for (uint64_t x = 0; x < xsize; x++) base[y * ystride + x] = x + 100.0 * y;
    Laik_Partitioning* p = laik_switchto_new_partitioning(
        d, world, laik_new_block_partitioner(1, 1, NULL, NULL, NULL), LAIK_DF_Preserve,
        LAIK_RO_None);
    int64_t x1, x2, y1, y2;
    bool ok = true;
    uint64_t mine = 0;
    if (laik_my_rangecount(p) > 0) {
        laik_my_range_2d(p, 0, &x1, &x2, &y1, &y2);
        laik_get_map_2d(d, 0, (void**) &base, &ysize, &ystride, &xsize);
        ok = x1 == 0 && x2 == ext[0] && (int64_t) ysize == y2 - y1 && (int64_t) xsize == ext[0];
        for (uint64_t y = 0; ok && y < ysize; y++)
            for (uint64_t x = 0; x < xsize; x++)
                if (base[y * ystride + x] != x + 100.0 * (y + y1)) ok = false;
        mine = ysize * xsize;
    }
    Laik_Data* cnt = laik_new_data_1d(inst, laik_Double, 1);
    laik_switchto_new_partitioning(cnt, world, laik_All, LAIK_DF_None, LAIK_RO_None);
    laik_get_map_1d(cnt, 0, (void**) &base, 0);
    base[0] = (double) mine;
    laik_switchto_new_partitioning(cnt, world, laik_All, LAIK_DF_Preserve, LAIK_RO_Sum);
    laik_get_map_1d(cnt, 0, (void**) &base, 0);
    check(world, "2d data switched to blocks along y", ok && base[0] == ext[0] * ext[1]);
}

static void master(Laik_Instance* inst, Laik_Group* world)
{
    int n = laik_size(world), me = laik_myid(world);
    Laik_Group* g = laik_clone_group(world);
    check(world, "set_master out of range is refused",
          !laik_set_master(g, n) && !laik_set_master(g, -1) && laik_get_master(g) == 0);
    check(world, "set_master", laik_set_master(g, n - 1) && laik_get_master(g) == n - 1 &&
                                   laik_is_master(g) == (me == n - 1));
    Laik_Data* d = laik_new_data_1d(inst, laik_Double, 8);
    laik_switchto_new_partitioning(d, g, laik_All, LAIK_DF_None, LAIK_RO_None);
    double* base;
    uint64_t count;
    laik_get_map_1d(d, 0, (void**) &base, &count);
    for (uint64_t i = 0; i < count; i++) base[i] = me + 1;
    Laik_Partitioning* p =
        laik_switchto_new_partitioning(d, g, laik_Master, LAIK_DF_Preserve, LAIK_RO_Sum);
    bool ok = laik_my_rangecount(p) == (me == n - 1 ? 1 : 0) &&
              laik_partitioning_isSingle(p) == n - 1;
    if (me == n - 1) {
        laik_get_map_1d(d, 0, (void**) &base, &count);
        ok = ok && count == 8 && base[7] == n * (n + 1) / 2;
    }
    check(world, "laik_Master follows the master", ok);
}

static void unions(Laik_Instance* inst, Laik_Group* world)
{
    int n = laik_size(world), me = laik_myid(world);
    if (n < 2) {
        check(world, "union of groups", laik_new_union_group(world, world) == world);
        return;
    }
    int last = n - 1, first = 0;
    Laik_Group* g1 = laik_new_shrinked_group(world, 1, &last);
    Laik_Group* g2 = laik_new_shrinked_group(world, 1, &first);
    Laik_Group* u = laik_new_union_group(g2, g1);
    bool ok = laik_size(u) == n && laik_myid(u) == me && laik_group_parent(u) == g2 &&
              laik_new_union_group(world, g1) == world;
    for (int k = 0; k < n; k++) ok = ok && laik_group_locationid(u, k) == k;
    Laik_Data* d = laik_new_data_1d(inst, laik_Double, 10);
    laik_switchto_new_partitioning(d, u, laik_new_block_partitioner1(), LAIK_DF_None,
                                   LAIK_RO_None);
    double* base;
    uint64_t count;
    laik_get_map_1d(d, 0, (void**) &base, &count);
    for (uint64_t i = 0; i < count; i++) base[i] = laik_local2global_1d(d, i);
    laik_switchto_new_partitioning(d, u, laik_All, LAIK_DF_Preserve, LAIK_RO_None);
    laik_get_map_1d(d, 0, (void**) &base, &count);
    ok = ok && count == 10;
    for (uint64_t i = 0; ok && i < count; i++) ok = base[i] == (double) i;
    check(world, "union of groups", ok);
}

static void space_and_time(Laik_Instance* inst, Laik_Group* world)
{
    Laik_Space* sp = laik_new_space(inst);
    check(world, "new space has no size",
          laik_space_getdimensions(sp) == 0 && laik_space_size(sp) == 0);
    laik_change_space_2d(sp, 0, 4, 0, 3);
    Laik_Partitioning* p = laik_new_partitioning(laik_All, world, sp, 0);
    check(world, "new space sized by change_space",
          laik_space_getdimensions(sp) == 2 && laik_space_size(sp) == 12 &&
              laik_partitioning_isAll(p));

    laik_enable_profiling(inst);
    laik_profile_user_start(inst);
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, 0);
    laik_profile_user_stop(inst);
    double t = laik_get_user_time();
    check(world, "user time", t >= 0.002 && t < 60.0);
}

static int64_t from0(Laik_TaskRange* tr)
{
    return laik_taskrange_get_range(tr)->from.i[0];
}

static int64_t to0(Laik_TaskRange* tr)
{
    return laik_taskrange_get_range(tr)->to.i[0];
}

static void rangelists(Laik_Instance* inst, Laik_Group* world)
{
    int n = laik_size(world), me = laik_myid(world);
    Laik_Space* sp = laik_new_space_1d(inst, 20);
    Laik_Range r;
    Laik_RangeList* l = laik_rangelist_new(sp, 4);
    laik_range_init_1d(&r, sp, 5, 8);
    laik_rangelist_append(l, 0, &r, 0, 0);
    laik_range_init_1d(&r, sp, 0, 5);
    laik_rangelist_append(l, 0, &r, 0, 0);
    laik_range_init_1d(&r, sp, 14, 16);
    laik_rangelist_append(l, 3, &r, 1, 0);
    laik_range_init_1d(&r, sp, 12, 13);
    laik_rangelist_append(l, 3, &r, 2, 0);
    laik_range_init_1d(&r, sp, 10, 12);
    laik_rangelist_append(l, 3, &r, 1, 0);
    laik_rangelist_append_single1d(l, 2, 19);
    laik_rangelist_freeze(l, true);
    check(world, "range list merged and sorted",
          laik_rangelist_rangecount(l) == 5 && laik_rangelist_tidrangecount(l, 0) == 1 &&
              from0(laik_rangelist_tidrange(l, 0, 0)) == 0 &&
              to0(laik_rangelist_tidrange(l, 0, 0)) == 8 &&
              from0(laik_rangelist_taskrange(l, 1)) == 19 &&
              laik_rangelist_tidrange(l, 1, 0) == NULL);
    check(world, "range list mappings by tag",
          laik_rangelist_tidmapcount(l, 3) == 2 && laik_rangelist_tidmaprangecount(l, 3, 0) == 2 &&
              laik_rangelist_tidmaprangecount(l, 3, 1) == 1 &&
              from0(laik_rangelist_tidmaprange(l, 3, 0, 1)) == 14 &&
              from0(laik_rangelist_tidmaprange(l, 3, 1, 0)) == 12 &&
              laik_taskrange_get_mapNo(laik_rangelist_tidmaprange(l, 3, 1, 0)) == 1);
    check(world, "range list predicates",
          !laik_rangelist_coversSpace(l) && laik_rangelist_isSingle(l) == -1 &&
              !laik_rangelist_isAll(l) && laik_rangelist_isEqual(l, l));

    Laik_RangeList* all = laik_rangelist_new(sp, 2);
    Laik_RangeList* one = laik_rangelist_new(sp, 2);
    laik_range_init_1d(&r, sp, 0, 20);
    laik_rangelist_append(all, 1, &r, 0, 0);
    laik_rangelist_append(all, 0, &r, 0, 0);
    laik_rangelist_append(one, 1, &r, 0, 0);
    laik_rangelist_freeze(all, false);
    laik_rangelist_freeze(one, false);
    check(world, "whole-space lists",
          laik_rangelist_isAll(all) && laik_rangelist_coversSpace(one) &&
              laik_rangelist_isSingle(one) == 1 && !laik_rangelist_isEqual(all, one));
    int idmap[4] = {3, 2, 1, 0};
    laik_rangelist_migrate(l, idmap, 4);
    check(world, "range list migrated",
          laik_rangelist_tidrangecount(l, 3) == 1 && to0(laik_rangelist_tidrange(l, 3, 0)) == 8 &&
              laik_rangelist_tidrangecount(l, 0) == 3);

    /* partitioner runs with filters */
    Laik_PartitionerParams params = {sp, world, laik_new_block_partitioner1(), 0};
    Laik_RangeList* every = laik_run_partitioner(&params, 0);
    Laik_RangeFilter* f = laik_rangefilter_new();
    laik_rangefilter_set_myfilter(f, world);
    Laik_RangeList* mine = laik_run_partitioner(&params, f);
    laik_rangefilter_free(f);
    bool ok = laik_rangelist_rangecount(every) == n && laik_rangelist_coversSpace(every) &&
              laik_rangelist_rangecount(mine) == 1 &&
              laik_rangelist_tidrangecount(mine, me) == 1 &&
              from0(laik_rangelist_taskrange(mine, 0)) ==
                  from0(laik_rangelist_tidrange(every, me, 0));
    check(world, "run partitioner with my filter", ok);

    Laik_RangeList* low = laik_rangelist_new(sp, 1);
    laik_range_init_1d(&r, sp, 0, 8);
    laik_rangelist_append(low, 0, &r, 0, 0);
    laik_rangelist_freeze(low, false);
    f = laik_rangefilter_new();
    laik_rangefilter_add_idxfilter(f, low, 0);
    Laik_RangeList* near = laik_run_partitioner(&params, f);
    int expect = 0;
    for (int k = 0; k < laik_rangelist_rangecount(every); k++)
        if (from0(laik_rangelist_taskrange(every, k)) < 8) expect++;
    check(world, "run partitioner with index filter",
          laik_rangelist_rangecount(near) == expect && expect >= 1);
    laik_rangefilter_free(f);
    laik_rangelist_free(near);
    laik_rangelist_free(every);
    laik_rangelist_free(mine);

    /* partitionings whose partitioner runs on demand */
    Laik_Partitioning* pe = laik_new_empty_partitioning(world, sp, laik_new_block_partitioner1(), 0);
    check(world, "empty partitioning has no ranges", laik_partitioning_rangecount(pe) == 0);
    laik_partitioning_store_myranges(pe);
    Laik_Partitioning* pc = laik_clone_empty_partitioning(pe);
    laik_partitioning_store_allranges(pc);
    Laik_Partitioning* pm = laik_new_partitioning(laik_Master, world, sp, 0);
    check(world, "stored ranges",
          laik_my_rangecount(pe) == 1 && laik_partitioning_isEqual(pe, pc) &&
              laik_rangelist_rangecount(laik_partitioning_allranges(pe)) == n &&
              laik_rangelist_rangecount(laik_partitioning_myranges(pe)) == 1 &&
              laik_rangelist_rangecount(laik_partitioning_interranges(pe, pm)) ==
                  (me == 0 ? n : 1));
    Laik_Data* d = laik_new_data(sp, laik_Double);
    laik_switchto_partitioning(d, pe, LAIK_DF_None, LAIK_RO_None);
    double* base;
    uint64_t count;
    laik_get_map_1d(d, 0, (void**) &base, &count);
    for (uint64_t i = 0; i < count; i++) base[i] = laik_local2global_1d(d, i) * 2.0;
    laik_switchto_new_partitioning(d, world, laik_All, LAIK_DF_Preserve, LAIK_RO_None);
    laik_get_map_1d(d, 0, (void**) &base, &count);
    ok = count == 20;
    for (uint64_t i = 0; ok && i < count; i++) ok = base[i] == i * 2.0;
    check(world, "container switched from a stored partitioning", ok);
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    blocks(inst, world);
    master(inst, world);
    unions(inst, world);
    space_and_time(inst, world);
    rangelists(inst, world);

    /* debug printers (stderr, checked by the test) */
    if (laik_myid(world) == 0) {
        laik_set_loglevel(LAIK_LL_Info);
        int list[3] = {4, 5, 6};
        Laik_Space* sp = laik_new_space_2d(inst, 6, 4);
        laik_set_space_name(sp, "grid");
        Laik_Range r;
        laik_range_init_2d(&r, sp, 1, 3, 0, 2);
        Laik_Partitioning* p = laik_new_partitioning(laik_Master, world, sp, 0);
        laik_partitioning_set_name(p, "whole");
        laik_log_begin(LAIK_LL_Warning);
        laik_log_append("printers:");
        laik_log_append(" ");
        laik_log_IntList(3, list);
        laik_log_append(" ");
        laik_log_PrettyInt(123456);
        laik_log_append(" ");
        laik_log_Space(sp);
        laik_log_append(" ");
        laik_log_Index(2, &r.to);
        laik_log_append(" ");
        laik_log_Range(&r);
        laik_log_append(" ");
        laik_log_Reduction(LAIK_RO_Max);
        laik_log_append(" ");
        laik_log_DataFlow(LAIK_DF_Preserve);
        laik_log_append(" ");
        laik_log_Partitioning(p);
        laik_log_flush(0);
    }
    laik_finalize(inst);
    return failures ? 1 : 0;
}
