/*
 * Callbacks of LAIK's key-value store (laik_kvs_reg_callbacks): after each sync, every
 * process is told about the entries other processes created, changed or removed, and about
 * nothing it did itself.
 *
 * Round 1: each process sets "k-<rank>" = "a"    -> others see n-1 created
 * Round 2: process 0 sets "k-<n-1>" = "b"        -> every process but 0 sees 1 changed
 * Round 3: process 0 removes "k-0"               -> every process but 0 sees 1 removed
 *
 * Prints one line per round, "... right" or "... wrong: DETAILS"; exit status 1 if wrong.
 */
#include <laik.h>

#include <string.h>

static int created, changed, removed, badKeys;
static Laik_KVStore* watched;

static void onCreated(Laik_KVStore* kvs, Laik_KVS_Entry* e)
{
    if (kvs != watched || strncmp(laik_kvs_key(e), "k-", 2) != 0) badKeys++;
    created++;
}

static void onChanged(Laik_KVStore* kvs, Laik_KVS_Entry* e)
{
    unsigned int size = 0;
    char* d = laik_kvs_data(e, &size);
    if (kvs != watched || size != 2 || strcmp(d, "b") != 0) badKeys++;
    changed++;
}

static void onRemoved(Laik_KVStore* kvs, char* key)
{
    if (kvs != watched || strcmp(key, "k-0") != 0) badKeys++;
    removed++;
}

static int failures = 0;

static void round_done(int me, int round, int wantC, int wantU, int wantR)
{
    int ok = created == wantC && changed == wantU && removed == wantR && badKeys == 0;
    if (ok)
        printf("rank %d: round %d right\n", me, round);
    else {
        printf("rank %d: round %d wrong: created %d changed %d removed %d (want %d %d %d), "
               "%d unexpected entries\n", me, round, created, changed, removed, wantC, wantU,
               wantR, badKeys);
        failures++;
    }
    created = changed = removed = badKeys = 0;
}

int main(int argc, char* argv[])
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    int me = laik_myid(world);
    int n = laik_size(world);
    char key[32];

    watched = laik_kvs_new("watched", inst);
    laik_kvs_reg_callbacks(watched, onCreated, onChanged, onRemoved);

    snprintf(key, sizeof(key), "k-%d", me);
    laik_kvs_sets(watched, key, "a");
    laik_kvs_sync(watched);
    round_done(me, 1, n - 1, 0, 0);

    if (me == 0) {
        snprintf(key, sizeof(key), "k-%d", n - 1);
        laik_kvs_sets(watched, key, "b");
    }
    laik_kvs_sync(watched);
    round_done(me, 2, 0, me == 0 ? 0 : 1, 0);

    if (me == 0) laik_kvs_remove(watched, "k-0");
    laik_kvs_sync(watched);
    round_done(me, 3, 0, 0, me == 0 ? 0 : 1);

    laik_kvs_free(watched);
    laik_finalize(inst);
    return failures ? 1 : 0;
}
