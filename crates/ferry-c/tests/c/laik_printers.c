/* laik.h from C: LAIK's debug printers of range lists, transitions, action sequences and
 * checksums (debug.h), appended to a log message as LAIK's other printers are. Rank 0 builds
 * one warning line with all of them and, at log level 1, the "if changed" lines of an action
 * sequence; every process then executes that sequence (block -> master with a sum), and the
 * master checks the sum. With -c the program asks for the checksum of int32 elements, which
 * LAIK refuses: a fatal error. */
#include <laik.h>
#include <stdio.h>
#include <string.h>

#define N 10

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    int me = laik_myid(world);
    if (argc > 1 && strcmp(argv[1], "-c") == 0) {
        int32_t v[2] = {1, 2};
        laik_set_loglevel(LAIK_LL_Info);
        laik_log_begin(LAIK_LL_Warning);
        laik_log_Checksum((char*) v, 2, laik_Int32);
        laik_log_flush(0);
        printf("rank %d: a checksum of int32 was accepted\n", me);
        return 0;
    }
    Laik_Space* sp = laik_new_space_1d(inst, N);
    Laik_Data* d = laik_new_data(sp, laik_Double);
    laik_data_set_name(d, "vec");
    Laik_Partitioning* block = laik_new_partitioning(laik_new_block_partitioner1(), world, sp, 0);
    Laik_Partitioning* master = laik_new_partitioning(laik_Master, world, sp, 0);
    laik_partitioning_set_name(master, "collect");
    laik_switchto_partitioning(d, block, LAIK_DF_None, LAIK_RO_None);
    double* base;
    uint64_t cnt;
    laik_get_map_1d(d, 0, (void**) &base, &cnt);
    int64_t from, to;
    laik_my_range_1d(block, 0, &from, &to);
    for (uint64_t k = 0; k < cnt; k++) base[k] = (double) (from + (int64_t) k) + 0.5;

    Laik_Transition* t = laik_calc_transition(sp, block, master, LAIK_DF_Preserve, LAIK_RO_Sum);
    Laik_ActionSeq* as = laik_calc_actions(d, t, 0, 0);
    if (me == 0) {
        Laik_RangeList* rl = laik_rangelist_new(sp, 2);
        Laik_Range r;
        laik_range_init_1d(&r, sp, 0, 4);
        laik_rangelist_append(rl, 0, &r, 0, 0);
        laik_range_init_1d(&r, sp, 4, 10);
        laik_rangelist_append(rl, 1, &r, 0, 0);
        laik_rangelist_freeze(rl, false);
        double sums[3] = {1.5, 2.25, 3.0};
        laik_set_loglevel(LAIK_LL_Info);
        laik_log_begin(LAIK_LL_Warning);
        laik_log_append("printers2: ");
        laik_log_RangeList(rl);
        laik_log_append(" | ");
        laik_log_Transition(t, true);
        laik_log_append(" | ");
        laik_log_ActionSeq(as, true);
        laik_log_append(" | ");
        laik_log_Checksum((char*) sums, 3, laik_Double);
        laik_log_flush(0);
        laik_rangelist_free(rl);
        laik_set_loglevel(LAIK_LL_Debug);
        laik_log_ActionSeqIfChanged(false, as, "aseq");
        laik_log_ActionSeqIfChanged(true, as, "aseq");
        laik_set_loglevel(LAIK_LL_Error);
    }
    laik_exec_actions(as);
    if (me == 0) {
        laik_get_map_1d(d, 0, (void**) &base, &cnt);
        double sum = 0.0;
        for (uint64_t k = 0; k < cnt; k++) sum += base[k];
        if (cnt != N || sum != N * (N - 1) / 2.0 + N * 0.5) {
            printf("wrong sum %g of %llu values\n", sum, (unsigned long long) cnt);
            return 1;
        }
        printf("printers and the printed sequence: ok\n");
    }
    laik_aseq_free(as);
    laik_free_transition(t);
    laik_finalize(inst);
    return 0;
}
