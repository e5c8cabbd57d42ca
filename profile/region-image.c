/* profile/region-image.c - the profile of a process from the chunk region it left
 * (buffer/region.h): a process that died without writing one (SIGKILL, a crash, the OOM
 * killer), or a short-lived one that left its exit profile there for the daemon to write.
 *
 * The region was written by another process, perhaps while it was being killed, perhaps by
 * a hostile one: it is copied first and every byte of the copy is checked before use (the
 * region reader for chunks and blocks, protobuf-c for the description, bounds here for what
 * the description says). The profile is then written by the same profile/ code as an
 * exit profile, so it reads exactly like one, marked meta.fleetprof.recovered.
 *
 * Used by the daemon (its workers) and by `fleetprof recover`, which runs no daemon.
 */
#include "profile/region-image.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "buffer/chunk-manager.h"
#include "buffer/chunk.h"
#include "buffer/chunked-buffer.h"
#include "buffer/region.h"
#include "common/grow.h"
#include "common/outfile.h"
#include "json/writer.h"
#include "profile/entries.h"
#include "profile/gecko.h"
#include "profile/libs.h"
#include "profile/runtime-log.h"
#include "profile/symbolize-local.h"
#include "profile/symbols.h"
#include "proto/fleetprof-protocol.h"

static uint64_t now_ns(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Bounds on what a description may ask for (a real process is far below them). */
#define MAX_THREADS  65536
#define MAX_MODULES  65536
#define MAX_COUNTERS 4096
#define MAX_SCHEMAS  1024
#define MAX_FIELDS   64

/* A region file bigger than this is not a region a runtime made (4096 slots of 1 MiB). */
#define MAX_REGION_BYTES ((uint64_t)5 << 30)

/* The Crash marker's schema: what the fatal signal handler recorded (child/core/crash.c). */
static const struct prof_schema_field crash_fields[] = {
        {"signal", "Signal", "string", true},
        {"address", "Fault address", "string", true},
        {"reason", "Reason", "string", true},
};

struct recovered_info {
    struct prof_process_info info;
    struct prof_thread_info *threads;
    struct prof_counter_info *counters;
    struct prof_marker_schema *schemas;      /* described ones, and room for Crash */
    struct prof_marker_schema crash_only[1]; /* the schemas of an undescribed process */
    struct prof_schema_field *fields;
    struct prof_libs libs;
    Fleetprof__ProcessDescription *desc; /* owns the strings the above borrow */
};

const char *prof_signal_name(int sig)
{
    switch (sig) {
    case SIGSEGV:
        return "SIGSEGV";
    case SIGBUS:
        return "SIGBUS";
    case SIGILL:
        return "SIGILL";
    case SIGFPE:
        return "SIGFPE";
    case SIGABRT:
        return "SIGABRT";
    default:
        return "signal";
    }
}

/* si_code in words, for the fatal signals' common codes; "" when sent by a process. */
static const char *crash_reason(int sig, int code)
{
    if (code <= 0)
        return code == SI_TKILL || code == SI_USER ? "sent by a process (kill, raise, abort)" : "";
    switch (sig) {
    case SIGSEGV:
        return code == SEGV_MAPERR   ? "address not mapped"
               : code == SEGV_ACCERR ? "access not allowed"
                                     : "";
    case SIGBUS:
        return code == BUS_ADRALN   ? "misaligned address"
               : code == BUS_ADRERR ? "address past the end of a file"
                                    : "";
    case SIGFPE:
        return code == FPE_INTDIV ? "integer divide by zero" : "";
    case SIGILL:
        return code == ILL_ILLOPC ? "illegal opcode" : "";
    default:
        return "";
    }
}

/* Adds the Crash marker (and its schema) when the process recorded a fatal signal. */
static int add_crash(const uint8_t *mem, size_t len, struct recovered_info *ri,
                     struct buf_chunked_buffer *buffer, struct prof_recovery *rec)
{
    struct buf_region_crash crash;
    struct prof_marker_schema *schemas = ri->schemas ? ri->schemas : ri->crash_only;
    struct prof_field fields[3];
    struct prof_marker m = {0};
    char address[32];
    const char *name, *reason;
    uint32_t id = 0;

    if (buf_region_read_crash(mem, len, &crash) < 0)
        return 0;
    /* The schemas array has room for one more (info_from() or a static one). */
    for (size_t i = 0; i < ri->info.schema_count; i++)
        if (schemas[i].id >= id)
            id = schemas[i].id + 1;
    schemas[ri->info.schema_count++] =
            (struct prof_marker_schema){id,
                                        "Crash",
                                        "Crash: {marker.data.signal} at {marker.data.address}",
                                        "{marker.data.signal} {marker.data.reason}",
                                        "{marker.data.signal}",
                                        crash_fields,
                                        sizeof(crash_fields) / sizeof(crash_fields[0])};
    name = prof_signal_name(crash.signal);
    reason = crash_reason(crash.signal, crash.code);
    if (crash.code > 0)
        (void)snprintf(address, sizeof(address), "0x%" PRIx64, crash.address);
    else
        (void)snprintf(address, sizeof(address), "-");
    fields[0] = (struct prof_field){.kind = PROF_FIELD_STRING, .v.s = {name, strlen(name)}};
    fields[1] = (struct prof_field){.kind = PROF_FIELD_STRING, .v.s = {address, strlen(address)}};
    fields[2] = (struct prof_field){.kind = PROF_FIELD_STRING, .v.s = {reason, strlen(reason)}};
    m.tid = crash.tid;
    m.category = PROF_CATEGORY_OTHER;
    m.phase = PROF_PHASE_INSTANT;
    m.start_ns = crash.time_ns;
    m.name = (struct prof_string){"Crash", 5};
    m.payload_kind = PROF_PAYLOAD_TYPED;
    m.schema_id = id;
    m.field_count = 3;
    m.fields = fields;
    m.frame_count = crash.frame_count;
    m.frames = crash.frames;
    rec->crash_signal = crash.signal;
    rec->crash_tid = crash.tid;
    return prof_entry_put_marker(buffer, &m);
}

static void recovered_info_done(struct recovered_info *ri)
{
    free(ri->threads);
    free(ri->counters);
    free(ri->schemas);
    free(ri->fields);
    prof_libs_done(&ri->libs);
    if (ri->desc)
        fleetprof__process_description__free_unpacked(ri->desc, NULL);
}

static const char *or_null(const char *s)
{
    return s && *s ? s : NULL;
}

/* The module list from the description: owned copies, with the identifiers the profile
 * shows. Modules whose ranges are impossible are left out (their frames stay addresses). */
static int modules_from(const Fleetprof__ProcessDescription *d, struct prof_libs *ret)
{
    struct prof_lib *libs = calloc(d->n_modules ? d->n_modules : 1, sizeof(*libs));
    size_t n = 0;

    if (!libs)
        return -ENOMEM;
    for (size_t i = 0; i < d->n_modules; i++) {
        const Fleetprof__ModuleDescription *m = d->modules[i];
        struct prof_lib *l = &libs[n];

        if (m->start >= m->end || m->build_id.len > PROF_BUILD_ID_MAX)
            continue;
        if (n > 0 && m->start < libs[n - 1].end)
            continue; /* sorted and disjoint, as a real module list is */
        l->start = m->start;
        l->end = m->end;
        l->bias = m->bias;
        l->offset = m->offset;
        l->path = m->path[0] ? strdup(m->path) : NULL;
        l->name = strdup(m->name[0] ? m->name : (m->path[0] ? m->path : "[vdso]"));
        memcpy(l->build_id, m->build_id.data, m->build_id.len);
        l->build_id_len = m->build_id.len;
        if (m->build_id.len > 0) {
            char id[64];

            if (prof_lib_format_breakpad_id(m->build_id.data, m->build_id.len, id, sizeof(id)) >= 0)
                l->breakpad_id = strdup(id);
            l->code_id = malloc(m->build_id.len * 2 + 1);
            if (l->code_id)
                for (size_t k = 0; k < m->build_id.len; k++)
                    (void)snprintf(l->code_id + 2 * k, 3, "%02x", m->build_id.data[k]);
        }
        n++;
        if ((m->path[0] && !l->path) || !l->name) {
            ret->libs = libs;
            ret->count = n;
            return -ENOMEM;
        }
    }
    ret->libs = libs;
    ret->count = n;
    return 0;
}

/* The process as described in the region, checked; what is missing gets a neutral value. */
static int info_from(const uint8_t *meta, size_t meta_len, const struct buf_region_stats *rs,
                     struct recovered_info *ri)
{
    Fleetprof__ProcessDescription *d;
    size_t fields = 0;
    int r;

    ri->info.pid = rs->pid;
    ri->info.schemas = ri->crash_only;
    ri->info.name = "unknown";
    ri->info.process_type = "default";
    ri->info.interval_ns = 1000000;
    if (!meta)
        return 0;
    d = fleetprof__process_description__unpack(NULL, meta_len, meta);
    if (!d)
        return -EBADMSG;
    ri->desc = d;
    if (d->pid != rs->pid || d->n_threads > MAX_THREADS || d->n_modules > MAX_MODULES ||
        d->n_counters > MAX_COUNTERS || d->n_schemas > MAX_SCHEMAS || d->interval_ns == 0)
        return -EBADMSG;
    for (size_t i = 0; i < d->n_schemas; i++) {
        if (d->schemas[i]->n_fields > MAX_FIELDS)
            return -EBADMSG;
        fields += d->schemas[i]->n_fields;
    }
    ri->threads = calloc(d->n_threads + 1, sizeof(*ri->threads));
    ri->counters = calloc(d->n_counters + 1, sizeof(*ri->counters));
    ri->schemas = calloc(d->n_schemas + 2, sizeof(*ri->schemas)); /* + Crash */
    ri->fields = calloc(fields + 1, sizeof(*ri->fields));
    if (!ri->threads || !ri->counters || !ri->schemas || !ri->fields)
        return -ENOMEM;

    ri->info.ppid = d->ppid;
    ri->info.forked = d->forked;
    ri->info.name = d->name[0] ? d->name : "unknown";
    ri->info.product = or_null(d->product);
    ri->info.start_ns = d->start_ns;
    ri->info.start_epoch_ms = d->start_epoch_ms;
    ri->info.interval_ns = d->interval_ns;
    ri->info.stackwalk = or_null(d->stackwalk);
    for (size_t i = 0; i < d->n_threads; i++) {
        const Fleetprof__ThreadDescription *t = d->threads[i];

        ri->threads[i] = (struct prof_thread_info){t->tid, t->name, t->register_ns,
                                                   t->unregister_ns, t->is_main};
    }
    ri->info.threads = ri->threads;
    ri->info.thread_count = d->n_threads;
    for (size_t i = 0; i < d->n_counters; i++) {
        const Fleetprof__CounterDescription *c = d->counters[i];

        ri->counters[i] = (struct prof_counter_info){c->id, c->name, c->category, c->description};
    }
    ri->info.counters = ri->counters;
    ri->info.counter_count = d->n_counters;
    fields = 0;
    for (size_t i = 0; i < d->n_schemas; i++) {
        const Fleetprof__MarkerSchemaDescription *s = d->schemas[i];

        ri->schemas[i] = (struct prof_marker_schema){s->id,
                                                     s->name,
                                                     or_null(s->tooltip_label),
                                                     or_null(s->table_label),
                                                     or_null(s->chart_label),
                                                     &ri->fields[fields],
                                                     s->n_fields};
        for (size_t k = 0; k < s->n_fields; k++, fields++) {
            const Fleetprof__SchemaFieldDescription *f = s->fields[k];

            ri->fields[fields] =
                    (struct prof_schema_field){f->key, or_null(f->label), f->format, f->searchable};
        }
    }
    ri->info.schemas = ri->schemas;
    ri->info.schema_count = d->n_schemas;
    r = modules_from(d, &ri->libs);
    ri->info.libs = &ri->libs;
    return r;
}

struct copy_ctx {
    struct buf_chunked_buffer *buffer;
    uint64_t dropped;
    uint8_t *scratch;
    size_t scratch_len;
};

/* Each recovered block goes into a buffer of our own, in order, as the writer reads one. */
static int copy_block(struct buf_entry_reader *reader, uint64_t index, void *userdata)
{
    struct copy_ctx *ctx = userdata;
    size_t len = buf_entry_reader_remaining(reader);

    (void)index;
    if (len > ctx->scratch_len) {
        ctx->dropped++;
        return 0;
    }
    (void)buf_entry_reader_read(reader, ctx->scratch, len);
    if (buf_chunked_buffer_put_bytes(ctx->buffer, ctx->scratch, len, NULL) < 0)
        ctx->dropped++; /* a block of a whole chunk: the runtime never writes one */
    return 0;
}

/* An exit profile's symbolizer: the daemon's, counted for profilingLog[pid].runtime, which
 * is formatted again once the symbols are found (the writer writes the log last). */
struct exit_symbols {
    const struct prof_symbolizer *inner;
    struct prof_runtime_log log;
    char *out; /* the runtime log's text, rewritten after symbolization */
    size_t out_size;
};

static int resolve_counted(void *userdata, const struct prof_frame_request *requests, size_t count,
                           struct prof_frame_result *results)
{
    struct exit_symbols *es = userdata;
    uint64_t start_ns = now_ns();
    int r = es->inner->resolve(es->inner->userdata, requests, count, results);

    /* Resolved by the fleet's symbol service, as the child would have asked it to. */
    es->log.symbol_service_batches++;
    es->log.symbol_service_addresses += count;
    if (r < 0) {
        es->log.symbol_service_failures++;
        es->log.symbol_service_unresolved += count;
    } else {
        for (size_t i = 0; i < count; i++)
            es->log.symbol_service_unresolved += !results[i].function;
    }
    es->log.symbolize_us += (now_ns() - start_ns) / 1000;
    prof_runtime_log_format(es->out, es->out_size, &es->log);
    return r;
}

/* The exit profile's own parts, from the description the child published as it ended. */
static int exit_info(const struct recovered_info *ri, struct exit_symbols *es)
{
    const Fleetprof__ProcessDescription *d = ri->desc;
    const Fleetprof__RuntimeStats *rs = d ? d->runtime : NULL;

    if (!d || d->exit_ns == 0 || !rs)
        return -ENODATA; /* not the description of an end */
    es->log = (struct prof_runtime_log){
            .pushed_blocks = rs->pushed_blocks,
            .cleared_blocks = rs->cleared_blocks,
            .failed_puts = rs->failed_puts,
            .failed_bytes = rs->failed_bytes,
            .unsafe_samples_in_loader = rs->unsafe_samples_in_loader,
            .descriptors_taken = rs->descriptors_taken,
            .interval_ns = d->interval_ns,
            .sampling_stopped = rs->sampling_stopped,
            .descriptors_given_up = rs->descriptors_given_up,
            .threads_given_up = rs->threads_given_up,
            .sampling_stopped_at_us = rs->sampling_stopped_at_us,
            .handler_captures = rs->handler_captures,
            .handler_p50_ns = rs->handler_p50_ns,
            .handler_p99_ns = rs->handler_p99_ns,
            .descriptor_checks = rs->descriptor_checks,
            .descriptor_checks_skipped = rs->descriptor_checks_skipped,
            .sampling_timer = rs->sampling_timer,
            .sampling_timer_why = rs->sampling_timer_why,
            .timer_failure = rs->timer_failure,
            .threads_perf_timer = rs->threads_perf_timer,
            .threads_thread_timer = rs->threads_thread_timer,
            .threads_tick = rs->threads_tick,
            .threads_no_timer = rs->threads_no_timer,
            .captures_dropped = rs->captures_dropped,
            .built_from_region = true,
    };
    prof_runtime_log_format(es->out, es->out_size, &es->log);
    return 0;
}

/* how: where a dead process's chunks came from; NULL: the exit profile a child left in its
 * region (its exit description required, no crash record, not marked recovered). */
static int build_image(const uint8_t *mem, size_t len, const char *how,
                       const struct prof_region_groups *groups,
                       const struct prof_symbolizer *symbolizer, struct json_writer *w,
                       struct prof_recovery *ret)
{
    struct exit_symbols es = {symbolizer, {0}, NULL, 0};
    struct prof_symbolizer counted = {resolve_counted, &es};
    struct prof_recovery rec = {0};
    struct recovered_info ri = {0};
    struct buf_region_stats rs;
    struct buf_region_header h;
    struct buf_chunk_manager *m = NULL;
    struct copy_ctx ctx = {0};
    const uint8_t *meta = NULL;
    size_t meta_len = 0;
    uint64_t exec_ns;
    char log[3500];
    int r;

    if (len < sizeof(h))
        return -EBADMSG;
    memcpy(&h, mem, sizeof(h));
    r = buf_region_read_meta(mem, len, &meta, &meta_len);
    if (r == -EBADMSG)
        return r; /* not a region at all */
    rec.described = r == 0;
    /* Room for every block the region can hold, in chunks of the region's size. */
    r = buf_chunk_manager_local_new((uint64_t)len + 2u * h.chunk_bytes, h.chunk_bytes, &m);
    if (r == 0)
        r = buf_chunked_buffer_new(m, h.pid, &ctx.buffer);
    ctx.scratch_len = h.chunk_bytes;
    ctx.scratch = r == 0 ? malloc(ctx.scratch_len) : NULL;
    if (r == 0 && !ctx.scratch)
        r = -ENOMEM;
    if (r == 0)
        r = buf_region_read_each(mem, len, copy_block, &ctx, &rs);
    if (r < 0)
        goto out;
    rec.pid = rs.pid;
    rec.chunks = rs.chunks;
    rec.blocks = rs.blocks - ctx.dropped;
    rec.corrupt_chunks = rs.corrupt_chunks;
    rec.torn_bytes = rs.torn_bytes;
    rec.skipped_tails = rs.skipped_tails;
    rec.dropped_blocks = ctx.dropped;

    r = info_from(rec.described ? meta : NULL, meta_len, &rs, &ri);
    if (r == -EBADMSG) { /* a damaged description: the samples still count, unnamed */
        recovered_info_done(&ri);
        ri = (struct recovered_info){0};
        rec.described = false;
        r = info_from(NULL, 0, &rs, &ri);
    }
    if (r < 0)
        goto out;
    if (how && rec.described && ri.desc && ri.desc->exit_ns != 0 && ri.desc->runtime &&
        buf_region_read_crash(mem, len, &(struct buf_region_crash){0}) < 0 &&
        buf_region_read_exec(mem, len, &exec_ns, NULL, 0) < 0) {
        /* It described its end, then ended without a crash: an exit nobody took (it had
         * left the daemon, as a process that gave the program its descriptors or its
         * threads does). Its exit profile, not a recovery. */
        rec.exited = true;
        how = NULL;
    }
    if (!how) {
        es.out = log;
        es.out_size = sizeof(log);
        r = rec.described ? exit_info(&ri, &es) : -ENODATA;
        if (r < 0)
            goto out;
        ri.info.shutdown_ns = ri.desc->exit_ns;
        ri.info.exit_profile = true;
        ri.info.runtime_log_json = log;
        ri.info.timer_captures = es.log.handler_captures;
        if (groups && groups->count) {
            ri.info.groups = groups->totals;
            ri.info.group_count = groups->count;
            ri.info.slow_event_ns = groups->slow_event_ns;
        }
        r = prof_gecko_write_process(w, NULL, &ri.info, ctx.buffer, &counted, NULL);
        goto out;
    }
    if (!rec.described)
        ri.info.start_ns = rs.created_ns;
    r = add_crash(mem, len, &ri, ctx.buffer, &rec);
    if (r < 0)
        goto out;
    /* An image that exec'd ended there: its chunks are its life before the exec. */
    if (buf_region_read_exec(mem, len, &exec_ns, rec.execd_into, sizeof(rec.execd_into)) == 0) {
        rec.execd = true;
        ri.info.execd_into = rec.execd_into[0] ? rec.execd_into : "an unknown program";
    }
    ri.info.recovered = how;
    ri.info.exit_profile = true; /* the profile of a process that ended, like an exit profile */
    (void)snprintf(
            log, sizeof(log),
            "{\"recovered\":{\"from\":\"%s\",\"described\":%s,\"execd\":%s,\"crashSignal\":%d"
            ",\"chunks\":%" PRIu64 ",\"blocks\":%" PRIu64 ",\"corruptChunks\":%" PRIu64
            ",\"tornBytes\":%" PRIu64 ",\"skippedTails\":%" PRIu64 ",\"droppedBlocks\":%" PRIu64
            "}}",
            how, rec.described ? "true" : "false", rec.execd ? "true" : "false", rec.crash_signal,
            rec.chunks, rec.blocks, rec.corrupt_chunks, rec.torn_bytes, rec.skipped_tails,
            rec.dropped_blocks);
    ri.info.runtime_log_json = log;
    r = prof_gecko_write_process(w, NULL, &ri.info, ctx.buffer, symbolizer, NULL);
out:
    free(ctx.scratch);
    buf_chunked_buffer_free(ctx.buffer);
    buf_chunk_manager_free(m);
    recovered_info_done(&ri);
    if (ret)
        *ret = rec;
    return r;
}

int prof_region_recover(const uint8_t *mem, size_t len, const char *how,
                        const struct prof_symbolizer *symbolizer, struct json_writer *w,
                        struct prof_recovery *ret)
{
    return build_image(mem, len, how, NULL, symbolizer, w, ret);
}

/* The whole file, copied: a reader of another process's memory never reads it twice. */
int prof_region_read_whole(int fd, uint64_t limit, uint8_t **ret_mem, size_t *ret_len)
{
    struct stat st;
    uint8_t *mem;
    size_t done = 0;

    if (fstat(fd, &st) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return -EINVAL;
    if ((uint64_t)st.st_size > limit)
        return -EFBIG;
    mem = malloc((size_t)st.st_size + 1);
    if (!mem)
        return -ENOMEM;
    while (done < (size_t)st.st_size) {
        ssize_t n = pread(fd, mem + done, (size_t)st.st_size - done, (off_t)done);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* shorter than it was: read what is there */
        done += (size_t)n;
    }
    *ret_mem = mem;
    *ret_len = done;
    return 0;
}

int prof_region_recover_file(const char *path, const char *out_path, struct prof_recovery *ret,
                             char *error, size_t error_size)
{
    struct prof_symbols *symbols = NULL;
    struct prof_symbolizer symbolizer;
    struct json_writer *w = NULL;
    uint8_t *mem = NULL;
    size_t len = 0;
    struct fleetprof_outfile out = {.fd = -1};
    int fd, r;

    error[0] = '\0';
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        r = -errno;
        (void)snprintf(error, error_size, "cannot open %s: %s", path, strerror(-r));
        return r;
    }
    r = prof_region_read_whole(fd, MAX_REGION_BYTES, &mem, &len);
    (void)close(fd);
    if (r < 0) {
        (void)snprintf(error, error_size, "cannot read %s: %s", path, strerror(-r));
        return r;
    }
    r = fleetprof_outfile_open(&out, out_path);
    if (r < 0) {
        (void)snprintf(error, error_size, "cannot create a file next to %s: %s", out_path,
                       strerror(-r));
        goto out;
    }
    r = prof_symbols_new(0, &symbols);
    if (r == 0)
        r = json_writer_new_fd(out.fd, &w);
    if (r < 0) {
        (void)snprintf(error, error_size, "cannot start: %s", strerror(-r));
        goto out;
    }
    symbolizer = prof_symbolizer_local(symbols);
    r = prof_region_recover(mem, len, "chunk file", &symbolizer, w, ret);
    if (r == 0)
        r = json_writer_finish(w);
    if (r == -EBADMSG)
        (void)snprintf(error, error_size,
                       "%s is not a chunk file a profiled process left (no region header)", path);
    else if (r < 0)
        (void)snprintf(error, error_size, "cannot recover %s: %s", path, strerror(-r));
    if (r == 0) {
        r = fleetprof_outfile_commit(&out, 0);
        if (r < 0)
            (void)snprintf(error, error_size, "cannot write %s: %s", out_path, strerror(-r));
    }
out:
    fleetprof_outfile_abort(&out);
    json_writer_free(w);
    prof_symbols_free(symbols);
    free(mem);
    return r;
}

/* ---- a short-lived process's exit profile, left in its region -------------------------- */

/* What is copied of such a region at most, in bytes of blocks: a child leaves its exit
 * profile there with at most 256 KiB in its buffer (child/lifecycle/runtime.c), which can lie
 * in two chunks of 256 KiB. A child that claims more is told off, not served: it would cost
 * a worker's memory and time the child should have spent itself. */
#define EXIT_REGION_MAX_BYTES (512u << 10)

#define EXIT_REGION_MAX_SLOTS 16u /* slots in use: 256 KiB of buffer spans at most 2 or 3 */
/* The compact copy at most (16 slots of 4 MiB chunks). */
#define EXIT_IMAGE_MAX_BYTES  ((uint64_t)80 << 20)

/* Reads len bytes at off into buf; what the file does not have reads as zeros (the scratch
 * buffer must never show a previous child's bytes). */
static void read_at(int fd, uint8_t *buf, size_t len, uint64_t off)
{
    size_t done = 0;

    while (done < len) {
        ssize_t n = pread(fd, buf + done, len - done, (off_t)(off + done));

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    memset(buf + done, 0, len - done);
}

/* The parts of a region in use, copied into a compact private image that the region reader
 * takes as a region: the header page, the current description, and the slots in use, each
 * with its headers and its blocks up to the last one. A child's two 1 MiB description areas
 * and its unused slots are not read. The image lives in the caller's scratch buffer (kept from
 * one build to the next: no allocation, mapping or page fault per child once warm); its header
 * is rewritten for the compact layout (description areas of the current description's size,
 * slots one after the other), and bytes past a slot's last block are left as they are: the
 * block walker never reads past past_last_block_offset. The copy is trusted no more than a
 * whole one (build_image() checks it all). */
static int read_in_use(int fd, uint64_t limit, uint8_t **scratch, size_t *scratch_cap,
                       uint8_t **ret_mem, size_t *ret_len)
{
    const size_t head = BUF_REGION_CHUNK_OFFSET + BUF_CHUNK_HEADER_BYTES;
    uint8_t page[BUF_REGION_PAGE_BYTES] = {0};
    uint8_t heads[EXIT_REGION_MAX_SLOTS][BUF_REGION_CHUNK_OFFSET + BUF_CHUNK_HEADER_BYTES];
    uint64_t offs[EXIT_REGION_MAX_SLOTS];
    uint32_t used[EXIT_REGION_MAX_SLOTS];
    struct buf_region_header h;
    struct stat st;
    uint64_t slots, copied = 0, meta_room, total;
    uint32_t meta_len = 0, file_meta_bytes;
    unsigned area, n = 0;
    uint8_t *img;

    if (fstat(fd, &st) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < BUF_REGION_PAGE_BYTES)
        return -EBADMSG;
    if ((uint64_t)st.st_size > limit)
        return -EFBIG;
    read_at(fd, page, sizeof(page), 0);
    if (buf_region_read_header(page, (size_t)st.st_size, &h) < 0)
        return -EBADMSG;
    area = (unsigned)(h.meta_seq & 1);
    if (h.meta_seq && h.meta_len[area] <= h.meta_bytes)
        meta_len = h.meta_len[area];
    slots = ((uint64_t)st.st_size - h.header_bytes) / h.slot_bytes;
    if (slots > BUF_REGION_MAX_SLOTS)
        slots = BUF_REGION_MAX_SLOTS;
    for (uint64_t i = 0; i < slots; i++) {
        uint64_t off = h.header_bytes + i * h.slot_bytes;
        struct buf_region_slot sh;
        struct buf_chunk_header ch;

        if (n == EXIT_REGION_MAX_SLOTS)
            return -E2BIG;
        read_at(fd, heads[n], head, off);
        memcpy(&sh, heads[n], sizeof(sh));
        memcpy(&ch, heads[n] + BUF_REGION_CHUNK_OFFSET, sizeof(ch));
        if (sh.magic != BUF_REGION_SLOT_MAGIC || ch.magic != BUF_CHUNK_MAGIC || ch.range_start == 0)
            continue; /* never used, destroyed, recycled or not a chunk: the reader skips it */
        offs[n] = off;
        used[n] = ch.past_last_block_offset < h.chunk_bytes ? ch.past_last_block_offset
                                                            : h.chunk_bytes;
        copied += used[n];
        if (copied > EXIT_REGION_MAX_BYTES)
            return -E2BIG;
        n++;
    }

    /* The compact layout: the description in its area, both areas as big as it is. A slot
     * is its chunk and a page or two of headers (buffer/region.c rounds it to pages); one
     * that claims more would only make the scratch buffer big. */
    meta_room = (meta_len + 7u) & ~(uint64_t)7u;
    total = BUF_REGION_PAGE_BYTES + 2 * meta_room + (uint64_t)n * h.slot_bytes;
    if ((uint64_t)h.slot_bytes > (uint64_t)h.chunk_bytes + 2 * (uint64_t)sysconf(_SC_PAGESIZE) ||
        total > EXIT_IMAGE_MAX_BYTES)
        return -E2BIG;
    if (total > *scratch_cap) {
        if (fleetprof_resize((void **)scratch, (size_t)total, 1) < 0)
            return -ENOMEM;
        *scratch_cap = (size_t)total;
    }
    img = *scratch;
    file_meta_bytes = h.meta_bytes;
    h.meta_bytes = (uint32_t)meta_room;
    h.header_bytes = (uint32_t)(BUF_REGION_PAGE_BYTES + 2 * meta_room);
    h.meta_len[area ^ 1u] = 0; /* the previous description is not copied */
    h.meta_hash[area ^ 1u] = 0;
    memcpy(page, &h, sizeof(h));
    memcpy(img, page, sizeof(page));
    read_at(fd, img + BUF_REGION_PAGE_BYTES + area * meta_room, meta_len,
            BUF_REGION_PAGE_BYTES + (uint64_t)area * file_meta_bytes);
    for (unsigned j = 0; j < n; j++) {
        uint8_t *slot = img + h.header_bytes + (uint64_t)j * h.slot_bytes;

        memcpy(slot, heads[j], head);
        read_at(fd, slot + head, used[j], offs[j] + head);
    }
    *ret_mem = img;
    *ret_len = (size_t)total;
    return 0;
}

int prof_region_exit_profile(int fd, uint64_t limit, uint8_t **scratch, size_t *scratch_cap,
                             const struct prof_region_groups *groups,
                             const struct prof_symbolizer *symbolizer, struct json_writer *w,
                             struct prof_recovery *ret)
{
    uint8_t *mem = NULL;
    size_t len = 0;
    int r = read_in_use(fd, limit, scratch, scratch_cap, &mem, &len);

    return r < 0 ? r : build_image(mem, len, NULL, groups, symbolizer, w, ret);
}
