/*
 * laik.h: LAIK's programming interface over ferry (libferry). Declarations are written to be
 * source compatible with LAIK's public headers for the calls LAIK's example programs use;
 * the implementation is ferry's data layer. See docs/C-API.md.
 *
 * Failures are fatal, as in LAIK: the message (rank, operation, cause) goes to stderr and the
 * process exits with status 1.
 */
#ifndef FERRY_LAIK_H
#define FERRY_LAIK_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _Laik_Instance Laik_Instance;
typedef struct _Laik_Group Laik_Group;
typedef struct _Laik_Space Laik_Space;
typedef struct _Laik_Partitioner Laik_Partitioner;
typedef struct _Laik_Partitioning Laik_Partitioning;
typedef struct _Laik_TaskRange Laik_TaskRange;
typedef struct _Laik_Type Laik_Type;
typedef struct _Laik_Data Laik_Data;
typedef struct _Laik_Mapping Laik_Mapping;
typedef struct _Laik_Layout Laik_Layout;
typedef struct _Laik_Reservation Laik_Reservation;
typedef struct _Laik_Transition Laik_Transition;
typedef struct _Laik_ActionSeq Laik_ActionSeq;
typedef struct _Laik_RangeReceiver Laik_RangeReceiver;
typedef struct _Laik_PartitionerParams Laik_PartitionerParams;
typedef struct _Laik_RangeList Laik_RangeList;
typedef struct _Laik_RangeFilter Laik_RangeFilter;
typedef struct _Laik_Error Laik_Error;
typedef struct _Laik_Backend Laik_Backend;
typedef struct _Laik_Task Laik_Task;
typedef struct _Laik_AccessPhase Laik_AccessPhase;
typedef struct _Laik_PartGroup Laik_PartGroup;
typedef struct _Laik_SwitchStat Laik_SwitchStat;
typedef struct _Laik_MappingList Laik_MappingList;

/* An index of up to three dimensions (x, y, z). */
typedef struct _Laik_Index {
    int64_t i[3];
} Laik_Index;

/* The box [from, to) of a space. */
typedef struct _Laik_Range {
    Laik_Space* space;
    Laik_Index from;
    Laik_Index to;
} Laik_Range;

typedef enum _Laik_DataFlow {
    LAIK_DF_None = 0,
    LAIK_DF_Preserve,
    LAIK_DF_Init
} Laik_DataFlow;

typedef enum _Laik_ReductionOperation {
    LAIK_RO_None = 0,
    LAIK_RO_Sum,
    LAIK_RO_Prod,
    LAIK_RO_Min,
    LAIK_RO_Max,
    LAIK_RO_And,
    LAIK_RO_Or,
    LAIK_RO_Any,
    LAIK_RO_Single,
    LAIK_RO_Custom = 100
} Laik_ReductionOperation;

typedef enum _Laik_LogLevel {
    LAIK_LL_None = 0,
    LAIK_LL_Debug,
    LAIK_LL_Info,
    LAIK_LL_Warning,
    LAIK_LL_Error,
    LAIK_LL_Panic
} Laik_LogLevel;

/* ---- instance, groups, phases ---- */

Laik_Instance* laik_init(int* argc, char*** argv);
void laik_finalize(Laik_Instance* inst);
Laik_Group* laik_world(Laik_Instance* inst);
int laik_size(Laik_Group* g);
int laik_myid(Laik_Group* g);
Laik_Instance* laik_inst(Laik_Group* g);
Laik_Group* laik_new_shrinked_group(Laik_Group* g, int len, int* list);
Laik_Group* laik_group_parent(Laik_Group* g);
Laik_Group* laik_clone_group(Laik_Group* g);
Laik_Group* laik_new_union_group(Laik_Group* g1, Laik_Group* g2);
Laik_Group* laik_create_group(Laik_Instance* inst, int maxsize);
void laik_set_world(Laik_Instance* inst, Laik_Group* newworld);
char* laik_get_guid(Laik_Instance* inst);
char* laik_group_location(Laik_Group* group, int id);
void laik_release_group(Laik_Group* g);
Laik_Group* laik_allow_world_resize(Laik_Instance* inst, int phase);
void laik_finish_world_resize(Laik_Instance* inst);
int laik_epoch(Laik_Instance* inst);
int laik_mylocationid(Laik_Instance* inst);
char* laik_mylocation(Laik_Instance* inst);
int laik_group_locationid(Laik_Group* group, int id);
int laik_get_master(Laik_Group* g);
bool laik_set_master(Laik_Group* g, int id);
bool laik_is_master(Laik_Group* g);
bool laik_is_managed(Laik_Instance* inst);
int laik_phase(Laik_Instance* inst);
void laik_set_phase(Laik_Instance* inst, int n, const char* name, void* data);
void laik_get_phase(Laik_Instance* inst, int* n, const char** name, void** data);
void laik_set_iteration(Laik_Instance* inst, int iter);
int laik_get_iteration(Laik_Instance* inst);
void laik_iter_reset(Laik_Instance* inst);
void laik_set_args(Laik_Instance* inst, int argc, char** argv);
typedef struct tag_laik_program_control Laik_Program_Control;
Laik_Program_Control* laik_program_control_init(void);
double laik_wtime(void);

/* ---- logging (to stderr, LAIK_LOG / FERRY_LOG threshold) and profiling ---- */

struct timeval;

/* Set-up of logging: laik_init does what LAIK's instance set-up does, so programs need not
 * call these; see docs/C-API.md for the prefix that the counter and time base join. */
void laik_log_init(Laik_Instance* inst);
void laik_log_init_loc(char* mylocation);
void laik_log_cleanup(Laik_Instance* inst);
void laik_log_set_time(struct timeval* t);
void laik_log_inc(void);

bool laik_log_shown(int level);
void laik_set_loglevel(int level);
void laik_log_write(int level, const char* text);
void laik_panic(const char* msg);

static inline void laik_log(int level, const char* msg, ...)
{
    char buf[2048];
    va_list ap;
    if (!laik_log_shown(level)) return;
    va_start(ap, msg);
    vsnprintf(buf, sizeof(buf), msg, ap);
    va_end(ap);
    laik_log_write(level, buf);
}

bool laik_log_begin(int level);
void laik_log_append_text(const char* text);
void laik_log_flush_text(void);

static inline void laik_log_append(const char* msg, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, msg);
    vsnprintf(buf, sizeof(buf), msg, ap);
    va_end(ap);
    laik_log_append_text(buf);
}

static inline void laik_log_flush(const char* msg, ...)
{
    char buf[2048];
    va_list ap;
    if (msg) {
        va_start(ap, msg);
        vsnprintf(buf, sizeof(buf), msg, ap);
        va_end(ap);
        laik_log_append_text(buf);
    }
    laik_log_flush_text();
}

typedef struct _Laik_Profiling_Controller Laik_Profiling_Controller;
Laik_Profiling_Controller* laik_init_profiling(void);
void laik_free_profiling(Laik_Instance* inst);

void laik_enable_profiling(Laik_Instance* inst);
void laik_enable_profiling_file(Laik_Instance* inst, const char* filename);
void laik_close_profiling_file(Laik_Instance* inst);
void laik_reset_profiling(Laik_Instance* inst);
void laik_profile_user_start(Laik_Instance* inst);
void laik_profile_user_stop(Laik_Instance* inst);
void laik_writeout_profile(void);
void laik_profile_write_text(const char* text);

static inline void laik_profile_printf(const char* msg, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, msg);
    vsnprintf(buf, sizeof(buf), msg, ap);
    va_end(ap);
    laik_profile_write_text(buf);
}

double laik_get_total_time(void);
double laik_get_backend_time(void);
double laik_get_user_time(void);

/* ---- index spaces ---- */

Laik_Space* laik_new_space(Laik_Instance* inst);
Laik_Space* laik_new_space_1d(Laik_Instance* inst, int64_t s1);
Laik_Space* laik_new_space_2d(Laik_Instance* inst, int64_t s1, int64_t s2);
Laik_Space* laik_new_space_3d(Laik_Instance* inst, int64_t s1, int64_t s2, int64_t s3);
void laik_free_space(Laik_Space* s);
void laik_set_space_name(Laik_Space* s, char* name);
void laik_change_space_1d(Laik_Space* s, int64_t from1, int64_t to1);
void laik_change_space_2d(Laik_Space* s, int64_t from1, int64_t to1, int64_t from2, int64_t to2);
void laik_change_space_3d(Laik_Space* s, int64_t from1, int64_t to1, int64_t from2, int64_t to2,
                          int64_t from3, int64_t to3);
int laik_space_getdimensions(Laik_Space* s);
uint64_t laik_space_size(const Laik_Space* s);
void laik_index_init(Laik_Index* i, int64_t i1, int64_t i2, int64_t i3);
void laik_range_init(Laik_Range* r, Laik_Space* s, Laik_Index* from, Laik_Index* to);
void laik_range_init_1d(Laik_Range* r, Laik_Space* s, int64_t from, int64_t to);
void laik_range_init_2d(Laik_Range* r, Laik_Space* s,
                        int64_t from1, int64_t to1, int64_t from2, int64_t to2);
void laik_range_init_3d(Laik_Range* r, Laik_Space* s,
                        int64_t from1, int64_t to1, int64_t from2, int64_t to2,
                        int64_t from3, int64_t to3);
uint64_t laik_range_size(const Laik_Range* r);
const Laik_Range* laik_space_asrange(Laik_Space* space);

static inline bool laik_is_reduction(Laik_ReductionOperation redOp)
{
    return redOp != LAIK_RO_None;
}

static inline bool laik_index_isEqual(int dims, const Laik_Index* i1, const Laik_Index* i2)
{
    for (int d = 0; d < dims; d++)
        if (i1->i[d] != i2->i[d]) return false;
    return true;
}

static inline void laik_range_init_copy(Laik_Range* dst, Laik_Range* src)
{
    *dst = *src;
}

static inline bool laik_range_isEmpty(Laik_Range* r)
{
    int dims = laik_space_getdimensions(r->space);
    for (int d = 0; d < dims; d++)
        if (r->from.i[d] >= r->to.i[d]) return true;
    return false;
}

static inline bool laik_range_isEqual(Laik_Range* r1, Laik_Range* r2)
{
    int dims = laik_space_getdimensions(r1->space);
    return r1->space == r2->space && laik_index_isEqual(dims, &r1->from, &r2->from) &&
           laik_index_isEqual(dims, &r1->to, &r2->to);
}

/* The intersection, in storage of the calling translation unit that the next call
 * overwrites (as LAIK's); NULL if it is empty. */
static inline Laik_Range* laik_range_intersect(const Laik_Range* r1, const Laik_Range* r2)
{
    static Laik_Range res;
    int dims = laik_space_getdimensions(r1->space);
    res = *r1;
    for (int d = 0; d < dims; d++) {
        if (r2->from.i[d] > res.from.i[d]) res.from.i[d] = r2->from.i[d];
        if (r2->to.i[d] < res.to.i[d]) res.to.i[d] = r2->to.i[d];
        if (res.from.i[d] >= res.to.i[d]) return NULL;
    }
    return &res;
}

static inline void laik_range_expand(Laik_Range* dst, Laik_Range* src)
{
    int dims = laik_space_getdimensions(dst->space);
    for (int d = 0; d < dims; d++) {
        if (src->from.i[d] < dst->from.i[d]) dst->from.i[d] = src->from.i[d];
        if (src->to.i[d] > dst->to.i[d]) dst->to.i[d] = src->to.i[d];
    }
}

static inline bool laik_range_within_range(const Laik_Range* r1, const Laik_Range* r2)
{
    int dims = laik_space_getdimensions(r1->space);
    for (int d = 0; d < dims; d++) {
        if (r1->from.i[d] >= r1->to.i[d]) continue;
        if (r1->from.i[d] < r2->from.i[d] || r1->to.i[d] > r2->to.i[d]) return false;
    }
    return true;
}

static inline bool laik_range_within_space(const Laik_Range* range, const Laik_Space* sp)
{
    return laik_range_within_range(range, laik_space_asrange((Laik_Space*) sp));
}

/* ---- debug printers: append to the log message being built (laik_log_begin) ---- */

void laik_log_IntList(int len, int* list);
void laik_log_PrettyInt(uint64_t v);
void laik_log_Space(Laik_Space* spc);
void laik_log_Index(int dims, const Laik_Index* idx);
void laik_log_Range(Laik_Range* range);
void laik_log_Reduction(Laik_ReductionOperation op);
void laik_log_DataFlow(Laik_DataFlow flow);

/* ---- partitioners and partitionings ---- */

typedef double (*Laik_GetIdxWeight_t)(Laik_Index* idx, const void* userData);
typedef double (*Laik_GetTaskWeight_t)(int task, const void* userData);

extern Laik_Partitioner* laik_All;
extern Laik_Partitioner* laik_Master;

Laik_Partitioner* laik_new_all_partitioner(void);
Laik_Partitioner* laik_new_master_partitioner(void);
Laik_Partitioner* laik_new_block_partitioner(int pdim, int cycles,
                                             Laik_GetIdxWeight_t ifunc,
                                             Laik_GetTaskWeight_t tfunc,
                                             const void* userData);
Laik_Partitioner* laik_new_block_partitioner1(void);
Laik_Partitioner* laik_new_block_partitioner_iw1(Laik_GetIdxWeight_t f, const void* userData);
Laik_Partitioner* laik_new_block_partitioner_tw1(Laik_GetTaskWeight_t f, const void* userData);
void laik_set_index_weight(Laik_Partitioner* pr, Laik_GetIdxWeight_t f, const void* userData);
void laik_set_task_weight(Laik_Partitioner* pr, Laik_GetTaskWeight_t f, const void* userData);
void laik_set_cycle_count(Laik_Partitioner* pr, int cycles);
Laik_Partitioner* laik_new_bisection_partitioner(void);
Laik_Partitioner* laik_new_grid_partitioner(int xblocks, int yblocks, int zblocks);
Laik_Partitioner* laik_new_cornerhalo_partitioner(int depth);
Laik_Partitioner* laik_new_halo_partitioner(int depth);
Laik_Partitioner* laik_new_copy_partitioner(int fromDim, int toDim);
Laik_Partitioner* laik_new_reassign_partitioner(Laik_Group* newg,
                                                Laik_GetIdxWeight_t getIdxW,
                                                const void* userData);
void laik_free_partitioner(Laik_Partitioner* pr);
bool laik_index_global2local(Laik_Partitioning* p, Laik_Index* global, Laik_Index* local);

/* application partitioners */
typedef enum _Laik_PartitionerFlag {
    LAIK_PF_None = 0,
    LAIK_PF_GroupByTag = 1,
    LAIK_PF_Compact = 2,
    LAIK_PF_NoFullCoverage = 4,
    LAIK_PF_Merge = 8,
    LAIK_PF_SingleIndex = 16
} Laik_PartitionerFlag;

struct _Laik_PartitionerParams {
    Laik_Space* space;
    Laik_Group* group;
    Laik_Partitioner* partitioner;
    Laik_Partitioning* other;
};

typedef void (*laik_run_partitioner_t)(Laik_RangeReceiver*, Laik_PartitionerParams*);
Laik_Partitioner* laik_new_partitioner(const char* name, laik_run_partitioner_t run,
                                       void* d, Laik_PartitionerFlag flags);
void* laik_partitioner_data(Laik_Partitioner* partitioner);
void laik_append_range(Laik_RangeReceiver* r, int task, const Laik_Range* s,
                       int tag, void* data);
void laik_append_index_1d(Laik_RangeReceiver* r, int task, int64_t idx);

void laik_log_Partitioning(Laik_Partitioning* p);
Laik_Partitioning* laik_new_partitioning(Laik_Partitioner* pr, Laik_Group* g,
                                         Laik_Space* space, Laik_Partitioning* other);
void laik_free_partitioning(Laik_Partitioning* p);
void laik_partitioning_set_name(Laik_Partitioning* p, char* name);
Laik_Group* laik_partitioning_get_group(Laik_Partitioning* p);
Laik_Space* laik_partitioning_get_space(Laik_Partitioning* p);
void laik_partitioning_migrate(Laik_Partitioning* p, Laik_Group* g);
Laik_Partitioning* laik_new_migrated_partitioning(Laik_Partitioning* other, Laik_Group* newg);
int laik_partitioning_rangecount(Laik_Partitioning* p);
bool laik_partitioning_isAll(Laik_Partitioning* p);
int laik_partitioning_isSingle(Laik_Partitioning* p);
bool laik_partitioning_coversSpace(Laik_Partitioning* p);
bool laik_partitioning_isEqual(Laik_Partitioning* p1, Laik_Partitioning* p2);
Laik_TaskRange* laik_partitioning_get_taskrange(Laik_Partitioning* p, int n);
const Laik_Range* laik_taskrange_get_range(Laik_TaskRange* trange);
int laik_taskrange_get_task(Laik_TaskRange* trange);
int laik_taskrange_get_tag(Laik_TaskRange* trange);
int laik_taskrange_get_mapNo(Laik_TaskRange* trange);
void* laik_taskrange_get_data(Laik_TaskRange* trange);
void laik_taskrange_set_data(Laik_TaskRange* trange, void* data);
int laik_my_rangecount(Laik_Partitioning* p);
int laik_my_mapcount(Laik_Partitioning* p);
int laik_my_maprangecount(Laik_Partitioning* p, int mapNo);
Laik_TaskRange* laik_my_maprange(Laik_Partitioning* p, int mapNo, int n);
Laik_TaskRange* laik_my_range(Laik_Partitioning* p, int n);
Laik_TaskRange* laik_my_range_1d(Laik_Partitioning* p, int n, int64_t* from, int64_t* to);
Laik_TaskRange* laik_my_range_2d(Laik_Partitioning* p, int n,
                                 int64_t* x1, int64_t* x2, int64_t* y1, int64_t* y2);
Laik_TaskRange* laik_my_range_3d(Laik_Partitioning* p, int n,
                                 int64_t* x1, int64_t* x2, int64_t* y1, int64_t* y2,
                                 int64_t* z1, int64_t* z2);

/* ---- range lists, range filters, partitionings computed on demand ---- */

Laik_RangeList* laik_rangelist_new(Laik_Space* space, unsigned int max_tid);
void laik_rangelist_free(Laik_RangeList* list);
void laik_rangelist_append(Laik_RangeList* list, int tid, const Laik_Range* range,
                           int tag, void* data);
void laik_rangelist_append_single1d(Laik_RangeList* list, int tid, int64_t idx);
void laik_rangelist_freeze(Laik_RangeList* list, bool doMerge);
void laik_rangelist_migrate(Laik_RangeList* list, int* idmap, unsigned int new_count);
bool laik_rangelist_isAll(Laik_RangeList* list);
int laik_rangelist_isSingle(Laik_RangeList* list);
bool laik_rangelist_isEqual(Laik_RangeList* r1, Laik_RangeList* r2);
bool laik_rangelist_coversSpace(Laik_RangeList* list);
int laik_rangelist_rangecount(Laik_RangeList* list);
int laik_rangelist_tidrangecount(Laik_RangeList* list, int tid);
int laik_rangelist_tidmapcount(Laik_RangeList* list, int tid);
unsigned int laik_rangelist_tidmaprangecount(Laik_RangeList* list, int tid, int mapNo);
Laik_TaskRange* laik_rangelist_taskrange(Laik_RangeList* list, int n);
Laik_TaskRange* laik_rangelist_tidrange(Laik_RangeList* list, int tid, int n);
Laik_TaskRange* laik_rangelist_tidmaprange(Laik_RangeList* list, int tid, int mapNo, int n);

Laik_RangeFilter* laik_rangefilter_new(void);
void laik_rangefilter_free(Laik_RangeFilter* sf);
void laik_rangefilter_set_myfilter(Laik_RangeFilter* sf, Laik_Group* g);
void laik_rangefilter_add_idxfilter(Laik_RangeFilter* sf, Laik_RangeList* list, int tid);
Laik_RangeList* laik_run_partitioner(Laik_PartitionerParams* params, Laik_RangeFilter* filter);

Laik_Partitioning* laik_new_empty_partitioning(Laik_Group* g, Laik_Space* s,
                                               Laik_Partitioner* pr, Laik_Partitioning* other);
Laik_Partitioning* laik_clone_empty_partitioning(Laik_Partitioning* p);
Laik_RangeList* laik_partitioning_allranges(Laik_Partitioning* p);
Laik_RangeList* laik_partitioning_myranges(Laik_Partitioning* p);
Laik_RangeList* laik_partitioning_interranges(Laik_Partitioning* p1, Laik_Partitioning* p2);
void laik_partitioning_store_allranges(Laik_Partitioning* p);
void laik_partitioning_store_myranges(Laik_Partitioning* p);
void laik_partitioning_store_intersectranges(Laik_Partitioning* p, Laik_Partitioning* p2);

/* ---- data containers ---- */

extern Laik_Type* laik_Char;
extern Laik_Type* laik_Int32;
extern Laik_Type* laik_Int64;
extern Laik_Type* laik_UChar;
extern Laik_Type* laik_UInt32;
extern Laik_Type* laik_UInt64;
extern Laik_Type* laik_Float;
extern Laik_Type* laik_Double;

Laik_Type* laik_type_register(const char* name, int size);

typedef void (*laik_init_t)(void* base, int count, Laik_ReductionOperation o);
typedef void (*laik_reduce_t)(void* out, const void* in1, const void* in2, int count,
                              Laik_ReductionOperation o);
void laik_type_set_init(Laik_Type* type, laik_init_t init);
void laik_type_set_reduce(Laik_Type* type, laik_reduce_t reduce);

Laik_Data* laik_new_data(Laik_Space* space, Laik_Type* type);
Laik_Data* laik_new_data_1d(Laik_Instance* inst, Laik_Type* type, int64_t s1);
Laik_Data* laik_new_data_2d(Laik_Instance* inst, Laik_Type* type, int64_t s1, int64_t s2);
void laik_data_set_name(Laik_Data* d, char* name);
Laik_Space* laik_data_get_space(Laik_Data* d);
Laik_Group* laik_data_get_group(Laik_Data* d);
Laik_Instance* laik_data_get_inst(Laik_Data* d);
Laik_Partitioning* laik_data_get_partitioning(Laik_Data* d);
void laik_free(Laik_Data* d);

void laik_switchto_partitioning(Laik_Data* d, Laik_Partitioning* toP,
                                Laik_DataFlow flow, Laik_ReductionOperation redOp);
void laik_switchto_flow(Laik_Data* d, Laik_DataFlow flow, Laik_ReductionOperation redOp);
Laik_Partitioning* laik_switchto_new_partitioning(Laik_Data* d, Laik_Group* g,
                                                  Laik_Partitioner* pr,
                                                  Laik_DataFlow flow,
                                                  Laik_ReductionOperation redOp);
void laik_set_initial_partitioning(Laik_Data* d, Laik_Partitioning* p);
void laik_set_map_memory(Laik_Data* d, int n, void* start, uint64_t size);
void laik_data_provide_memory(Laik_Data* d, void* start, uint64_t size);
Laik_TaskRange* laik_data_range(Laik_Data* d, int n);
void laik_fill_double(Laik_Data* d, double v);

Laik_Mapping* laik_get_map(Laik_Data* d, int n);
Laik_Mapping* laik_get_map_1d(Laik_Data* d, int n, void** base, uint64_t* count);
Laik_Mapping* laik_get_map_2d(Laik_Data* d, int n, void** base,
                              uint64_t* ysize, uint64_t* ystride, uint64_t* xsize);
Laik_Mapping* laik_get_map_3d(Laik_Data* d, int n, void** base,
                              uint64_t* zsize, uint64_t* zstride,
                              uint64_t* ysize, uint64_t* ystride, uint64_t* xsize);
char* laik_get_map_addr(Laik_Data* d, int n, Laik_Index* idx);
Laik_Mapping* laik_global2local_1d(Laik_Data* d, int64_t gidx, uint64_t* lidx);
Laik_Mapping* laik_global2maplocal_1d(Laik_Data* d, int64_t gidx, int* mapNo, uint64_t* lidx);
int64_t laik_local2global_1d(Laik_Data* d, uint64_t off);
int64_t laik_maplocal2global_1d(Laik_Data* d, int mapNo, uint64_t li);
int laik_map_get_mapNo(const Laik_Mapping* map);
Laik_Mapping* laik_global2local_2d(Laik_Data* d, int64_t gx, int64_t gy, int64_t* lx, int64_t* ly);
bool laik_local2global1_2d(Laik_Data* d, int64_t lx, int64_t ly, int64_t* gx, int64_t* gy);

/* ---- reservations, transitions, action sequences ---- */

/* Kinds of the steps of an action sequence (LAIK's action.h, values as LAIK's); ferry's
 * sequences are opaque. */
typedef enum _Laik_ActionType {
    LAIK_AT_Invalid = 0,
    LAIK_AT_Nop,
    LAIK_AT_Transition,
    LAIK_AT_BufReserve,
    LAIK_AT_MapSend, LAIK_AT_BufSend, LAIK_AT_RBufSend,
    LAIK_AT_MapRecv, LAIK_AT_BufRecv, LAIK_AT_RBufRecv,
    LAIK_AT_RBufLocalReduce, LAIK_AT_BufInit,
    LAIK_AT_CopyFromBuf, LAIK_AT_CopyToBuf,
    LAIK_AT_CopyFromRBuf, LAIK_AT_CopyToRBuf,
    LAIK_AT_MapPackAndSend, LAIK_AT_PackAndSend,
    LAIK_AT_MapPackToRBuf, LAIK_AT_PackToRBuf, LAIK_AT_PackToBuf,
    LAIK_AT_MapRecvAndUnpack, LAIK_AT_RecvAndUnpack,
    LAIK_AT_MapUnpackFromRBuf, LAIK_AT_UnpackFromRBuf, LAIK_AT_UnpackFromBuf,
    LAIK_AT_Reduce, LAIK_AT_RBufReduce,
    LAIK_AT_MapGroupReduce, LAIK_AT_GroupReduce, LAIK_AT_RBufGroupReduce,
    LAIK_AT_Copy,
    LAIK_AT_BufCopy, LAIK_AT_RBufCopy,
    LAIK_AT_Backend = 50
} Laik_ActionType;

typedef struct _Laik_Action {
    char type;
    char len;
} Laik_Action;

typedef struct _Laik_TransitionContext Laik_TransitionContext;

Laik_Reservation* laik_reservation_new(Laik_Data* d);
void laik_reservation_add(Laik_Reservation* r, Laik_Partitioning* p);
void laik_reservation_alloc(Laik_Reservation* r);
void laik_reservation_free(Laik_Reservation* r);
void laik_data_use_reservation(Laik_Data* d, Laik_Reservation* r);

Laik_Transition* laik_calc_transition(Laik_Space* space,
                                      Laik_Partitioning* fromP, Laik_Partitioning* toP,
                                      Laik_DataFlow flow, Laik_ReductionOperation redOp);
void laik_free_transition(Laik_Transition* t);
void laik_exec_transition(Laik_Data* d, Laik_Transition* t);
Laik_ActionSeq* laik_calc_actions(Laik_Data* d, Laik_Transition* t,
                                  Laik_Reservation* fromRes, Laik_Reservation* toRes);
void laik_exec_actions(Laik_ActionSeq* as);
Laik_ActionSeq* laik_aseq_new(Laik_Instance* inst);
void laik_aseq_free(Laik_ActionSeq* as);

/* ---- key-value store ---- */

typedef struct _Laik_KVStore Laik_KVStore;
typedef struct _Laik_KVS_Entry Laik_KVS_Entry;

Laik_KVStore* laik_kvs_new(const char* name, Laik_Instance* inst);
void laik_kvs_free(Laik_KVStore* kvs);
Laik_KVS_Entry* laik_kvs_set(Laik_KVStore* kvs, const char* key, unsigned int size, const char* data);
Laik_KVS_Entry* laik_kvs_sets(Laik_KVStore* kvs, const char* key, const char* str);
void laik_kvs_sync(Laik_KVStore* kvs);
bool laik_kvs_remove(Laik_KVStore* kvs, const char* key);
void laik_kvs_clean(Laik_KVStore* kvs);
void laik_kvs_sort(Laik_KVStore* kvs);
unsigned int laik_kvs_copy(Laik_KVS_Entry* e, char* mem, unsigned int size);
unsigned int laik_kvs_count(Laik_KVStore* kvs);
Laik_KVS_Entry* laik_kvs_getn(Laik_KVStore* kvs, unsigned int n);
Laik_KVS_Entry* laik_kvs_entry(Laik_KVStore* kvs, const char* key);
char* laik_kvs_get(Laik_KVStore* kvs, const char* key, unsigned int* size);
char* laik_kvs_key(Laik_KVS_Entry* e);
unsigned int laik_kvs_size(Laik_KVS_Entry* e);
char* laik_kvs_data(Laik_KVS_Entry* e, unsigned int* size);

typedef void (*laik_kvs_created_func)(Laik_KVStore*, Laik_KVS_Entry*);
typedef void (*laik_kvs_changed_func)(Laik_KVStore*, Laik_KVS_Entry*);
typedef void (*laik_kvs_removed_func)(Laik_KVStore*, char*);
void laik_kvs_reg_callbacks(Laik_KVStore* kvs, laik_kvs_created_func fc,
                            laik_kvs_changed_func fu, laik_kvs_removed_func fr);

/* ---- debug printers of internal objects (ferry's descriptions, see docs/C-API.md) ---- */

void laik_log_RangeList(Laik_RangeList* list);
void laik_log_Transition(Laik_Transition* t, bool showActions);
void laik_log_ActionSeq(Laik_ActionSeq* as, bool showDetails);
void laik_log_ActionSeqIfChanged(bool changed, Laik_ActionSeq* as, char* title);
void laik_log_Checksum(char* buf, int count, Laik_Type* t);
void laik_log_SwitchStat(Laik_SwitchStat* ss);
void laik_log_Action(Laik_Action* a, Laik_ActionSeq* as);

/* ---- allocators (recorded per container; see docs/C-API.md) ---- */

typedef enum _Laik_MemoryPolicy {
    LAIK_MP_None = 0,
    LAIK_MP_NewAllocOnRepartition,
    LAIK_MP_NotifyOnChange,
    LAIK_MP_UsePool
} Laik_MemoryPolicy;

typedef void* (*Laik_malloc_t)(Laik_Data*, size_t);
typedef void (*Laik_free_t)(Laik_Data*, void*);
typedef void* (*Laik_realloc_t)(Laik_Data*, void*, size_t);

typedef struct _Laik_Allocator Laik_Allocator;
struct _Laik_Allocator {
    Laik_MemoryPolicy policy;
    Laik_malloc_t malloc;
    Laik_free_t free;
    Laik_realloc_t realloc;
    void (*unmap)(Laik_Data* d, void* ptr, size_t length);
};

Laik_Allocator* laik_new_allocator(Laik_malloc_t m, Laik_free_t f, Laik_realloc_t r);
Laik_Allocator* laik_new_allocator_def(void);
void laik_set_allocator(Laik_Data* d, Laik_Allocator* alloc);
Laik_Allocator* laik_get_allocator(Laik_Data* d);
extern Laik_Allocator* laik_allocator_def;

/* ---- external agents (ext.h): none can be loaded, see docs/C-API.md ---- */

#define MAX_AGENTS 10
#define MAX_UID_LENGTH 64
#define MAX_FAILED_BUFFER 32

typedef struct { char uid[MAX_UID_LENGTH]; } node_uid_t;
typedef struct tag_laik_ext_agent Laik_Agent;
typedef Laik_Agent* (*laik_agent_init)(int, char**);

void laik_ext_load_agent_from_file(Laik_Instance* instance, char* path, int argc, char** argv);
void laik_ext_load_agent_from_function(Laik_Instance* instance, laik_agent_init function,
                                       int argc, char** argv);
void laik_ext_init(Laik_Instance* inst);
void laik_ext_cleanup(Laik_Instance* inst);
void laik_get_failed(Laik_Instance* inst, int* nfailed, int** failed, int max);

/* ---- memory layouts (see docs/C-API.md for the layouts a container can hold) ---- */

typedef int (*laik_layout_section_t)(Laik_Layout*, Laik_Index*);
typedef int (*laik_layout_mapno_t)(Laik_Layout*, int);
typedef int64_t (*laik_layout_offset_t)(Laik_Layout*, int, Laik_Index*);
typedef bool (*laik_layout_reuse_t)(Laik_Layout*, int, Laik_Layout*, int);
typedef char* (*laik_layout_describe_t)(Laik_Layout*);
typedef unsigned int (*laik_layout_pack_t)(Laik_Mapping*, Laik_Range*, Laik_Index*,
                                           char*, unsigned int);
typedef unsigned int (*laik_layout_unpack_t)(Laik_Mapping*, Laik_Range*, Laik_Index*,
                                             char*, unsigned int);
typedef void (*laik_layout_copy_t)(Laik_Range*, Laik_Mapping*, Laik_Mapping*);

struct _Laik_Layout {
    int dims;
    int map_count;
    uint64_t count;
    laik_layout_section_t section;
    laik_layout_mapno_t mapno;
    laik_layout_offset_t offset;
    laik_layout_reuse_t reuse;
    laik_layout_describe_t describe;
    laik_layout_pack_t pack;
    laik_layout_unpack_t unpack;
    laik_layout_copy_t copy;
};

void laik_init_layout(Laik_Layout* l, int dims, int map_count, uint64_t count,
                      laik_layout_section_t section, laik_layout_mapno_t mapno,
                      laik_layout_offset_t offset, laik_layout_reuse_t reuse,
                      laik_layout_describe_t describe, laik_layout_pack_t pack,
                      laik_layout_unpack_t unpack, laik_layout_copy_t copy);
unsigned int laik_layout_pack_gen(Laik_Mapping* m, Laik_Range* range, Laik_Index* idx,
                                  char* buf, unsigned int size);
unsigned int laik_layout_unpack_gen(Laik_Mapping* m, Laik_Range* range, Laik_Index* idx,
                                    char* buf, unsigned int size);
void laik_layout_copy_gen(Laik_Range* range, Laik_Mapping* from, Laik_Mapping* to);
void laik_data_copy(Laik_Range* range, Laik_Mapping* from, Laik_Mapping* to);

typedef Laik_Layout* (*laik_layout_factory_t)(int n, Laik_Range* range);
Laik_Layout* laik_new_layout_lex(int n, Laik_Range* range);
uint64_t laik_layout_lex_stride(Laik_Layout* l, int n, int d);
int64_t laik_offset(Laik_Layout* l, int section, Laik_Index* idx);
void laik_data_set_layout_factory(Laik_Data* d, laik_layout_factory_t factory);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_LAIK_H */
