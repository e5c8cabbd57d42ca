/* child/ipc-module/ipc-pack.c - the process description of the chunk region (region.c) packed as a
 * ProcessDescription (proto/fleetprof.proto), for `fleetprof recover` and the daemon's exit
 * profiles. In libfleetprof-ipc.so (child/core/ipc-module.h) with the rest of what needs
 * protobuf-c: the core gathers the description and calls pack_description(). Any thread;
 * no state.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "child/core/ipc-module.h"
#include "profile/gecko.h"
#include "profile/libs.h"
#include "profile/runtime-log.h"
#include "proto/fleetprof-protocol.h"

static char *or_empty(const char *s)
{
    return (char *)(s ? s : "");
}

int rt_ipc_pack_description(const struct prof_process_info *in, uint8_t **ret_bytes,
                            size_t *ret_len)
{
    Fleetprof__ProcessDescription d = FLEETPROF__PROCESS_DESCRIPTION__INIT;
    Fleetprof__RuntimeStats runtime = FLEETPROF__RUNTIME_STATS__INIT;
    Fleetprof__ThreadDescription *threads = NULL, **thread_ptrs = NULL;
    Fleetprof__CounterDescription *counters = NULL, **counter_ptrs = NULL;
    Fleetprof__MarkerSchemaDescription *schemas = NULL, **schema_ptrs = NULL;
    Fleetprof__SchemaFieldDescription *fields = NULL, **field_ptrs = NULL;
    Fleetprof__ModuleDescription *modules = NULL, **module_ptrs = NULL;
    const struct prof_libs *libs = in->libs;
    size_t field_count = 0, packed;
    uint8_t *out = NULL;
    int r = -ENOMEM;

    for (size_t i = 0; i < in->schema_count; i++)
        field_count += in->schemas[i].field_count;
    threads = calloc(in->thread_count + 1, sizeof(*threads));
    thread_ptrs = calloc(in->thread_count + 1, sizeof(*thread_ptrs));
    counters = calloc(in->counter_count + 1, sizeof(*counters));
    counter_ptrs = calloc(in->counter_count + 1, sizeof(*counter_ptrs));
    schemas = calloc(in->schema_count + 1, sizeof(*schemas));
    schema_ptrs = calloc(in->schema_count + 1, sizeof(*schema_ptrs));
    fields = calloc(field_count + 1, sizeof(*fields));
    field_ptrs = calloc(field_count + 1, sizeof(*field_ptrs));
    modules = calloc(libs->count + 1, sizeof(*modules));
    module_ptrs = calloc(libs->count + 1, sizeof(*module_ptrs));
    if (!threads || !thread_ptrs || !counters || !counter_ptrs || !schemas || !schema_ptrs ||
        !fields || !field_ptrs || !modules || !module_ptrs)
        goto out;

    d.pid = in->pid;
    d.ppid = in->ppid;
    d.forked = in->forked;
    d.name = or_empty(in->name);
    d.product = or_empty(in->product);
    d.start_ns = in->start_ns;
    d.start_epoch_ms = in->start_epoch_ms;
    d.interval_ns = in->interval_ns;
    d.stackwalk = or_empty(in->stackwalk);
    d.described_ns = in->described_ns;
    for (size_t i = 0; i < in->thread_count; i++) {
        const struct prof_thread_info *t = &in->threads[i];

        fleetprof__thread_description__init(&threads[i]);
        threads[i].tid = t->tid;
        threads[i].name = (char *)t->name;
        threads[i].register_ns = t->register_ns;
        threads[i].unregister_ns = t->unregister_ns;
        threads[i].is_main = t->is_main;
        thread_ptrs[i] = &threads[i];
    }
    d.threads = thread_ptrs;
    d.n_threads = in->thread_count;
    for (size_t i = 0; i < in->counter_count; i++) {
        const struct prof_counter_info *c = &in->counters[i];

        fleetprof__counter_description__init(&counters[i]);
        counters[i].id = c->id;
        counters[i].name = or_empty(c->name);
        counters[i].category = or_empty(c->category);
        counters[i].description = or_empty(c->description);
        counter_ptrs[i] = &counters[i];
    }
    d.counters = counter_ptrs;
    d.n_counters = in->counter_count;
    field_count = 0;
    for (size_t i = 0; i < in->schema_count; i++) {
        const struct prof_marker_schema *s = &in->schemas[i];

        fleetprof__marker_schema_description__init(&schemas[i]);
        schemas[i].id = s->id;
        schemas[i].name = or_empty(s->name);
        schemas[i].tooltip_label = or_empty(s->tooltip_label);
        schemas[i].table_label = or_empty(s->table_label);
        schemas[i].chart_label = or_empty(s->chart_label);
        schemas[i].fields = &field_ptrs[field_count];
        schemas[i].n_fields = s->field_count;
        for (size_t k = 0; k < s->field_count; k++, field_count++) {
            Fleetprof__SchemaFieldDescription *f = &fields[field_count];

            fleetprof__schema_field_description__init(f);
            f->key = or_empty(s->fields[k].key);
            f->label = or_empty(s->fields[k].label);
            f->format = or_empty(s->fields[k].format);
            f->searchable = s->fields[k].searchable;
            field_ptrs[field_count] = f;
        }
        schema_ptrs[i] = &schemas[i];
    }
    d.schemas = schema_ptrs;
    d.n_schemas = in->schema_count;
    for (size_t i = 0; i < libs->count; i++) {
        const struct prof_lib *l = &libs->libs[i];

        fleetprof__module_description__init(&modules[i]);
        modules[i].start = l->start;
        modules[i].end = l->end;
        modules[i].bias = l->bias;
        modules[i].offset = l->offset;
        modules[i].path = or_empty(l->path);
        modules[i].name = or_empty(l->name);
        modules[i].build_id.data = (uint8_t *)l->build_id;
        modules[i].build_id.len = l->build_id_len;
        module_ptrs[i] = &modules[i];
    }
    d.modules = module_ptrs;
    d.n_modules = libs->count;
    if (in->shutdown_ns) {
        const struct prof_runtime_log *log = in->runtime_log;

        d.exit_ns = in->shutdown_ns;
        runtime.pushed_blocks = log->pushed_blocks;
        runtime.cleared_blocks = log->cleared_blocks;
        runtime.failed_puts = log->failed_puts;
        runtime.failed_bytes = log->failed_bytes;
        runtime.unsafe_samples_in_loader = log->unsafe_samples_in_loader;
        runtime.descriptors_taken = log->descriptors_taken;
        runtime.sampling_stopped = or_empty(log->sampling_stopped);
        runtime.descriptors_given_up = or_empty(log->descriptors_given_up);
        runtime.threads_given_up = or_empty(log->threads_given_up);
        runtime.sampling_stopped_at_us = log->sampling_stopped_at_us;
        runtime.handler_captures = log->handler_captures;
        runtime.handler_p50_ns = log->handler_p50_ns;
        runtime.handler_p99_ns = log->handler_p99_ns;
        runtime.descriptor_checks = log->descriptor_checks;
        runtime.descriptor_checks_skipped = log->descriptor_checks_skipped;
        runtime.sampling_timer = or_empty(log->sampling_timer);
        runtime.sampling_timer_why = or_empty(log->sampling_timer_why);
        runtime.timer_failure = or_empty(log->timer_failure);
        runtime.threads_perf_timer = log->threads_perf_timer;
        runtime.threads_thread_timer = log->threads_thread_timer;
        runtime.threads_tick = log->threads_tick;
        runtime.threads_no_timer = log->threads_no_timer;
        runtime.captures_dropped = log->captures_dropped;
        d.runtime = &runtime;
    }

    packed = fleetprof__process_description__get_packed_size(&d);
    out = malloc(packed ? packed : 1);
    if (!out)
        goto out;
    (void)fleetprof__process_description__pack(&d, out);
    *ret_bytes = out;
    *ret_len = packed;
    r = 0;
out:
    free(threads);
    free(thread_ptrs);
    free(counters);
    free(counter_ptrs);
    free(schemas);
    free(schema_ptrs);
    free(fields);
    free(field_ptrs);
    free(modules);
    free(module_ptrs);
    return r;
}
