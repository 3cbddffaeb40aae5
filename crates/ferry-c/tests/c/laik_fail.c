/* A failure under laik.h: the last process kills itself (SIGKILL) before a data exchange. The
 * others must end with LAIK's fatal-error behaviour: a message naming the operation and the
 * dead rank on stderr and exit status 1, never an abort. */
#include <laik.h>

#include <signal.h>
#include <unistd.h>

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* g = laik_world(inst);
    Laik_Space* sp = laik_new_space_1d(inst, 1000);
    Laik_Data* d = laik_new_data(sp, laik_Double);
    laik_switchto_partitioning(d, laik_new_partitioning(laik_new_block_partitioner1(), g, sp, 0),
                               LAIK_DF_None, LAIK_RO_None);
    laik_fill_double(d, 1.0);
    if (laik_myid(g) == laik_size(g) - 1) {
        usleep(200 * 1000);
        kill(getpid(), SIGKILL);
        pause();
    }
    laik_switchto_partitioning(d, laik_new_partitioning(laik_Master, g, sp, 0), LAIK_DF_Preserve,
                               LAIK_RO_None);
    printf("rank %d: switch returned\n", laik_myid(g));
    laik_finalize(inst);
    return 0;
}
