/* laik.h from C: the printing role moves from rank 0 to rank 1 when a shrink removes rank 0,
 * which then lingers before it ends. Under the launcher stdout is a pipe; the lines must still
 * arrive in the order they were printed (C buffers a pipe fully unless laik_init changes it). */
#include <laik.h>
#include <unistd.h>

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    Laik_Space* sp = laik_new_space_1d(inst, 8);
    Laik_Data* d = laik_new_data(sp, laik_Double);
    laik_switchto_partitioning(d, laik_new_partitioning(laik_new_block_partitioner1(), world, sp, 0),
                               LAIK_DF_None, LAIK_RO_None);
    if (laik_myid(world) == 0) printf("first, from rank 0\n");
    int zero = 0;
    Laik_Group* rest = laik_new_shrinked_group(world, 1, &zero);
    /* rank 1 gets rank 0's values, so it prints only after rank 0 printed */
    laik_switchto_partitioning(d, laik_new_partitioning(laik_new_block_partitioner1(), rest, sp, 0),
                               LAIK_DF_Preserve, LAIK_RO_None);
    /* well after rank 0's line: the launcher forwards each process's pipe on its own, so only
     * lines printed some time apart have a defined order */
    if (laik_myid(rest) == 0) {
        usleep(300000);
        printf("second, from rank 1\n");
    }
    if (laik_myid(world) == 0) usleep(1000000);
    laik_finalize(inst);
    return 0;
}
