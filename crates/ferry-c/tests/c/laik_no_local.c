/* laik.h from C: a process that holds no element of a container asks for the global index of
 * its local index 0, which LAIK treats as a fatal program error. Every process holding
 * nothing must end with status 1 and a message naming its rank, the call and why; the others
 * print what they hold. Usage: laik_no_local (run on more processes than the 2 elements) */
#include <laik.h>
#include <stdio.h>

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    Laik_Data* d = laik_new_data_1d(inst, laik_Double, 2);
    laik_switchto_new_partitioning(d, world, laik_new_block_partitioner1(), LAIK_DF_None,
                                   LAIK_RO_None);
    uint64_t cnt;
    laik_get_map_1d(d, 0, 0, &cnt);
    if (cnt > 0) printf("rank %d holds %llu\n", laik_myid(world), (unsigned long long) cnt);
    fflush(stdout);
    long long first = (long long) laik_local2global_1d(d, 0);
    printf("rank %d starts at %lld\n", laik_myid(world), first);
    laik_finalize(inst);
    return 0;
}
