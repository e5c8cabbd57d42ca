/* tools/idmap.c - pairs of 32-bit numbers to dense ids. */
#include "tools/idmap.h"

uint32_t idmap_get(struct idmap *m, uint32_t a, uint32_t b, uint32_t next)
{
    uint64_t id;

    if (fleetprof_map_intern(&m->ids, fleetprof_map_mix64((uint64_t)a << 32 | b), NULL, NULL, NULL,
                             next, &id) < 0)
        return UINT32_MAX;
    return (uint32_t)id;
}

void idmap_done(struct idmap *m)
{
    fleetprof_map_free(&m->ids);
}
