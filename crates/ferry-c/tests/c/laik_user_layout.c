/* laik.h from C: a layout of the program's own (struct _Laik_Layout filled by
 * laik_init_layout) given to a container through its layout factory. The layout is
 * column-major with padding: y fastest, columns PAD elements longer than the box is high.
 * Every process writes the values of its block of a 2d space at the places its layout's
 * offset function names, packs its block with the layout's pack function (left NULL, so
 * LAIK's generic one: the values in lexicographic order, x fastest) and checks the order,
 * unpacks negated values and checks they land at the layout's places, then the master
 * collects the space (Preserve) and checks every value at its place in its own mapping.
 * The master also checks the description of LAIK's lexicographic layout and its reuse of an
 * enclosing section's allocation. `-l` runs the same with LAIK's lexicographic layout as the factory (laik_new_layout_lex).
 * `-s` (a serpentine layout: every second row reversed) is not a layout of strides: setting
 * the factory is LAIK's fatal error naming the layout. Exits 1 on the first mismatch; the master
 * prints one line otherwise. */
#include <laik.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NX 7
#define NY 11
#define PAD 3

static int me;
static int serpentine;

typedef struct {
    Laik_Layout h;
    Laik_Range box;
} ColumnLayout;

static int64_t column_offset(Laik_Layout* l, int n, Laik_Index* idx)
{
    ColumnLayout* c = (ColumnLayout*) l;
    (void) n;
    int64_t x = idx->i[0] - c->box.from.i[0];
    int64_t y = idx->i[1] - c->box.from.i[1];
    int64_t w = c->box.to.i[0] - c->box.from.i[0];
    int64_t h = c->box.to.i[1] - c->box.from.i[1];
    if (serpentine)
        return y * w + ((y % 2) ? (w - 1 - x) : x);
    return x * (h + PAD) + y;
}

static int column_mapno(Laik_Layout* l, int n)
{
    (void) l;
    return n;
}

static int column_section(Laik_Layout* l, Laik_Index* idx)
{
    ColumnLayout* c = (ColumnLayout*) l;
    for (int d = 0; d < 2; d++)
        if (idx->i[d] < c->box.from.i[d] || idx->i[d] >= c->box.to.i[d]) return -1;
    return 0;
}

static char* column_describe(Laik_Layout* l)
{
    (void) l;
    return serpentine ? "serpentine" : "column-major";
}

static Laik_Layout* column_factory(int n, Laik_Range* range)
{
    ColumnLayout* c = malloc(sizeof(ColumnLayout));
    c->box = range[0];
    uint64_t w = (uint64_t) (range[0].to.i[0] - range[0].from.i[0]);
    uint64_t h = (uint64_t) (range[0].to.i[1] - range[0].from.i[1]);
    laik_init_layout(&c->h, 2, n, w * (h + PAD), column_section, column_mapno, column_offset, 0,
                     column_describe, 0, 0, 0);
    return &c->h;
}

static double value(int64_t x, int64_t y)
{
    return 100.0 * (double) y + (double) x;
}

static int fail(const char* what, double got, double want)
{
    printf("rank %d: %s: %g, expected %g\n", me, what, got, want);
    return 1;
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    me = laik_myid(world);
    serpentine = argc > 1 && strcmp(argv[1], "-s") == 0;
    laik_layout_factory_t factory = column_factory;
    if (argc > 1 && strcmp(argv[1], "-l") == 0) factory = laik_new_layout_lex;
    Laik_Space* sp = laik_new_space_2d(inst, NX, NY);
    Laik_Data* d = laik_new_data(sp, laik_Double);
    laik_data_set_layout_factory(d, factory);

    Laik_Partitioning* block =
        laik_new_partitioning(laik_new_block_partitioner(1, 1, 0, 0, 0), world, sp, 0);
    laik_switchto_partitioning(d, block, LAIK_DF_None, LAIK_RO_None);
    if (laik_my_rangecount(block) > 0) {
        Laik_Range r = *laik_taskrange_get_range(laik_my_range(block, 0));
        Laik_Layout* l = factory(1, &r);
        Laik_Mapping* m = laik_get_map(d, 0);
        double* base;
        laik_get_map_2d(d, 0, (void**) &base, 0, 0, 0);
        for (int64_t y = r.from.i[1]; y < r.to.i[1]; y++)
            for (int64_t x = r.from.i[0]; x < r.to.i[0]; x++) {
                Laik_Index i = {{x, y, 0}};
                base[laik_offset(l, 0, &i)] = value(x, y);
            }

        /* the generic pack reads through the mapping in x-fastest order, in pieces */
        uint64_t count = laik_range_size(&r);
        double* buf = calloc(count, sizeof(double));
        Laik_Index at = r.from;
        unsigned int got = 0, piece;
        while ((piece = l->pack(m, &r, &at, (char*) (buf + got), 5 * sizeof(double))) > 0)
            got += piece;
        if (got != count) return fail("packed elements", got, (double) count);
        uint64_t k = 0;
        for (int64_t y = r.from.i[1]; y < r.to.i[1]; y++)
            for (int64_t x = r.from.i[0]; x < r.to.i[0]; x++, k++)
                if (buf[k] != value(x, y)) return fail("packed value", buf[k], value(x, y));

        for (k = 0; k < count; k++) buf[k] = -buf[k];
        at = r.from;
        if (l->unpack(m, &r, &at, (char*) buf, (unsigned int) (count * sizeof(double))) != count)
            return fail("unpacked elements", 0, (double) count);
        for (int64_t y = r.from.i[1]; y < r.to.i[1]; y++)
            for (int64_t x = r.from.i[0]; x < r.to.i[0]; x++) {
                Laik_Index i = {{x, y, 0}};
                double v = base[laik_offset(l, 0, &i)];
                if (v != -value(x, y)) return fail("unpacked value", v, -value(x, y));
                base[laik_offset(l, 0, &i)] = value(x, y);
            }
        free(buf);
    }

    Laik_Partitioning* master = laik_new_partitioning(laik_Master, world, sp, 0);
    laik_switchto_partitioning(d, master, LAIK_DF_Preserve, LAIK_RO_None);
    if (me == 0) {
        Laik_Range all = *laik_space_asrange(sp);
        Laik_Layout* l = factory(1, &all);
        double* base;
        laik_get_map_2d(d, 0, (void**) &base, 0, 0, 0);
        for (int64_t y = 0; y < NY; y++)
            for (int64_t x = 0; x < NX; x++) {
                Laik_Index i = {{x, y, 0}};
                double v = base[laik_offset(l, 0, &i)];
                if (v != value(x, y)) return fail("collected value", v, value(x, y));
            }
        /* LAIK's lexicographic layout: description, and reuse of an enclosing section
         * (offsets then follow the old section's allocation) */
        Laik_Range inner;
        laik_range_init_2d(&inner, sp, 2, 5, 3, 9);
        Laik_Layout* small = laik_new_layout_lex(1, &inner);
        Laik_Layout* large = laik_new_layout_lex(1, &all);
        if (strcmp(large->describe(large), "lex (2d, 1 maps, strides 1/7/77)") != 0)
            return fail("lex description", 0, 1);
        if (large->reuse(large, 0, small, 0)) return fail("reuse of a smaller section", 1, 0);
        if (!small->reuse(small, 0, large, 0)) return fail("reuse of an enclosing section", 0, 1);
        Laik_Index i = {{3, 4, 0}};
        if (laik_offset(small, 0, &i) != laik_offset(large, 0, &i) || small->count != NX * NY)
            return fail("offset after reuse", (double) laik_offset(small, 0, &i),
                        (double) laik_offset(large, 0, &i));
        printf("own layout on %d processes: ok\n", laik_size(world));
    }
    laik_finalize(inst);
    return 0;
}
