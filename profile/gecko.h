/* profile/gecko.h - one process's buffer entries -> one Gecko process profile (JSON).
 *
 * Pure function of its inputs: the entries (read from a chunked buffer), a description of
 * the process, and a symbolizer. No runtime state, no threads: the child's gather thread
 * calls it for its own profile, the daemon for a crashed child's chunks. Output follows
 * shared/gecko-format.md (version 36): full meta (with meta.fleetprof: pid, exit, the
 * performance groups' totals), libs, threads (main thread "GeckoMain"; an empty one when
 * none is registered but counters exist, which the front-end shows only with one), counters,
 * profilerOverhead, pausedRanges, sources, profilingLog, processes: [].
 */
#ifndef FLEETPROF_PROFILE_GECKO_H
#define FLEETPROF_PROFILE_GECKO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct buf_chunked_buffer;
struct json_writer;
struct progress_logger;
struct prof_lib;
struct prof_group_totals;
struct prof_libs;

/* Categories, by index into meta.categories; the public enum fleetprof_category
 * (child/include/fleetprof.h) uses the same numbers. */
enum prof_category {
    PROF_CATEGORY_OTHER = 0, /* grey: the default */
    PROF_CATEGORY_IDLE,      /* transparent */
    PROF_CATEGORY_NATIVE,    /* yellow: native frames ("User" in perf imports) */
    PROF_CATEGORY_IO,        /* lightblue */
    PROF_CATEGORY_NETWORK,   /* blue */
    PROF_CATEGORY_MEMORY,    /* orange */
    PROF_CATEGORY_LOCK,      /* red */
    PROF_CATEGORY_APP,       /* green: labels and markers of the program */
    PROF_CATEGORY_PROFILER,  /* magenta: fleetprof's own activity */
    PROF_CATEGORY_COUNT,
};

struct prof_thread_info {
    int32_t tid;
    const char *name;       /* written as "GeckoMain" for the main thread */
    uint64_t register_ns;   /* CLOCK_MONOTONIC */
    uint64_t unregister_ns; /* 0 = still alive */
    bool is_main;
};

struct prof_counter_info {
    uint32_t id; /* as in COUNTER entries */
    const char *name;
    const char *category; /* Gecko counter category: "Memory", "Bandwidth", ... */
    const char *description;
};

struct prof_schema_field {
    const char *key;
    const char *label;
    const char *format; /* Gecko field format: "string", "integer", "bytes", "duration", ... */
    bool searchable;
};

struct prof_marker_schema {
    uint32_t id; /* as in TYPED marker payloads */
    const char *name;
    const char *tooltip_label; /* templates like "{marker.data.label}"; may be NULL */
    const char *table_label;
    const char *chart_label;
    const struct prof_schema_field *fields;
    size_t field_count;
};

struct prof_runtime_log;

struct prof_process_info {
    int32_t pid;
    int32_t ppid;
    bool forked;              /* a fork of its parent's image, not exec'd since */
    const char *name;         /* program name: processName of the GeckoMain thread */
    const char *product;      /* command line: meta.product */
    const char *process_type; /* thread processType: "default" (top level) or "tab" */
    uint64_t start_ns;        /* CLOCK_MONOTONIC of meta.startTime; all times relative */
    double start_epoch_ms;    /* meta.startTime, ms since the Unix epoch */
    uint64_t shutdown_ns;     /* 0 = still running (meta.shutdownTime null) */
    uint64_t interval_ns;
    const char *stackwalk; /* "fp", "dwarf" or "copy" */
    const struct prof_thread_info *threads;
    size_t thread_count;
    const struct prof_counter_info *counters;
    size_t counter_count;
    const struct prof_marker_schema *schemas;
    size_t schema_count;
    const struct prof_libs *libs;           /* loaded modules: address lookup and `libs` */
    const char *runtime_log_json;           /* optional JSON object: profilingLog[pid].runtime */
    const struct prof_group_totals *groups; /* performance groups' totals (groups.h):
                                             * meta.fleetprof.groups, when group_count > 0 */
    size_t group_count;
    uint64_t slow_event_ns; /* groups' slow-event threshold; 0 = unknown */
    bool exit_profile;      /* written as the process ends: meta.fleetprof.exit */
    const char *recovered;  /* NULL, or how the chunks of a dead process were read back:
                             * meta.fleetprof.recovered */
    const char *execd_into; /* NULL, or the program this image exec'd into, where it ended
                             * (its life before the exec): meta.fleetprof.execdInto */
    /* Of a description kept in a chunk region (the runtime's, packed as a
     * ProcessDescription): when it was taken, and with shutdown_ns, the runtime's numbers
     * for profilingLog. Not written by prof_gecko_write_process(). */
    uint64_t described_ns;
    const struct prof_runtime_log *runtime_log;
    /* The stacks the runtime's timers captured (runtime.handlerCaptures), 0 = not known:
     * with the CPU time the samples carry, the interval measured
     * (profilingLog[pid].measuredIntervalMs): a CPU timer fires at the kernel's tick, not
     * at interval_ns. */
    uint64_t timer_captures;
};

/* Symbolization in batches: one call per profile with every unique address, so that a
 * child connected to the daemon asks once (design §4 "Symbols"). */
struct prof_frame_request {
    const struct prof_lib *lib; /* module containing the address */
    uint64_t vaddr;             /* ELF address in lib, already -1 for return addresses */
};

struct prof_frame_result {
    const char *function; /* NULL: no symbol covers it (written "<module>+0x<offset>") */
    const char *file;     /* may be NULL */
    uint32_t line;        /* 0 = unknown */
};

struct prof_symbolizer {
    /* Fills results[i] for requests[i]; strings must stay valid until the write returns.
     * Returns 0 or a negative errno (then every frame stays unresolved). */
    int (*resolve)(void *userdata, const struct prof_frame_request *requests, size_t count,
                   struct prof_frame_result *results);
    void *userdata;
};

/* How a native frame is named: the location string of its frameTable row
 * (shared/gecko-format.md section 6; docs/user-guide.md section 1):
 *
 *   "<function> (in <module>)"                a symbol covers the address
 *   "<module>+0x<offset> (in <module>)"       inside a known module, no symbol covers it
 *                                             (stripped code, local functions of the vdso)
 *   "<module>+0x<offset> (called from <caller>) (in <module>)"
 *                                             the same, with the function it was called
 *                                             from (the writer gives one only for the vdso)
 *   "0x<address>"                             in no known module (JIT code, a broken walk):
 *                                             the front-end's unsymbolicated form
 *
 * offset is the address in the module's ELF address space (runtime address - load bias;
 * for a caller frame the return address - 1, inside the call), in lowercase hex: what
 * `addr2line -e MODULE`, `objdump -d` and `nm` take. For shared objects and PIE programs
 * it is the distance from where the module was loaded. The " (in <module>)" suffix keeps
 * the frame in its library for the front-end and `fleetprof summary`.
 *
 * The runtime's own frames (a module whose name starts with "libfleetprof") are profiler
 * overhead: the writer puts a label-like pseudo-frame "fleetprof" (category Profiler) just
 * above the outermost of them in each stack, and gives that frame and every frame below it
 * toward the leaf (the runtime's, the libc it calls, labels) the Profiler category; the
 * program's frames above keep theirs:
 *   main;work;fleetprof_group_end;commit_event -> main;work;fleetprof;fleetprof_group_end;...
 * By module name, not by address: the daemon writes the profiles of dead children too. */
struct prof_frame_name {
    const char *function; /* the covering symbol, or NULL */
    const char *module;   /* basename of the module containing the address ("[vdso]"), or
                           * NULL when no known module contains it */
    uint64_t offset;      /* ELF address in module; used without function */
    const char *caller;   /* the named function this code was called from, or NULL; used
                           * without function */
    uint64_t address;     /* runtime address; used without module */
};

/* Formats name as above (just "<function>" when a function has no module) into buf, at
 * most buf_size bytes including the NUL. Returns the string's length, -ENOSPC when it did
 * not fit (buf then holds a truncated, NUL-terminated prefix), or -EINVAL (name or buf
 * NULL, buf_size 0). */
int prof_frame_format_location(const struct prof_frame_name *name, char *buf, size_t buf_size);

/* Writes the meta keys every process of a fleet profile must share: "sampleUnits" and
 * "categories" (the front-end reads per-thread data with the top level's list). */
void prof_gecko_write_shared_meta(struct json_writer *w);

/* Writes an empty "sources" table (mandatory since format version 33). */
void prof_gecko_write_empty_sources(struct json_writer *w);

/* Writes the process profile (one JSON object) as the next value of w (a key must be
 * passed when w is inside an object). Reads the buffer once. Reports progress through
 * progress (may be NULL). Returns 0, or the first negative errno (the writer's latch, or
 * -ENOMEM); entries that fail to decode are skipped and counted in profilingLog. */
int prof_gecko_write_process(struct json_writer *w, const char *key,
                             const struct prof_process_info *info,
                             struct buf_chunked_buffer *buffer,
                             const struct prof_symbolizer *symbolizer,
                             const struct progress_logger *progress);

#endif /* FLEETPROF_PROFILE_GECKO_H */
