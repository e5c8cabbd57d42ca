/* tools/idmap.h - pairs of 32-bit numbers to dense ids, for the commands that merge stacks by
 * path ((caller, function) -> node): the summary's call tree, pprof's and the folded stacks'
 * canonical stacks. */
#ifndef FLEETPROF_TOOLS_IDMAP_H
#define FLEETPROF_TOOLS_IDMAP_H

#include <stdint.h>

#include "common/map.h"

/* A pair is one 64-bit key, which fleetprof_map_mix64() hashes one to one: the map keeps no
 * copy of the keys and never compares them. Zero-initialize to start. */
struct idmap {
    struct fleetprof_map ids;
};

/* The id of (a, b); when new, it gets next (the caller's next dense id). UINT32_MAX: out of
 * memory (nothing added). */
uint32_t idmap_get(struct idmap *m, uint32_t a, uint32_t b, uint32_t next);
/* Frees the map and empties it, ready for reuse. */
void idmap_done(struct idmap *m);

#endif /* FLEETPROF_TOOLS_IDMAP_H */
