/* tools/idmap.h - pairs of numbers to dense ids, for the commands that merge stacks by path
 * ((caller, function) -> node): the summary's call tree, pprof's and the folded stacks'
 * canonical stacks. */
#ifndef FLEETPROF_TOOLS_IDMAP_H
#define FLEETPROF_TOOLS_IDMAP_H

#include <stddef.h>
#include <stdint.h>

struct idmap_slot {
    uint64_t a, b;
    uint32_t id1; /* id + 1; 0: empty */
};

/* Open addressing, nslots a power of 2 at most half full. Zero-initialize to start. */
struct idmap {
    struct idmap_slot *slots; /* owned */
    size_t nslots, n;
};

/* The id of (a, b); when new, it gets next (the caller's next dense id). UINT32_MAX: out of
 * memory. */
uint32_t idmap_get(struct idmap *m, uint64_t a, uint64_t b, uint32_t next);
/* Frees the map and empties it, ready for reuse. */
void idmap_done(struct idmap *m);

#endif /* FLEETPROF_TOOLS_IDMAP_H */
