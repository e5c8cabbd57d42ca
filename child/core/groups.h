/* child/core/groups.h - the registry of performance groups: their names, their totals, and
 * whether measuring is on. The measuring itself (events, stopwatches) is the public API's,
 * in child/entry/groups.c; the lifecycle turns it on and off and the profile writer reads
 * the totals from here. */
#ifndef FLEETPROF_CHILD_CORE_GROUPS_H
#define FLEETPROF_CHILD_CORE_GROUPS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "child/include/fleetprof.h"
#include "profile/groups.h"

#define RT_GROUPS_MAX 4096

struct fleetprof_group {
    struct fleetprof__group_head head; /* first: the header's inline functions read it */
    uint32_t index;
    char *name;
    _Atomic int counter_id; /* its counter track, -1 until made (needs a running profiler) */
    _Atomic uint64_t cpu_ns, cycles, activations, events, worst_event_ns, slow_events;
    _Atomic uint64_t discarded, migrated, stale;
    _Atomic uint64_t durations[PROF_GROUP_BUCKETS];
};

/* Indexed by fleetprof_group.index; entries below the count never change once published. */
extern struct fleetprof_group *rt_groups__all[RT_GROUPS_MAX];
extern int rt_groups__on;

static inline struct fleetprof_group *rt_group_at(uint32_t index)
{
    return rt_groups__all[index];
}

/* Whether measuring is on (events and stopwatches count). */
static inline bool rt_groups_on(void)
{
    return __atomic_load_n(&rt_groups__on, __ATOMIC_RELAXED);
}

/* The group of that name (len bytes, already validated), made on first use; NULL when
 * RT_GROUPS_MAX are made or memory is short. */
struct fleetprof_group *rt_groups_get(const char *name, size_t len);
/* Measuring on (with this slow-event threshold) or off; groups persist either way. */
void rt_groups_start(uint64_t slow_event_ns);
void rt_groups_stop(void);
/* An event charged its groups: the totals changed. */
void rt_groups_changed(void);
/* Changes whenever a group's totals change (0 until the first change, and after a fork). */
uint64_t rt_groups_generation(void);
/* The threshold of a slow event (FLEETPROF_SLOW_EVENT_MS), in CPU ns. */
uint64_t rt_groups_slow_event_ns(void);
void rt_groups_read_totals(const struct fleetprof_group *g, struct prof_group_totals *o);
/* Totals of every group measured so far (names borrowed, valid for the process's life);
 * *ret is malloc()ed, NULL when there are none. Returns the count. Any thread. */
size_t rt_groups_snapshot(struct prof_group_totals **ret);

#endif /* FLEETPROF_CHILD_CORE_GROUPS_H */
