/* laik-internal.h from C: named spaces shared through LAIK's space store (the calls LAIK's
 * spacestest uses): the master publishes two spaces, everybody a third; after a sync every
 * process sees all three; then everybody moves the 1d space and the master the 2d one, and
 * after the next sync everybody sees the moves. Prints what the spacestest case expects. */
#include <inttypes.h>
#include <laik-internal.h>

static void show(Laik_Instance* inst)
{
    static const char* names[3] = { "1d-space", "2d-space", "3d-space" };
    int me = laik_myid(laik_world(inst));
    for (int k = 0; k < 3; k++) {
        Laik_Space* s = laik_spacestore_get(inst, (char*) names[k]);
        if (!s || s->dims != k + 1) {
            printf("T%d: %s missing\n", me, names[k]);
            continue;
        }
        printf("T%d: %s:", me, names[k]);
        for (int d = 0; d < s->dims; d++)
            printf("%s %" PRId64 " - %" PRId64, d ? " /" : "", s->range.from.i[d], s->range.to.i[d]);
        printf("\n");
    }
}

static void publish(Laik_Space* s, const char* name)
{
    laik_set_space_name(s, (char*) name);
    laik_spacestore_set(s);
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    int master = laik_myid(laik_world(inst)) == 0;
    if (master) {
        publish(laik_new_space_1d(inst, 100), "1d-space");
        publish(laik_new_space_2d(inst, 200, 300), "2d-space");
    }
    publish(laik_new_space_3d(inst, 400, 500, 600), "3d-space");
    laik_sync_spaces(inst);
    show(inst);
    laik_change_space_1d(laik_spacestore_get(inst, "1d-space"), -100, 1000);
    if (master) laik_change_space_2d(laik_spacestore_get(inst, "2d-space"), -200, 2000, -300, 3000);
    laik_sync_spaces(inst);
    show(inst);
    laik_finalize(inst);
    return 0;
}
