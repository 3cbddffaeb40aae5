/*
 * Calls of LAIK's newer programs and headers (laik.h): memory the program provides for a
 * container (laik_data_provide_memory before laik_set_initial_partitioning), the current
 * range of a container (laik_data_range), 2d mappings queried with NULL for outputs the
 * program does not want, 2d index translation (laik_global2local_2d, laik_local2global1_2d)
 * and addresses (laik_get_map_addr), laik_new_migrated_partitioning, laik_get_phase and
 * laik_get_iteration, mapping numbers of task ranges (laik_taskrange_get_mapNo), and
 * laik_profile_printf.
 *
 *   laik_provided PROFILE_PREFIX
 *   laik_provided -small      (provides too little memory: must end with LAIK's fatal error)
 *
 * Every check prints one line, "... right" or "... wrong: DETAILS"; exit status 1 if a check
 * is wrong.
 */
#include <laik.h>

#include <string.h>

static int failures = 0;

/* Three single-index ranges per task, tagged 5, 9, 5: two mappings per task. */
static void runTagged(Laik_RangeReceiver* r, Laik_PartitionerParams* p)
{
    Laik_Range range;
    for (int t = 0; t < laik_size(p->group); t++)
        for (int k = 0; k < 3; k++) {
            laik_range_init_1d(&range, p->space, 3 * t + k, 3 * t + k + 1);
            laik_append_range(r, t, &range, k == 1 ? 9 : 5, 0);
        }
}

/* Whether every range of `p` carries the mapping number `want(index among its task's
 * ranges)` and this process has `maps` mappings. */
static int mapNumbersAre(Laik_Partitioning* p, const int* want, int maps)
{
    int task = -1, k = 0;
    for (int i = 0; i < laik_partitioning_rangecount(p); i++) {
        Laik_TaskRange* tr = laik_partitioning_get_taskrange(p, i);
        if (laik_taskrange_get_task(tr) != task) {
            task = laik_taskrange_get_task(tr);
            k = 0;
        }
        if (laik_taskrange_get_mapNo(tr) != want[k++]) return 0;
    }
    for (int k = 0; k < laik_my_rangecount(p); k++)
        if (laik_taskrange_get_mapNo(laik_my_range(p, k)) != want[k]) return 0;
    return laik_my_mapcount(p) == maps;
}

static void check(Laik_Group* world, const char* what, int ok, const char* details)
{
    if (ok)
        printf("rank %d: %s right\n", laik_myid(world), what);
    else {
        printf("rank %d: %s wrong: %s\n", laik_myid(world), what, details);
        failures++;
    }
}

int main(int argc, char* argv[])
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    int me = laik_myid(world);
    int n = laik_size(world);
    char msg[256];

    /* laik_provided -small: memory too small for the initial mapping, which LAIK refuses. */
    if (argc > 1 && strcmp(argv[1], "-small") == 0) {
        double one = 0.0;
        Laik_Space* s = laik_new_space_1d(inst, n + 1);
        Laik_Data* d = laik_new_data(s, laik_Double);
        laik_data_provide_memory(d, &one, sizeof(one));
        laik_set_initial_partitioning(d, laik_new_partitioning(laik_All, world, s, 0));
        printf("rank %d: too small memory accepted\n", me);
        laik_finalize(inst);
        return 0;
    }

    /* 1. One slot per process in the program's own array, summed across all processes into
     *    that same array: the initial values are the program's, the results land there. */
    double* slots = calloc((size_t) n, sizeof(double));
    slots[me] = me + 1;
    Laik_Space* slotSpace = laik_new_space_1d(inst, n);
    Laik_Data* slotData = laik_new_data(slotSpace, laik_Double);
    laik_data_provide_memory(slotData, slots, (uint64_t) n * sizeof(double));
    laik_set_initial_partitioning(slotData, laik_new_partitioning(laik_All, world, slotSpace, 0));
    double* base;
    uint64_t count;
    laik_get_map_1d(slotData, 0, (void**) &base, &count);
    snprintf(msg, sizeof(msg), "mapping 0 at %p (%lu elements), provided %p",
             (void*) base, (unsigned long) count, (void*) slots);
    check(world, "initial mapping is the provided memory", base == slots && count == (uint64_t) n, msg);
    laik_switchto_partitioning(slotData, laik_new_partitioning(laik_All, world, slotSpace, 0),
                               LAIK_DF_Preserve, LAIK_RO_Sum);
    int ok = 1;
    for (int k = 0; k < n; k++)
        if (slots[k] != k + 1) ok = 0;
    snprintf(msg, sizeof(msg), "slots[0] = %g, slots[%d] = %g", slots[0], n - 1, slots[n - 1]);
    check(world, "all-reduced slots in the provided memory", ok, msg);

    /* 2. Partial sums provided as memory, summed at the master only. */
    double partial[3] = { me, 2.0 * me, 1.0 };
    Laik_Space* sumSpace = laik_new_space_1d(inst, 3);
    Laik_Data* sumData = laik_new_data(sumSpace, laik_Double);
    laik_data_provide_memory(sumData, partial, sizeof(partial));
    laik_set_initial_partitioning(sumData, laik_new_partitioning(laik_All, world, sumSpace, 0));
    laik_switchto_partitioning(sumData, laik_new_partitioning(laik_Master, world, sumSpace, 0),
                               LAIK_DF_Preserve, LAIK_RO_Sum);
    if (me == 0) {
        laik_get_map_1d(sumData, 0, (void**) &base, &count);
        double t = n * (n - 1) / 2.0;
        snprintf(msg, sizeof(msg), "%g %g %g (count %lu), want %g %g %d",
                 base[0], base[1], base[2], (unsigned long) count, t, 2 * t, n);
        check(world, "sums at the master", count == 3 && base[0] == t && base[1] == 2 * t &&
              base[2] == n, msg);
        printf("Totals: %.0f, %.0f, %.0f\n", base[0], base[1], base[2]);
    }

    /* 3. The container's current range is that of its partitioning. */
    Laik_Space* blockSpace = laik_new_space_1d(inst, 4 * n + 1);
    Laik_Data* blockData = laik_new_data(blockSpace, laik_Double);
    check(world, "no range before a partitioning", laik_data_range(blockData, 0) == 0,
          "laik_data_range returned a range");
    Laik_Partitioning* blocks =
        laik_new_partitioning(laik_new_block_partitioner1(), world, blockSpace, 0);
    laik_switchto_partitioning(blockData, blocks, LAIK_DF_None, LAIK_RO_None);
    Laik_TaskRange* tr = laik_data_range(blockData, 0);
    const Laik_Range* r = tr ? laik_taskrange_get_range(tr) : 0;
    int64_t from, to;
    laik_my_range_1d(blocks, 0, &from, &to);
    snprintf(msg, sizeof(msg), "range %p, want [%ld,%ld)", (void*) r, (long) from, (long) to);
    check(world, "container range", r && r->from.i[0] == from && r->to.i[0] == to &&
          laik_data_range(blockData, 1) == 0, msg);

    /* 4. A 2d mapping queried for its sizes only. */
    Laik_Space* gridSpace = laik_new_space_2d(inst, 2 * n + 3, 5);
    Laik_Data* gridData = laik_new_data(gridSpace, laik_Double);
    Laik_Partitioning* halves =
        laik_new_partitioning(laik_new_bisection_partitioner(), world, gridSpace, 0);
    laik_switchto_partitioning(gridData, halves, LAIK_DF_None, LAIK_RO_None);
    int64_t x1, x2, y1, y2;
    laik_my_range_2d(halves, 0, &x1, &x2, &y1, &y2);
    uint64_t ysize = 0, xsize = 0;
    laik_get_map_2d(gridData, 0, NULL, &ysize, NULL, &xsize);
    snprintf(msg, sizeof(msg), "%lu x %lu, want %ld x %ld", (unsigned long) xsize,
             (unsigned long) ysize, (long) (x2 - x1), (long) (y2 - y1));
    check(world, "2d sizes without base and stride",
          xsize == (uint64_t) (x2 - x1) && ysize == (uint64_t) (y2 - y1), msg);

    /* 5. 2d index translation and element addresses of that mapping. */
    int64_t lx = -1, ly = -1, gx = -1, gy = -1;
    Laik_Mapping* m = laik_global2local_2d(gridData, x2 - 1, y1, &lx, &ly);
    int inside = laik_local2global1_2d(gridData, lx, ly, &gx, &gy);
    int outside = laik_local2global1_2d(gridData, x2 - x1, 0, &gx, &gy);
    Laik_Index first, last;
    laik_index_init(&first, x1, y1, 0);
    laik_index_init(&last, x2 - 1, y1, 0);
    char* a0 = laik_get_map_addr(gridData, 0, &first);
    char* a1 = laik_get_map_addr(gridData, 0, &last);
    snprintf(msg, sizeof(msg), "map %p local (%ld,%ld) back (%ld,%ld) %d %d, addresses %ld apart",
             (void*) m, (long) lx, (long) ly, (long) gx, (long) gy, inside, outside,
             (long) (a1 - a0));
    check(world, "2d index translation",
          m && lx == x2 - 1 - x1 && ly == 0 && inside && !outside && gx == x2 - 1 && gy == y1 &&
          laik_global2local_2d(gridData, x2, y2, &lx, &ly) == 0 &&
          a1 - a0 == (long) ((x2 - 1 - x1) * sizeof(double)), msg);

    /* 6. A partitioning migrated to a smaller group, leaving the original as it was. */
    int last_rank = n - 1;
    Laik_Group* smaller = n > 1 ? laik_new_shrinked_group(world, 1, &last_rank) : world;
    Laik_Partitioning* atMaster = laik_new_partitioning(laik_Master, world, blockSpace, 0);
    Laik_Partitioning* moved = laik_new_migrated_partitioning(atMaster, smaller);
    snprintf(msg, sizeof(msg), "groups %p/%p, %d and %d ranges",
             (void*) laik_partitioning_get_group(moved), (void*) laik_partitioning_get_group(atMaster),
             laik_partitioning_rangecount(moved), laik_partitioning_rangecount(atMaster));
    check(world, "migrated partitioning",
          laik_partitioning_get_group(moved) == smaller &&
          laik_partitioning_get_group(atMaster) == world &&
          laik_partitioning_rangecount(moved) == 1 && laik_partitioning_rangecount(atMaster) == 1 &&
          laik_partitioning_get_space(moved) == blockSpace, msg);

    /* 7. Phase and iteration as the program set them. */
    static int phaseData;
    laik_set_phase(inst, 7, "seven", &phaseData);
    laik_set_iteration(inst, 3);
    int phaseNo = -1;
    const char* phaseName = 0;
    void* phasePtr = 0;
    laik_get_phase(inst, &phaseNo, &phaseName, &phasePtr);
    int iterBefore = laik_get_iteration(inst);
    laik_iter_reset(inst);
    snprintf(msg, sizeof(msg), "phase %d '%s' %p, iterations %d then %d", phaseNo,
             phaseName ? phaseName : "(null)", phasePtr, iterBefore, laik_get_iteration(inst));
    check(world, "phase and iteration", phaseNo == 7 && phaseName && strcmp(phaseName, "seven") == 0 &&
          phasePtr == &phaseData && laik_phase(inst) == 7 && iterBefore == 3 &&
          laik_get_iteration(inst) == 0, msg);

    /* 8. Mapping numbers of task ranges: untagged cycles each get a mapping, equal tags
     *    share one. */
    Laik_Partitioning* cycled =
        laik_new_partitioning(laik_new_block_partitioner(0, 3, 0, 0, 0), world, blockSpace, 0);
    const int eachOwn[3] = { 0, 1, 2 };
    Laik_Space* tagSpace = laik_new_space_1d(inst, 3 * n);
    Laik_Partitioning* tagged = laik_new_partitioning(
        laik_new_partitioner("tagged", runTagged, 0, LAIK_PF_None), world, tagSpace, 0);
    const int byTag[3] = { 0, 1, 0 };
    snprintf(msg, sizeof(msg), "cycles: %d ranges %d mappings, tags: %d ranges %d mappings",
             laik_my_rangecount(cycled), laik_my_mapcount(cycled), laik_my_rangecount(tagged),
             laik_my_mapcount(tagged));
    check(world, "mapping numbers of task ranges",
          laik_my_rangecount(cycled) == 3 && mapNumbersAre(cycled, eachOwn, 3) &&
          laik_my_rangecount(tagged) == 3 && mapNumbersAre(tagged, byTag, 2), msg);

    /* 9. Text of the program's own in the profile file. */
    if (argc > 1) {
        char file[512];
        snprintf(file, sizeof(file), "%s-%d.txt", argv[1], me);
        laik_enable_profiling_file(inst, file);
        laik_profile_printf("marker of rank %d: %s\n", me, "provided");
        laik_close_profiling_file(inst);
        char line[256] = "";
        char want[64];
        snprintf(want, sizeof(want), "marker of rank %d: provided\n", me);
        FILE* f = fopen(file, "r");
        int found = 0;
        while (f && fgets(line, sizeof(line), f))
            if (strcmp(line, want) == 0) found = 1;
        if (f) fclose(f);
        snprintf(msg, sizeof(msg), "no marker line in the profile file");
        check(world, "profile text", found, msg);
    }

    laik_finalize(inst);
    free(slots);
    return failures ? 1 : 0;
}
