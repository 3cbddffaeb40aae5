/*
 * laik-internal.h: the parts of LAIK's internal interface that LAIK's test programs use
 * (the space store and the readable fields of a space), over ferry. Only the fields below
 * are part of this interface; a space has more state after them.
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

void laik_spacestore_set(Laik_Space* s);
Laik_Space* laik_spacestore_get(Laik_Instance* i, char* name);
void laik_sync_spaces(Laik_Instance* i);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_LAIK_INTERNAL_H */
