/* child/core/groups.c - the registry of performance groups (child/core/groups.h): names to
 * groups, their totals for the profile, measuring on or off. Events and stopwatches, which
 * add to the totals, are the public API's (child/entry/groups.c, docs/groups.md). */
#include "child/core/groups.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "child/core/core.h"
#include "common/hash.h"
#include "common/map.h"

struct fleetprof_group *rt_groups__all[RT_GROUPS_MAX];
int rt_groups__on;

static pthread_mutex_t grp_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fleetprof_map grp_by_name; /* name -> index in rt_groups__all */
static _Atomic uint32_t grp_count;
static _Atomic uint64_t grp_generation; /* bumped whenever a total changes */
static _Atomic uint64_t grp_slow_event_ns = 16 * 1000 * 1000;
static pthread_once_t rt_groups__once = PTHREAD_ONCE_INIT;

static bool same_name(const void *ctx, const void *key, uint64_t index)
{
    (void)ctx;
    return strcmp(rt_groups__all[index]->name, key) == 0;
}

/* In a forked child: the totals are the parent's, counted there. */
static void after_fork_child(void)
{
    (void)pthread_mutex_init(&grp_lock, NULL);
    for (uint32_t i = 0; i < atomic_load(&grp_count); i++) {
        struct fleetprof_group *g = rt_groups__all[i];

        atomic_store(&g->cpu_ns, 0);
        atomic_store(&g->cycles, 0);
        atomic_store(&g->activations, 0);
        atomic_store(&g->events, 0);
        atomic_store(&g->worst_event_ns, 0);
        atomic_store(&g->slow_events, 0);
        atomic_store(&g->discarded, 0);
        atomic_store(&g->migrated, 0);
        atomic_store(&g->stale, 0);
        for (unsigned b = 0; b < PROF_GROUP_BUCKETS; b++)
            atomic_store(&g->durations[b], 0);
    }
    atomic_store(&grp_generation, 0);
}

static void init_once(void)
{
    (void)pthread_atfork(NULL, NULL, after_fork_child);
}

struct fleetprof_group *rt_groups_get(const char *name, size_t len)
{
    struct fleetprof_group *g = NULL;
    uint64_t h, index;
    uint32_t count;

    (void)pthread_once(&rt_groups__once, init_once);
    h = fleetprof_fnv1a64(name, len, FLEETPROF_FNV64_SEED);
    (void)pthread_mutex_lock(&grp_lock);
    if (fleetprof_map_find(&grp_by_name, h, same_name, NULL, name, &index)) {
        g = rt_groups__all[index];
        goto out;
    }
    count = atomic_load_explicit(&grp_count, memory_order_relaxed);
    if (count == RT_GROUPS_MAX || fleetprof_map_reserve(&grp_by_name, 1) < 0)
        goto out;
    g = calloc(1, sizeof(*g));
    if (g)
        g->name = strndup(name, len);
    if (!g || !g->name) {
        free(g);
        g = NULL;
        goto out;
    }
    g->index = count;
    g->head.on = rt_groups__on;
    atomic_init(&g->counter_id, -1);
    rt_groups__all[count] = g;
    (void)fleetprof_map_set(&grp_by_name, h, same_name, NULL, name, count); /* reserved */
    /* Published last: snapshots read groups below grp_count without the lock. */
    atomic_store_explicit(&grp_count, count + 1, memory_order_release);
out:
    (void)pthread_mutex_unlock(&grp_lock);
    return g;
}

static void set_on(int on)
{
    (void)pthread_mutex_lock(&grp_lock);
    rt_groups__on = on;
    for (uint32_t i = 0; i < atomic_load_explicit(&grp_count, memory_order_relaxed); i++)
        __atomic_store_n(&rt_groups__all[i]->head.on, on, __ATOMIC_RELAXED);
    (void)pthread_mutex_unlock(&grp_lock);
}

void rt_groups_start(uint64_t slow_event_ns)
{
    (void)pthread_once(&rt_groups__once, init_once);
    atomic_store(&grp_slow_event_ns, slow_event_ns);
    set_on(1);
}

void rt_groups_stop(void)
{
    set_on(0);
}

void rt_groups_changed(void)
{
    atomic_fetch_add_explicit(&grp_generation, 1, memory_order_release);
}

uint64_t rt_groups_slow_event_ns(void)
{
    return atomic_load_explicit(&grp_slow_event_ns, memory_order_relaxed);
}

uint64_t rt_groups_generation(void)
{
    return atomic_load_explicit(&grp_generation, memory_order_acquire);
}

void rt_groups_read_totals(const struct fleetprof_group *g, struct prof_group_totals *o)
{
    o->name = g->name; /* never freed */
    o->cpu_ns = atomic_load_explicit(&g->cpu_ns, memory_order_relaxed);
    o->cycles = atomic_load_explicit(&g->cycles, memory_order_relaxed);
    o->activations = atomic_load_explicit(&g->activations, memory_order_relaxed);
    o->events = atomic_load_explicit(&g->events, memory_order_relaxed);
    o->worst_event_ns = atomic_load_explicit(&g->worst_event_ns, memory_order_relaxed);
    o->slow_events = atomic_load_explicit(&g->slow_events, memory_order_relaxed);
    o->discarded = atomic_load_explicit(&g->discarded, memory_order_relaxed);
    o->migrated = atomic_load_explicit(&g->migrated, memory_order_relaxed);
    o->stale = atomic_load_explicit(&g->stale, memory_order_relaxed);
    for (unsigned b = 0; b < PROF_GROUP_BUCKETS; b++)
        o->durations[b] = atomic_load_explicit(&g->durations[b], memory_order_relaxed);
}

size_t rt_groups_snapshot(struct prof_group_totals **ret)
{
    uint32_t count = atomic_load_explicit(&grp_count, memory_order_acquire);
    struct prof_group_totals *out;
    size_t n = 0;

    *ret = NULL;
    if (count == 0)
        return 0;
    out = calloc(count, sizeof(*out));
    if (!out)
        return 0;
    for (uint32_t i = 0; i < count; i++) {
        const struct fleetprof_group *g = rt_groups__all[i];
        struct prof_group_totals *o = &out[n];

        rt_groups_read_totals(g, o);
        if (o->activations == 0 && o->discarded == 0 && o->migrated == 0 && o->stale == 0)
            continue; /* looked up, never measured */
        n++;
    }
    if (n == 0) {
        free(out);
        return 0;
    }
    *ret = out;
    return n;
}
