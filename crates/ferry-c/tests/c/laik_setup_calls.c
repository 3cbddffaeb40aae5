/* laik.h from C: the set-up calls of LAIK's logging, program control and profiling, empty
 * action sequences and the printers of actions and switch statistics.
 *
 * Before laik_init a line names the location given to laik_log_init_loc. After it, the
 * threshold set by laik_set_loglevel is undone by laik_log_init; two laik_log_inc and a
 * time base 100 s back join the prefix (`#2 +100.`), laik_log_cleanup drops them again.
 * laik_program_control_init and laik_init_profiling make fresh records; laik_free_profiling
 * ends the user-time measurement. An empty sequence (laik_aseq_new) executes nothing and
 * prints as empty; laik_at_str names action types; laik_log_Action and laik_log_SwitchStat
 * print a header and a summed statistic. The log lines go to stderr (checked by the test);
 * exits 1 on the first mismatch, the master prints one line otherwise. */
#include <laik.h>
#include <laik-internal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static int me;

static int fail(const char* what)
{
    printf("rank %d: %s\n", me, what);
    return 1;
}

int main(int argc, char** argv)
{
    laik_log_init_loc("early-location");
    laik_log(LAIK_LL_Error, "before init");
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    me = laik_myid(world);

    laik_set_loglevel(LAIK_LL_Debug);
    if (!laik_log_shown(LAIK_LL_Debug)) return fail("debug shown after laik_set_loglevel");
    laik_log_init(inst);
    if (laik_log_shown(LAIK_LL_Debug) || !laik_log_shown(LAIK_LL_Error))
        return fail("threshold after laik_log_init");

    laik_log_inc();
    laik_log_inc();
    struct timeval tv;
    gettimeofday(&tv, 0);
    tv.tv_sec -= 100;
    laik_log_set_time(&tv);
    laik_log(LAIK_LL_Error, "counted and timed");
    laik_log_cleanup(inst);
    laik_log(LAIK_LL_Error, "after cleanup");

    Laik_Program_Control* pc1 = laik_program_control_init();
    Laik_Program_Control* pc2 = laik_program_control_init();
    if (!pc1 || !pc2 || pc1 == pc2) return fail("program-control records");
    if (!laik_init_profiling()) return fail("profiling controller");

    laik_enable_profiling(inst);
    laik_profile_user_start(inst);
    double t0 = laik_wtime();
    while (laik_wtime() - t0 < 0.01) {}
    laik_profile_user_stop(inst);
    if (laik_get_user_time() < 0.01) return fail("user time measured");
    laik_free_profiling(inst);
    if (laik_get_user_time() != 0.0) return fail("user time after laik_free_profiling");

    Laik_ActionSeq* as = laik_aseq_new(inst);
    laik_exec_actions(as);
    if (strcmp(laik_at_str(LAIK_AT_MapPackAndSend), "MapPackAndSend") != 0 ||
        strcmp(laik_at_str(LAIK_AT_RBufCopy), "RBufCopy") != 0 ||
        strcmp(laik_at_str(LAIK_AT_Backend + 3), "Backend") != 0 ||
        strcmp(laik_at_str(40), "???") != 0)
        return fail("action type names");
    Laik_Action a = {LAIK_AT_BufSend, 24};

    Laik_SwitchStat* one = laik_newSwitchStat();
    Laik_SwitchStat* sum = laik_newSwitchStat();
    one->switches = 3;
    one->switches_noactions = 1;
    one->msgSendCount = 2;
    one->elemSendCount = 8;
    one->byteSendCount = 64;
    laik_addSwitchStat(sum, one);
    laik_addSwitchStat(sum, one);
    if (sum->switches != 6 || sum->byteSendCount != 128) return fail("summed statistic");

    if (laik_log_begin(LAIK_LL_Error)) {
        laik_log_append("printers: ");
        laik_log_ActionSeq(as, true);
        laik_log_append(" | ");
        laik_log_Action(&a, as);
        laik_log_append(" | ");
        laik_log_SwitchStat(sum);
        laik_log_flush(0);
    }
    laik_aseq_free(as);
    free(one);
    free(sum);

    if (me == 0) printf("set-up calls on %d processes: ok\n", laik_size(world));
    laik_finalize(inst);
    return 0;
}
