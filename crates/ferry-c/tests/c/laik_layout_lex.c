/* laik.h from C: LAIK's lexicographic layout objects (data.h). A layout over this process's
 * ranges of a 2d block partitioning (along y, two cycles: two ranges per process, each in a
 * mapping of its own) has one section per range with x fastest: laik_layout_lex_stride
 * gives 1 and the section's x extent, and laik_offset of every index of a section gives
 * its element in the container's own 2d mapping of that partitioning (row offset / width,
 * column offset % width of base[row * ystride + col]), which the program checks by reading
 * the value there. A 3d layout over one box checks the
 * z stride. Exits 1 on the first mismatch; the master prints one line otherwise. */
#include <laik.h>
#include <stdio.h>

#define NX 9
#define NY 13

static int me;

static int fail(const char* what, long long got, long long want)
{
    printf("rank %d: %s: %lld, expected %lld\n", me, what, got, want);
    return 1;
}

int main(int argc, char** argv)
{
    Laik_Instance* inst = laik_init(&argc, &argv);
    Laik_Group* world = laik_world(inst);
    me = laik_myid(world);
    Laik_Space* sp = laik_new_space_2d(inst, NX, NY);
    Laik_Partitioner* byrow = laik_new_block_partitioner(1, 2, 0, 0, 0);
    Laik_Partitioning* block = laik_new_partitioning(byrow, world, sp, 0);
    Laik_Data* d = laik_new_data(sp, laik_Double);

    laik_switchto_partitioning(d, laik_new_partitioning(laik_All, world, sp, 0), LAIK_DF_None,
                               LAIK_RO_None);
    double* base;
    uint64_t ysize, ystride, xsize;
    laik_get_map_2d(d, 0, (void**) &base, &ysize, &ystride, &xsize);
    for (uint64_t y = 0; y < ysize; y++)
        for (uint64_t x = 0; x < xsize; x++)
            base[y * ystride + x] = 1000.0 * (double) y + (double) x;
    laik_switchto_partitioning(d, block, LAIK_DF_Preserve, LAIK_RO_None);

    int n = laik_my_rangecount(block);
    if (n > 8 || laik_my_mapcount(block) != n)
        return fail("mappings of the ranges", laik_my_mapcount(block), n);
    Laik_Range ranges[8];
    for (int k = 0; k < n; k++)
        ranges[k] = *laik_taskrange_get_range(laik_my_range(block, k));
    Laik_Layout* l = laik_new_layout_lex(n, ranges);
    for (int k = 0; k < n; k++) {
        Laik_Range* r = &ranges[k];
        int64_t w = r->to.i[0] - r->from.i[0];
        if (laik_layout_lex_stride(l, k, 0) != 1)
            return fail("x stride", (long long) laik_layout_lex_stride(l, k, 0), 1);
        if ((int64_t) laik_layout_lex_stride(l, k, 1) != w)
            return fail("y stride", (long long) laik_layout_lex_stride(l, k, 1), w);
        /* the container's mapping k covers this range; its rows are ystride apart, the
         * layout's w apart */
        laik_get_map_2d(d, k, (void**) &base, &ysize, &ystride, &xsize);
        for (int64_t y = r->from.i[1]; y < r->to.i[1]; y++) {
            for (int64_t x = r->from.i[0]; x < r->to.i[0]; x++) {
                Laik_Index idx;
                laik_index_init(&idx, x, y, 0);
                int64_t off = laik_offset(l, k, &idx);
                int64_t want = (y - r->from.i[1]) * w + (x - r->from.i[0]);
                if (off != want) return fail("offset", off, want);
                int64_t row = off / w, col = off % w;
                double v = base[row * (int64_t) ystride + col];
                if (v != 1000.0 * (double) y + (double) x)
                    return fail("value at offset", (long long) v, 1000 * y + x);
            }
        }
    }
    Laik_Space* s3 = laik_new_space_3d(inst, 4, 5, 6);
    Laik_Range box;
    laik_range_init_3d(&box, s3, 1, 4, 2, 5, 3, 6);
    Laik_Layout* l3 = laik_new_layout_lex(1, &box);
    Laik_Index last;
    laik_index_init(&last, 3, 4, 5);
    if (laik_layout_lex_stride(l3, 0, 2) != 9)
        return fail("z stride", (long long) laik_layout_lex_stride(l3, 0, 2), 9);
    if (laik_offset(l3, 0, &last) != 26)
        return fail("last offset in 3d", laik_offset(l3, 0, &last), 26);
    if (me == 0) printf("lexicographic layouts of %d processes: ok\n", laik_size(world));
    laik_finalize(inst);
    return 0;
}
