/* child/entry/api.c - the exported fleetprof_* calls for labels, markers, counters, threads.
 *
 * Each is a cheap no-op while the profiler is not running, never blocks on anything but
 * the buffer's mutex, and never fails the program: errors are dropped (and counted by the
 * buffer as failed puts).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buffer/chunked-buffer.h"
#include "child/core/core.h"
#include "child/include/fleetprof.h"
#include "child/lifecycle/lifecycle.h"

#define RUNNING() rt_running()

FLEETPROF_EXPORT uint64_t fleetprof_now_ns(void)
{
    return rt_now_ns();
}

FLEETPROF_EXPORT int fleetprof_is_active(void)
{
    return RUNNING() && !atomic_load(&rt.paused);
}

FLEETPROF_EXPORT int fleetprof_register_thread(const char *name)
{
    if (!RUNNING())
        return -ESRCH;
    return rt_threads_register(name, gettid() == getpid());
}

FLEETPROF_EXPORT void fleetprof_unregister_thread(void)
{
    rt_threads_unregister();
}

FLEETPROF_EXPORT void *fleetprof_label_push(const char *name, enum fleetprof_category category)
{
    struct rt_thread *t = rt_self;
    uint32_t depth;

    if (!t || !name)
        return NULL;
    depth = atomic_load_explicit(&t->label_depth, memory_order_relaxed);
    if (depth < RT_MAX_LABELS) {
        t->labels[depth].name = name;
        t->labels[depth].category = (uint32_t)category;
        t->labels[depth].stack_address = (uintptr_t)__builtin_frame_address(0);
        t->labels[depth].code_address = (uintptr_t)__builtin_return_address(0);
    }
    /* The entry is complete before the signal handler can see the new depth. */
    atomic_signal_fence(memory_order_release);
    atomic_store_explicit(&t->label_depth, depth + 1, memory_order_relaxed);
    return t;
}

FLEETPROF_EXPORT void fleetprof_label_pop(void *token)
{
    struct rt_thread *t = rt_self;
    uint32_t depth;

    /* A label pushed before the thread was registered (token NULL) has nothing to pop; a
     * thread re-registered in between (after fork) must not pop the new stack. */
    if (!t || token != t)
        return;
    depth = atomic_load_explicit(&t->label_depth, memory_order_relaxed);
    if (depth > 0)
        atomic_store_explicit(&t->label_depth, depth - 1, memory_order_relaxed);
}

static int32_t current_tid(void)
{
    struct rt_thread *t = rt_self;

    return t ? t->tid : (int32_t)gettid();
}

static void put_marker(const char *name, enum fleetprof_category category,
                       enum prof_marker_phase phase, uint64_t start_ns, uint64_t end_ns,
                       const char *text, bool with_stack)
{
    uint64_t frames[PROF_MAX_FRAMES];
    struct prof_marker m = {0};

    if (!RUNNING() || !name)
        return;
    m.tid = current_tid();
    m.category = (uint32_t)category;
    m.phase = phase;
    m.start_ns = start_ns;
    m.end_ns = end_ns;
    m.name.data = name;
    m.name.len = strlen(name);
    if (text) {
        m.payload_kind = PROF_PAYLOAD_TEXT;
        m.text.data = text;
        m.text.len = strlen(text);
    }
    if (with_stack) {
        m.frame_count = rt_stackwalk_self(frames, PROF_MAX_FRAMES);
        m.frames = frames;
    }
    (void)prof_entry_put_marker(rt.buffer, &m);
}

FLEETPROF_EXPORT void fleetprof_marker(const char *name, enum fleetprof_category category,
                                       const char *text)
{
    put_marker(name, category, PROF_PHASE_INSTANT, rt_now_ns(), 0, text, false);
}

FLEETPROF_EXPORT void
fleetprof_marker_with_stack(const char *name, enum fleetprof_category category, const char *text)
{
    put_marker(name, category, PROF_PHASE_INSTANT, rt_now_ns(), 0, text, true);
}

FLEETPROF_EXPORT void fleetprof_marker_interval(const char *name, enum fleetprof_category category,
                                                uint64_t start_ns, uint64_t end_ns,
                                                const char *text)
{
    if (end_ns < start_ns)
        return;
    put_marker(name, category, PROF_PHASE_INTERVAL, start_ns, end_ns, text, false);
}

FLEETPROF_EXPORT void fleetprof_marker_start(const char *name, enum fleetprof_category category)
{
    put_marker(name, category, PROF_PHASE_START, rt_now_ns(), 0, NULL, false);
}

FLEETPROF_EXPORT void fleetprof_marker_end(const char *name, enum fleetprof_category category)
{
    put_marker(name, category, PROF_PHASE_END, 0, rt_now_ns(), NULL, false);
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

FLEETPROF_EXPORT int fleetprof_marker_schema(const char *name, const char *table_label,
                                             const struct fleetprof_field_schema *fields,
                                             size_t field_count)
{
    struct rt_schema *s;
    int id;

    if (!RUNNING())
        return -ESRCH;
    if (!name || (!fields && field_count) || field_count > PROF_MAX_FIELDS)
        return -EINVAL;
    for (size_t i = 0; i < field_count; i++)
        if (!fields[i].key || !fields[i].format || fields[i].kind < FLEETPROF_FIELD_INT ||
            fields[i].kind > FLEETPROF_FIELD_STRING)
            return -EINVAL;

    (void)pthread_mutex_lock(&rt.registry_lock);
    if (rt.schema_count == RT_MAX_SCHEMAS) {
        (void)pthread_mutex_unlock(&rt.registry_lock);
        return -ENOSPC;
    }
    s = &rt.schemas[rt.schema_count];
    memset(s, 0, sizeof(*s));
    id = (int)rt.schema_count + 1;
    s->info.id = (uint32_t)id;
    s->info.name = dup_or_null(name);
    s->info.table_label = dup_or_null(table_label);
    s->info.tooltip_label = dup_or_null(table_label);
    s->info.chart_label = dup_or_null(table_label);
    s->info.fields = s->fields;
    s->info.field_count = field_count;
    for (size_t i = 0; i < field_count; i++) {
        s->fields[i].key = dup_or_null(fields[i].key);
        s->fields[i].label = dup_or_null(fields[i].label ? fields[i].label : fields[i].key);
        s->fields[i].format = dup_or_null(fields[i].format);
        s->fields[i].searchable = fields[i].kind == FLEETPROF_FIELD_STRING;
        s->kinds[i] = (enum prof_field_kind)fields[i].kind;
    }
    __atomic_store_n(&rt.schema_count, rt.schema_count + 1, __ATOMIC_RELEASE); /* read unlocked */
    (void)pthread_mutex_unlock(&rt.registry_lock);
    return id;
}

FLEETPROF_EXPORT void fleetprof_marker_typed(int schema_id, const char *name,
                                             enum fleetprof_category category, uint64_t start_ns,
                                             uint64_t end_ns,
                                             const struct fleetprof_field_value *values,
                                             size_t value_count)
{
    struct prof_field fields[PROF_MAX_FIELDS];
    struct prof_marker m = {0};

    if (!RUNNING() || !name || schema_id <= 0 ||
        (uint32_t)schema_id > __atomic_load_n(&rt.schema_count, __ATOMIC_ACQUIRE) ||
        value_count > PROF_MAX_FIELDS || (!values && value_count))
        return;
    for (size_t i = 0; i < value_count; i++) {
        fields[i].kind = (enum prof_field_kind)values[i].kind;
        switch (values[i].kind) {
        case FLEETPROF_FIELD_INT:
            fields[i].v.i = values[i].v.i;
            break;
        case FLEETPROF_FIELD_UINT:
            fields[i].v.u = values[i].v.u;
            break;
        case FLEETPROF_FIELD_DOUBLE:
            fields[i].v.d = values[i].v.d;
            break;
        case FLEETPROF_FIELD_STRING:
            fields[i].v.s.data = values[i].v.s ? values[i].v.s : "";
            fields[i].v.s.len = strlen(fields[i].v.s.data);
            break;
        default:
            return; /* not a field kind: drop the marker rather than record garbage */
        }
    }
    m.tid = current_tid();
    m.category = (uint32_t)category;
    m.phase = end_ns ? PROF_PHASE_INTERVAL : PROF_PHASE_INSTANT;
    m.start_ns = start_ns ? start_ns : rt_now_ns();
    m.end_ns = end_ns;
    m.name.data = name;
    m.name.len = strlen(name);
    m.payload_kind = PROF_PAYLOAD_TYPED;
    m.schema_id = (uint32_t)schema_id;
    m.field_count = (uint32_t)value_count;
    m.fields = fields;
    (void)prof_entry_put_marker(rt.buffer, &m);
}

FLEETPROF_EXPORT int fleetprof_counter_create(const char *name, const char *category,
                                              const char *description)
{
    struct rt_counter *c;
    uint32_t id;

    if (!RUNNING())
        return -ESRCH;
    if (!name)
        return -EINVAL;
    (void)pthread_mutex_lock(&rt.registry_lock);
    id = atomic_load(&rt.counter_count);
    if (id == RT_MAX_COUNTERS) {
        (void)pthread_mutex_unlock(&rt.registry_lock);
        return -ENOSPC;
    }
    c = &rt.counters[id];
    c->name = dup_or_null(name);
    c->category = dup_or_null(category ? category : "Other");
    c->description = dup_or_null(description ? description : "");
    atomic_store(&c->value, 0);
    atomic_store(&c->ops, 0);
    c->last_sampled = 0;
    c->last_ops = 0;
    /* Published last: the sampler reads counters below counter_count without a lock. */
    atomic_store_explicit(&rt.counter_count, id + 1, memory_order_release);
    (void)pthread_mutex_unlock(&rt.registry_lock);
    return (int)id;
}

FLEETPROF_EXPORT void fleetprof_counter_add(int counter_id, int64_t delta)
{
    /* id 0 is the built-in memory counter, which only the sampler sets. */
    if (counter_id <= 0 || (uint32_t)counter_id >= atomic_load(&rt.counter_count))
        return;
    atomic_fetch_add_explicit(&rt.counters[counter_id].value, delta, memory_order_relaxed);
    atomic_fetch_add_explicit(&rt.counters[counter_id].ops, 1, memory_order_relaxed);
}
