/* fleetprof.h - the API of libfleetprof, the runtime inside every profiled process.
 *
 * Link with -lfleetprof, or LD_PRELOAD libfleetprof.so with FLEETPROF_STARTUP=1 to profile
 * a program without changing it. Every function is safe to call at any time, from any
 * thread, whether or not the profiler runs (then it is a cheap no-op), and never aborts or
 * prints (except one line on stderr for a bad FLEETPROF_* setting). Plain C99; usable from
 * C++.
 *
 * Settings (environment, read by fleetprof_init):
 *   FLEETPROF_STARTUP=1        start from the library constructor
 *   FLEETPROF_INTERVAL_MS=1    sampling interval (0.05 .. 1000)
 *   FLEETPROF_BUFFER_MB=64     per-process buffer limit
 *   FLEETPROF_CHUNK_KB=256     buffer chunk size (64 .. 1048576; the unit of eviction)
 *   FLEETPROF_SOCKET=PATH      join the fleetprofd listening there
 *   FLEETPROF_STACKWALK=dwarf  fp | dwarf | copy
 *   FLEETPROF_OUTPUT=FILE      write this process's profile there at exit (%p = pid)
 *   FLEETPROF_DEBUG=1          diagnostics on stderr
 *   FLEETPROF_SLOW_EVENT_MS=16 performance groups: an event that charges a group this much
 *                              CPU time is a slow event (0.001 .. 60000)
 */
#ifndef FLEETPROF_H
#define FLEETPROF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLEETPROF_EXPORT __attribute__((visibility("default")))

/* Categories of labels and markers (colours in the Firefox Profiler). */
enum fleetprof_category {
    FLEETPROF_CATEGORY_OTHER = 0,
    FLEETPROF_CATEGORY_IDLE = 1,
    FLEETPROF_CATEGORY_NATIVE = 2,
    FLEETPROF_CATEGORY_IO = 3,
    FLEETPROF_CATEGORY_NETWORK = 4,
    FLEETPROF_CATEGORY_MEMORY = 5,
    FLEETPROF_CATEGORY_LOCK = 6,
    FLEETPROF_CATEGORY_APP = 7,
};

/* Starts profiling with the environment's settings; registers the calling thread as the
 * main thread. Returns 0 (also when already running) or a negative errno. */
FLEETPROF_EXPORT int fleetprof_init(void);
/* Stops profiling, writes FLEETPROF_OUTPUT if set, frees everything. */
FLEETPROF_EXPORT void fleetprof_shutdown(void);
/* 1 while the profiler is running and not paused, else 0. */
FLEETPROF_EXPORT int fleetprof_is_active(void);
/* Pausing stops sampling (recorded as a paused range); markers are still recorded. */
FLEETPROF_EXPORT void fleetprof_pause(void);
FLEETPROF_EXPORT void fleetprof_resume(void);
/* Writes this process's profile now to path (NULL: FLEETPROF_OUTPUT). 0 or -errno. */
FLEETPROF_EXPORT int fleetprof_write_profile(const char *path);

/* Registers the calling thread for sampling under name (NULL: its current name).
 * Threads made by pthread_create register themselves when the library is preloaded. */
FLEETPROF_EXPORT int fleetprof_register_thread(const char *name);
FLEETPROF_EXPORT void fleetprof_unregister_thread(void);

/* Current time on the profiler's clock (CLOCK_MONOTONIC ns). */
FLEETPROF_EXPORT uint64_t fleetprof_now_ns(void);

/* Labels: pseudo-frames pushed on the current thread's label stack, shown in the call tree
 * among the native frames. name must be a string that outlives the label (a literal). */
FLEETPROF_EXPORT void *fleetprof_label_push(const char *name, enum fleetprof_category category);
FLEETPROF_EXPORT void fleetprof_label_pop(void *token);
static inline void fleetprof__label_cleanup(void **token)
{
    fleetprof_label_pop(*token);
}
#define FLEETPROF__CAT2(a, b) a##b
#define FLEETPROF__CAT(a, b)  FLEETPROF__CAT2(a, b)
/* Pushes a label for the rest of the enclosing scope. */
#define FLEETPROF_LABEL(name, category)                                  \
    void *FLEETPROF__CAT(fleetprof_label_, __LINE__)                     \
            __attribute__((cleanup(fleetprof__label_cleanup), unused)) = \
                    fleetprof_label_push((name), (category))

/* Markers. Times are fleetprof_now_ns() values; text may be NULL. */
FLEETPROF_EXPORT void fleetprof_marker(const char *name, enum fleetprof_category category,
                                       const char *text);
FLEETPROF_EXPORT void fleetprof_marker_interval(const char *name, enum fleetprof_category category,
                                                uint64_t start_ns, uint64_t end_ns,
                                                const char *text);
FLEETPROF_EXPORT void fleetprof_marker_start(const char *name, enum fleetprof_category category);
FLEETPROF_EXPORT void fleetprof_marker_end(const char *name, enum fleetprof_category category);
/* Like fleetprof_marker, with the calling thread's stack attached (a "cause" in the UI). */
FLEETPROF_EXPORT void
fleetprof_marker_with_stack(const char *name, enum fleetprof_category category, const char *text);

/* Typed markers: declare a schema once, then record markers carrying its fields. */
enum fleetprof_field_kind {
    FLEETPROF_FIELD_INT = 1,
    FLEETPROF_FIELD_UINT = 2,
    FLEETPROF_FIELD_DOUBLE = 3,
    FLEETPROF_FIELD_STRING = 4,
};
struct fleetprof_field_schema {
    const char *key;    /* name in the marker's data */
    const char *label;  /* column title; NULL = key */
    const char *format; /* Firefox Profiler format: "string", "integer", "bytes", ... */
    enum fleetprof_field_kind kind;
};
struct fleetprof_field_value {
    enum fleetprof_field_kind kind;
    union {
        int64_t i;
        uint64_t u;
        double d;
        const char *s;
    } v;
};
/* Returns a schema id (> 0) or a negative errno. Labels are templates such as
 * "{marker.data.key}"; any may be NULL. Up to 16 fields. */
FLEETPROF_EXPORT int fleetprof_marker_schema(const char *name, const char *table_label,
                                             const struct fleetprof_field_schema *fields,
                                             size_t field_count);
/* end_ns = 0 records an instant marker. */
FLEETPROF_EXPORT void fleetprof_marker_typed(int schema_id, const char *name,
                                             enum fleetprof_category category, uint64_t start_ns,
                                             uint64_t end_ns,
                                             const struct fleetprof_field_value *values,
                                             size_t value_count);

/* Counters: a value sampled by the profiler (as a delta per sample). category is a
 * Firefox Profiler counter category such as "Memory" or "Bandwidth". Returns an id (>= 0)
 * or a negative errno; fleetprof_counter_add is lock-free. */
FLEETPROF_EXPORT int fleetprof_counter_create(const char *name, const char *category,
                                              const char *description);
FLEETPROF_EXPORT void fleetprof_counter_add(int counter_id, int64_t delta);

/* Performance groups: who (a tenant, a plugin, a request type) uses the CPU, measured always
 * and cheaply, for the whole fleet (`fleetprof top`, the profile's group counters).
 *
 * A group is timed by a stopwatch that counts cycles of the CPU's time-stamp counter; the
 * thread's CPU time is read only twice per event (an event-loop iteration, a request), and
 * each group running in the event is charged the event's CPU time x its share of the
 * event's cycles. A group already running on the thread in the current event starts no
 * second stopwatch (A calls B calls A charges A once); a stopwatch still running when its
 * event ends (a nested event loop began) is dropped. docs/groups.md has the design.
 * Events and stopwatches are per thread and not async-signal-safe. */
typedef struct fleetprof_group fleetprof_group;

/* The group named name (1..128 bytes of UTF-8, no control characters), made on first use
 * and the same pointer for the process's whole life (cache it). The same name in two
 * processes is the same group in every fleet view. NULL for a bad name or past 4096 groups
 * (then the stopwatch calls below do nothing). Takes a lock: not for signal handlers. */
FLEETPROF_EXPORT fleetprof_group *fleetprof_group_get(const char *name);

/* Bracket one unit of work on the calling thread. A begin inside an open event (a nested
 * event loop) ends the open event there and drops its running stopwatches. */
FLEETPROF_EXPORT void fleetprof_event_begin(void);
FLEETPROF_EXPORT void fleetprof_event_end(void);

/* A running measure; a plain value on the caller's stack (two registers: the rest lives in
 * the thread's state). group is NULL when the stopwatch measures nothing (profiler off, the
 * group already running, a NULL group). Stop it on the thread that started it. */
typedef struct fleetprof_stopwatch {
    fleetprof_group *group;
    uint64_t start_cycles;
} fleetprof_stopwatch;

/* The part of every group these inline functions read: whether groups are measured now. */
struct fleetprof__group_head {
    int on;
};
FLEETPROF_EXPORT fleetprof_stopwatch fleetprof__stopwatch_start(fleetprof_group *group);
FLEETPROF_EXPORT void fleetprof__stopwatch_stop(fleetprof_group *group, uint64_t start_cycles);

/* Starts timing group on the calling thread. With no event open, the stopwatch's span is an
 * event of its own (two CPU-time reads). When no profiler runs this is one test. */
static inline fleetprof_stopwatch fleetprof_stopwatch_start(fleetprof_group *group)
{
    /* Returned by value on both paths, so that the caller's variable is written once and
     * read whole (a copy of a partly written struct stalls store forwarding). */
    if (group && __atomic_load_n(&((const struct fleetprof__group_head *)(const void *)group)->on,
                                 __ATOMIC_RELAXED))
        return fleetprof__stopwatch_start(group);
    {
        fleetprof_stopwatch off = {0, 0};

        return off;
    }
}

/* Stops sw (started on this thread) and charges its cycles to the current event. */
static inline void fleetprof_stopwatch_stop(fleetprof_stopwatch *sw)
{
    if (sw->group) {
        fleetprof__stopwatch_stop(sw->group, sw->start_cycles);
        sw->group = 0; /* stopping twice measures once */
    }
}

/* A group's totals in this process (since it started; a forked child starts from zero). */
#define FLEETPROF_GROUP_BUCKETS 22
struct fleetprof_group_stats {
    uint64_t cpu_ns;         /* CPU time charged: event CPU time x group cycles / event cycles */
    uint64_t cycles;         /* counter cycles of the charged measures */
    uint64_t activations;    /* stopwatches started */
    uint64_t events;         /* events that charged the group */
    uint64_t worst_event_ns; /* most CPU time charged in one event */
    uint64_t slow_events;    /* events charging FLEETPROF_SLOW_EVENT_MS or more */
    uint64_t discarded;      /* charges dropped: share outside 0..100 % */
    uint64_t migrated;       /* measures dropped: stopped on another CPU than started on */
    uint64_t stale;          /* stopwatches stopped after their event ended */
    /* Events by charged CPU time: [0] under 1 us, [b] 2^(b-1) .. 2^b us, [21] 2^20 us+. */
    uint64_t durations[FLEETPROF_GROUP_BUCKETS];
};
/* Fills *stats; 0, or -EINVAL for a NULL argument. Events still open are not counted. */
FLEETPROF_EXPORT int fleetprof_group_stats(const fleetprof_group *group,
                                           struct fleetprof_group_stats *stats);

/* Times group for the rest of the enclosing scope. */
#define FLEETPROF_GROUP(group)                                           \
    fleetprof_stopwatch FLEETPROF__CAT(fleetprof_stopwatch_, __LINE__)   \
            __attribute__((cleanup(fleetprof_stopwatch_stop), unused)) = \
                    fleetprof_stopwatch_start(group)

#ifdef __cplusplus
}
#endif

#endif /* FLEETPROF_H */
