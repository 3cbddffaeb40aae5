/*
 * laik-internal.h: the parts of LAIK's internal interface that LAIK's test programs use
 * (the space store, the readable fields of a space and of a group, the exchange of location
 * strings), over ferry. Only the fields below are part of this interface; spaces and groups
 * have more state after them, and the fields are read-only.
 */
#ifndef FERRY_LAIK_INTERNAL_H
#define FERRY_LAIK_INTERNAL_H

#include "laik.h"

#ifdef __cplusplus
extern "C" {
#endif

struct _Laik_Space {
    char* name;
    int id;
    int dims;
    union {
        Laik_Range range;
        Laik_Range s;
    };
    Laik_KVStore* kvs;
    Laik_Instance* inst;
    Laik_Space* nextSpaceForInstance;
};

struct _Laik_Group {
    Laik_Instance* inst;
    int gid;
    int size;
    int myid;
};

/* Switch statistics (fields as in LAIK's data-internal.h): made and summed by the program,
 * printed by laik_log_SwitchStat. */
struct _Laik_SwitchStat {
    int switches, switches_noactions;
    int mallocCount, freeCount;
    uint64_t mallocedBytes, freedBytes, initedBytes, copiedBytes;
    uint64_t currAllocedBytes, maxAllocedBytes;
    int transitionCount;
    unsigned int msgSendCount, msgRecvCount, msgReduceCount;
    unsigned int msgAsyncSendCount, msgAsyncRecvCount;
    uint64_t elemSendCount, elemRecvCount, elemReduceCount;
    uint64_t byteSendCount, byteRecvCount, byteReduceCount;
    uint64_t initOpCount, reduceOpCount, byteBufCopyCount;
};

Laik_SwitchStat* laik_newSwitchStat(void);
void laik_addSwitchStat(Laik_SwitchStat* target, Laik_SwitchStat* src);

/* The name of an action type (static storage). */
char* laik_at_str(Laik_ActionType t);

void laik_sync_location(Laik_Instance* inst);
void laik_location_synchronize_data(Laik_Instance* inst, Laik_Group* g);

void laik_spacestore_set(Laik_Space* s);
Laik_Space* laik_spacestore_get(Laik_Instance* i, char* name);
void laik_sync_spaces(Laik_Instance* i);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_LAIK_INTERNAL_H */
