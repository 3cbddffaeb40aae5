/* laik-internal.h from C: the readable fields of a group (LAIK's test programs print
 * `world->myid` and loop to `world->size`) and the exchange of location strings
 * (laik_sync_location, and its older name laik_location_synchronize_data). Checks, on every
 * process:
 *  - myid and size of the world, a clone and a shrinked group equal laik_myid / laik_size
 *    (myid -1 in a group the process is not in), and the handles have distinct gids;
 *  - before the exchange only the own location is known (others NULL); after it every
 *    member's location is known, the own one equals laik_mylocation, all differ, and a
 *    shrinked group names the locations of its members' world ranks;
 *  - the older call runs the same exchange again.
 * Exits 1 on the first mismatch; prints one line at the master otherwise. */
#include <laik-internal.h>
#include <stdio.h>
#include <string.h>

static int fail(int me, const char* what)
{
    printf("rank %d: %s\n", me, what);
    return 1;
}

static int fields_ok(Laik_Group* g)
{
    return g->myid == laik_myid(g) && g->size == laik_size(g);
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    int me = laik_myid(world), n = laik_size(world);
    Laik_Group* clone = laik_clone_group(world);
    int drop[1] = {0};
    Laik_Group* rest = laik_new_shrinked_group(world, 1, drop);
    if (!fields_ok(world) || !fields_ok(clone) || !fields_ok(rest))
        return fail(me, "group fields differ from laik_myid / laik_size");
    if (world->myid != me || rest->size != n - 1 || rest->myid != me - 1)
        return fail(me, "group fields wrong");
    if (world->gid == clone->gid || clone->gid == rest->gid || world->inst != inst)
        return fail(me, "group handles not told apart");

    for (int i = 0; i < n; i++)
        if ((laik_group_location(world, i) != 0) != (i == me))
            return fail(me, "a location other than the own known before the exchange");
    laik_sync_location(inst);
    const char* mine = laik_mylocation(inst);
    for (int i = 0; i < n; i++) {
        const char* li = laik_group_location(world, i);
        if (!li || !strchr(li, ':')) return fail(me, "a location missing after the exchange");
        if ((strcmp(li, mine) == 0) != (i == me)) return fail(me, "locations not told apart");
        if (i > 0 && strcmp(laik_group_location(rest, i - 1), li) != 0)
            return fail(me, "a shrinked group names another process's location");
    }
    laik_location_synchronize_data(inst, world);
    if (strcmp(laik_group_location(world, me), mine) != 0)
        return fail(me, "own location changed by the second exchange");
    if (me == 0) printf("group fields and %d locations: ok\n", n);
    laik_finalize(inst);
    return 0;
}
