/* child/entry/groups.c - the performance groups API: events and cycle-counter stopwatches.
 *
 * The Firefox Performance Stats monitor's design (docs/groups.md): a stopwatch reads the
 * CPU's time-stamp counter and the CPU it runs on (rseq's cpu_id, or RDTSCP's aux) at start
 * and stop, and charges its cycles to the current event only when both ran on the same CPU.
 * Each event reads the thread's CPU time twice, at its begin and end; at the end each group
 * that ran is charged the event's CPU time x (group cycles / event cycles), a share outside
 * 0..100 % being discarded.
 *
 * Everything of one event is per thread (struct grp_thread, reached through one TLS
 * pointer): the hot path takes no lock and writes no shared memory. Totals per group are
 * atomics, added to once per event and group. A stopwatch remembers the thread's iteration
 * number; events bump it at begin and end, so a stopwatch that outlives its event (a nested
 * event loop began) is recognised as stale when it stops, with no list to walk.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif
#if __has_include(<sys/rseq.h>)
#include <sys/rseq.h>
#define GRP_HAVE_RSEQ 1
#endif

#include "child/core/core.h"
#include "child/core/groups.h"
#include "child/include/fleetprof.h"
#include "child/lifecycle/lifecycle.h"
#include "common/grow.h"
#include "profile/groups.h"

/* One group's part of the thread's current event. */
struct grp_slot {
    /* The group's running stopwatch, if any: started in running_iteration (0: none), at
     * start_cycles (which also tells it from a stale stopwatch of the group), on cpu. Kept
     * here, not in the caller's fleetprof_stopwatch, so that one fits in two registers. */
    uint64_t running_iteration;
    uint64_t start_cycles;
    uint32_t start_cpu;
    bool implicit;              /* its span is the event */
    uint64_t touched_iteration; /* the fields below are of this iteration */
    uint64_t cycles;
    uint32_t measured; /* stopwatches whose cycles count */
    uint32_t activations, migrated, backwards;
};

struct grp_thread {
    uint64_t iteration;
    uint32_t depth; /* fleetprof_event_begin calls not yet ended */
    bool open;      /* an event is being measured */
    bool rseq;      /* the CPU number comes from glibc's rseq area */
    uint64_t event_cpu_ns, event_wall_ns, event_cycles;
    uint32_t capacity; /* slots[] and touched[] entries */
    uint32_t touched_count;
    uint32_t *touched; /* indexes of the groups measured in this event */
    struct grp_slot *slots;
};

static pthread_mutex_t api_lock = PTHREAD_MUTEX_INITIALIZER; /* a group's counter, the schema */
static _Atomic int grp_slow_schema; /* marker schema id of slow events, 0 = not made */
static pthread_once_t api_once = PTHREAD_ONCE_INIT;
static pthread_key_t grp_key;
static bool grp_key_made;

static __thread struct grp_thread *grp_self __attribute__((tls_model("initial-exec")));

/* ---- clocks ------------------------------------------------------------------------ */

static inline uint64_t read_cycles(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __rdtsc();
#elif defined(__aarch64__)
    uint64_t v;

    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
    return v;
#else
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

#ifdef GRP_HAVE_RSEQ
static inline int32_t rseq_cpu(void)
{
    const volatile struct rseq *r =
            (const volatile struct rseq *)((char *)__builtin_thread_pointer() + __rseq_offset);

    return (int32_t)r->cpu_id;
}
#endif

/* The counter and the CPU it was read on, without a system call: rseq's cpu_id (a load)
 * and RDTSC (12 ns here), else RDTSCP, which gives both (24 ns). */
static inline uint64_t read_cycles_cpu(const struct grp_thread *t, uint32_t *ret_cpu)
{
#ifdef GRP_HAVE_RSEQ
    if (__builtin_expect(t->rseq, 1)) {
        *ret_cpu = (uint32_t)rseq_cpu();
        return read_cycles();
    }
#endif
#if defined(__x86_64__) || defined(__i386__)
    unsigned aux;
    uint64_t v = __rdtscp(&aux);

    (void)t;
    *ret_cpu = aux & 0xfffu; /* Linux puts the CPU number in the low 12 bits */
    return v;
#else
    int cpu = sched_getcpu();

    (void)t;
    *ret_cpu = cpu < 0 ? 0 : (uint32_t)cpu;
    return read_cycles();
#endif
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- groups ------------------------------------------------------------------------- */

static void free_thread(void *p)
{
    struct grp_thread *t = p;

    if (!t)
        return;
    free(t->touched);
    free(t->slots);
    free(t);
    if (grp_self == t)
        grp_self = NULL;
}

/* In a forked child: the one thread left may be inside an event whose start was read in
 * the parent. */
static void after_fork_child(void)
{
    struct grp_thread *t = grp_self;

    (void)pthread_mutex_init(&api_lock, NULL);
    if (t) {
        t->iteration++; /* stopwatches running across fork(): dropped when they stop */
        t->open = false;
        t->depth = 0;
        t->touched_count = 0;
    }
}

static void api_init(void)
{
    grp_key_made = pthread_key_create(&grp_key, free_thread) == 0;
    (void)pthread_atfork(NULL, NULL, after_fork_child);
}

FLEETPROF_EXPORT fleetprof_group *fleetprof_group_get(const char *name)
{
    size_t len;

    if (!name)
        return NULL;
    len = strnlen(name, PROF_GROUP_NAME_MAX + 1);
    if (!prof_group_name_valid(name, len))
        return NULL;
    return rt_groups_get(name, len);
}

FLEETPROF_EXPORT int fleetprof_group_stats(const fleetprof_group *g,
                                           struct fleetprof_group_stats *ret)
{
    struct prof_group_totals t;

    if (!g || !ret)
        return -EINVAL;
    rt_groups_read_totals(g, &t);
    *ret = (struct fleetprof_group_stats){
            .cpu_ns = t.cpu_ns,
            .cycles = t.cycles,
            .activations = t.activations,
            .events = t.events,
            .worst_event_ns = t.worst_event_ns,
            .slow_events = t.slow_events,
            .discarded = t.discarded,
            .migrated = t.migrated,
            .stale = t.stale,
    };
    _Static_assert(FLEETPROF_GROUP_BUCKETS == PROF_GROUP_BUCKETS, "one histogram layout");
    memcpy(ret->durations, t.durations, sizeof(ret->durations));
    return 0;
}

/* ---- per-thread state ----------------------------------------------------------------- */

static bool rseq_usable(void)
{
#ifdef GRP_HAVE_RSEQ
    /* glibc registered the area (not disabled by glibc.pthread.rseq=0, kernel >= 4.18). */
    return __rseq_size > 0 && rseq_cpu() >= 0;
#else
    return false;
#endif
}

/* The calling thread's state with room for group index, made or grown on first need. */
static struct grp_thread *thread_state(uint32_t index)
{
    struct grp_thread *t = grp_self;
    size_t capacity;

    if (t && index < t->capacity)
        return t;
    if (!t) {
        t = calloc(1, sizeof(*t));
        if (!t)
            return NULL;
        t->iteration = 1;
        t->rseq = rseq_usable();
        (void)pthread_once(&api_once, api_init);
        if (grp_key_made)
            (void)pthread_setspecific(grp_key, t);
        grp_self = t;
    }
    capacity = fleetprof_grown_capacity(t->capacity, (size_t)index + 1, sizeof(*t->slots));
    if (capacity > RT_GROUPS_MAX)
        capacity = RT_GROUPS_MAX;
    if (capacity > t->capacity) {
        if (FLEETPROF_RESIZE(t->slots, capacity) < 0)
            return NULL;
        memset(t->slots + t->capacity, 0, (capacity - t->capacity) * sizeof(*t->slots));
        if (FLEETPROF_RESIZE(t->touched, capacity) < 0)
            return NULL;
        t->capacity = (uint32_t)capacity;
    }
    return index < t->capacity ? t : NULL;
}

static void open_event(struct grp_thread *t)
{
    t->iteration++;
    t->open = true;
    t->touched_count = 0;
    t->event_wall_ns = rt_now_ns();
    t->event_cpu_ns = thread_cpu_ns();
    t->event_cycles = read_cycles();
}

static void atomic_max(_Atomic uint64_t *a, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);

    while (cur < v && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed,
                                                             memory_order_relaxed)) {
    }
}

static void add(_Atomic uint64_t *a, uint64_t v)
{
    if (v)
        atomic_fetch_add_explicit(a, v, memory_order_relaxed);
}

static int slow_event_schema(void)
{
    static const struct fleetprof_field_schema fields[] = {
            {"group", "Group", "string", FLEETPROF_FIELD_STRING},
            {"cpu", "Group CPU", "duration", FLEETPROF_FIELD_DOUBLE},
            {"eventCpu", "Event CPU", "duration", FLEETPROF_FIELD_DOUBLE},
            {"share", "Share of the event", "percentage", FLEETPROF_FIELD_DOUBLE},
    };
    int id = atomic_load(&grp_slow_schema);

    if (id > 0)
        return id;
    (void)pthread_mutex_lock(&api_lock);
    id = atomic_load(&grp_slow_schema);
    if (id <= 0) {
        id = fleetprof_marker_schema("GroupSlowEvent",
                                     "{marker.data.group}: {marker.data.cpu} of CPU", fields,
                                     sizeof(fields) / sizeof(fields[0]));
        if (id > 0)
            atomic_store(&grp_slow_schema, id);
    }
    (void)pthread_mutex_unlock(&api_lock);
    return id;
}

/* A marker on the calling thread for an event that charged group at least the threshold. */
static void mark_slow_event(const struct fleetprof_group *g, uint64_t charged_ns,
                            uint64_t event_cpu_ns, uint64_t start_ns, uint64_t end_ns)
{
    struct fleetprof_field_value values[4];
    int schema = slow_event_schema();

    if (schema <= 0)
        return;
    values[0].kind = FLEETPROF_FIELD_STRING;
    values[0].v.s = g->name;
    values[1].kind = FLEETPROF_FIELD_DOUBLE;
    values[1].v.d = (double)charged_ns / 1e6;
    values[2].kind = FLEETPROF_FIELD_DOUBLE;
    values[2].v.d = (double)event_cpu_ns / 1e6;
    values[3].kind = FLEETPROF_FIELD_DOUBLE;
    values[3].v.d = event_cpu_ns ? (double)charged_ns / (double)event_cpu_ns : 0.0;
    fleetprof_marker_typed(schema, g->name, FLEETPROF_CATEGORY_APP, start_ns,
                           end_ns > start_ns ? end_ns : start_ns + 1, values, 4);
}

/* The group's counter track: charged CPU ns, sampled by the sampler like a user counter. */
static int group_counter(struct fleetprof_group *g)
{
    int id = atomic_load_explicit(&g->counter_id, memory_order_acquire);
    char description[PROF_GROUP_NAME_MAX + 64];

    if (id >= 0 || !rt_running())
        return id;
    (void)snprintf(description, sizeof(description),
                   "CPU time charged to performance group %s (ns per sample)", g->name);
    (void)pthread_mutex_lock(&api_lock);
    id = atomic_load(&g->counter_id);
    if (id < 0) {
        /* The front-end draws a "CPU" counter named "processCPU" as the process's CPU
         * percentage: a group of that name gets another category, hence a plain graph. */
        id = fleetprof_counter_create(g->name, strcmp(g->name, "processCPU") ? "CPU" : "Group CPU",
                                      description);
        /* Out of counters (or not running): tried once per group, not on every event. */
        atomic_store_explicit(&g->counter_id, id >= 0 ? id : INT32_MAX, memory_order_release);
    }
    (void)pthread_mutex_unlock(&api_lock);
    return id;
}

/* Ends the open event: each group measured in it gets its share of the event's CPU time. */
static void commit_event(struct grp_thread *t)
{
    uint64_t cpu_now = thread_cpu_ns();
    uint64_t cycles_now = read_cycles();
    uint64_t wall_now = rt_now_ns();
    uint64_t event_cpu = cpu_now > t->event_cpu_ns ? cpu_now - t->event_cpu_ns : 0;
    uint64_t slow_ns = rt_groups_slow_event_ns();

    for (uint32_t i = 0; i < t->touched_count; i++) {
        uint32_t index = t->touched[i];
        struct fleetprof_group *g = rt_group_at(index);
        const struct grp_slot *s = &t->slots[index];
        uint64_t charged;
        int counter;

        add(&g->activations, s->activations);
        add(&g->migrated, s->migrated);
        add(&g->discarded, s->backwards);
        if (s->measured == 0)
            continue;
        if (prof_group_charge(event_cpu, t->event_cycles, cycles_now, s->cycles, &charged) < 0) {
            add(&g->discarded, 1); /* share outside 0..100 % */
            continue;
        }
        add(&g->cpu_ns, charged);
        add(&g->cycles, s->cycles);
        add(&g->events, 1);
        add(&g->durations[prof_group_bucket(charged)], 1);
        atomic_max(&g->worst_event_ns, charged);
        if (charged >= slow_ns) {
            add(&g->slow_events, 1);
            mark_slow_event(g, charged, event_cpu, t->event_wall_ns, wall_now);
        }
        counter = group_counter(g);
        if (counter > 0 && counter != INT32_MAX)
            fleetprof_counter_add(counter, (int64_t)charged);
    }
    t->touched_count = 0;
    t->open = false;
    t->iteration++; /* a stopwatch still running is of an ended event: stale */
    rt_groups_changed();
}

/* ---- API ----------------------------------------------------------------------------- */

FLEETPROF_EXPORT void fleetprof_event_begin(void)
{
    struct grp_thread *t;

    if (!rt_groups_on())
        return;
    t = thread_state(0);
    if (!t)
        return;
    if (t->open) /* a nested event loop: the outer event ends here */
        commit_event(t);
    t->depth++;
    open_event(t);
}

FLEETPROF_EXPORT void fleetprof_event_end(void)
{
    struct grp_thread *t = grp_self;

    if (!t || t->depth == 0)
        return;
    t->depth--;
    /* After a nested loop's end the outer event is already over: nothing is open. */
    if (t->open)
        commit_event(t);
}

static inline fleetprof_stopwatch start_measure(struct grp_thread *t, fleetprof_group *g,
                                                bool implicit)
{
    fleetprof_stopwatch sw = {NULL, 0};
    struct grp_slot *s = &t->slots[g->index];

    if (s->running_iteration == t->iteration)
        return sw; /* the group already runs in this event (A calls B calls A) */
    s->running_iteration = t->iteration;
    s->implicit = implicit;
    s->start_cycles = read_cycles_cpu(t, &s->start_cpu);
    sw.group = g;
    sw.start_cycles = s->start_cycles;
    return sw;
}

/* Out of line, so that the common case (an event open, the thread's state made) needs no
 * stack frame: the thread's first stopwatch, a new group, or an implicit event. */
static __attribute__((noinline, cold)) fleetprof_stopwatch start_slow(fleetprof_group *g)
{
    fleetprof_stopwatch none = {NULL, 0};
    struct grp_thread *t = thread_state(g->index);
    bool implicit = false;

    if (!t)
        return none;
    if (!t->open) {
        open_event(t); /* an implicit event: the stopwatch's own span */
        implicit = true;
    }
    return start_measure(t, g, implicit);
}

FLEETPROF_EXPORT fleetprof_stopwatch fleetprof__stopwatch_start(fleetprof_group *g)
{
    struct grp_thread *t = grp_self;

    if (__builtin_expect(!t || g->index >= t->capacity || !t->open, 0))
        return start_slow(g);
    return start_measure(t, g, false);
}

static __attribute__((noinline, cold)) void stop_stale(fleetprof_group *g)
{
    add(&g->stale, 1);
    rt_groups_changed();
}

FLEETPROF_EXPORT void fleetprof__stopwatch_stop(fleetprof_group *g, uint64_t start_cycles)
{
    struct grp_thread *t = grp_self;
    struct grp_slot *s;
    uint32_t cpu;
    uint64_t end;

    if (!t || g->index >= t->capacity)
        return;
    end = read_cycles_cpu(t, &cpu);
    s = &t->slots[g->index];
    if (s->running_iteration != t->iteration || s->start_cycles != start_cycles) {
        stop_stale(g); /* its event ended meanwhile (a nested event loop began, or a fork) */
        return;
    }
    s->running_iteration = 0;
    if (s->touched_iteration != t->iteration) {
        s->touched_iteration = t->iteration;
        s->cycles = 0;
        s->measured = s->activations = s->migrated = s->backwards = 0;
        t->touched[t->touched_count++] = g->index;
    }
    s->activations++;
    if (cpu != s->start_cpu)
        s->migrated++; /* the two counters may not be in step */
    else if (end < start_cycles)
        s->backwards++;
    else {
        s->cycles += end - start_cycles;
        s->measured++;
    }
    if (s->implicit)
        commit_event(t);
}
