/* profile/gecko.c - buffer entries -> one Gecko process profile (see gecko.h).
 *
 * One pass over the buffer builds, per thread: a frame table keyed by address (or label),
 * a stack table keyed by (prefix, frame), and the rows of its samples and markers, written
 * at once into memory writers. Stack indexes never depend on symbols (labels were placed
 * by the sampler), so symbolization can wait: after the pass every unique address is
 * resolved in one batch, then each thread's tables are written and its rows spliced in.
 * Format: shared/gecko-format.md; every rule in its section 13 is checked by the tests.
 */
#include "profile/gecko.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "buffer/chunked-buffer.h"
#include "buffer/entry.h"
#include "buffer/progress.h"
#include "common/grow.h"
#include "common/hash.h"
#include "common/map.h"
#include "json/writer.h"
#include "profile/entries.h"
#include "profile/groups.h"
#include "profile/libs.h"

#define GECKO_VERSION 36
#define NO_INDEX      UINT32_MAX

/* The runtime's own code: frames in a module whose name starts with this (libfleetprof.so,
 * libfleetprof.so.0.1.0; the runtime is always a shared object, linked or preloaded). The
 * module's name, not our own address: the daemon writes the profiles of dead children. */
#define RUNTIME_MODULE_PREFIX "libfleetprof"
/* The pseudo-frame put above the outermost frame of the runtime in a stack. */
#define RUNTIME_FRAME_NAME    "fleetprof"
/* In a frame-table key: a native frame under the runtime's pseudo-frame, which gets the
 * Profiler category (the same address elsewhere keeps its own). native_key() never sets it;
 * user-space addresses are far below it on every 64-bit architecture Linux runs. */
#define UNDER_RUNTIME_KEY     (1ull << 62)
/* In a frame-table value: the frame is code of the runtime's module. Kept in the map (its
 * slot is read anyway), not in struct gframe: one load less per frame of every stack. */
#define RUNTIME_FRAME_BIT     (1u << 31)
/* In prefix_next_label[]: the runtime's pseudo-frame is in the stack at that depth. */
#define PREFIX_UNDER_RUNTIME  0x80u
_Static_assert(PROF_MAX_LABELS < PREFIX_UNDER_RUNTIME, "label counts share a byte with the bit");

/* Marker names up to this long are remembered per thread (struct gthread). */
#define MARKER_NAME_CACHE_BYTES 64
/* Text payloads up to this long take the one-call path of add_marker(). */
#define MARKER_FAST_TEXT_BYTES  512

static const struct {
    const char *name, *color;
} categories[PROF_CATEGORY_COUNT] = {
        [PROF_CATEGORY_OTHER] = {"Other", "grey"},
        [PROF_CATEGORY_IDLE] = {"Idle", "transparent"},
        [PROF_CATEGORY_NATIVE] = {"Native", "yellow"},
        [PROF_CATEGORY_IO] = {"I/O", "lightblue"},
        [PROF_CATEGORY_NETWORK] = {"Network", "blue"},
        [PROF_CATEGORY_MEMORY] = {"Memory", "orange"},
        [PROF_CATEGORY_LOCK] = {"Lock", "red"},
        [PROF_CATEGORY_APP] = {"Application", "green"},
        [PROF_CATEGORY_PROFILER] = {"Profiler", "magenta"},
};

/* Interns an integer key of a map from keys to indexes: returns 1 when it was added with
 * the value fresh (the next index), 0 when found, or -ENOMEM; *ret_value is set to either. */
static inline int intern_index(struct fleetprof_map *m, uint64_t key, size_t fresh,
                               uint32_t *ret_value)
{
    uint64_t value;
    int r = fleetprof_map_intern(m, fleetprof_map_mix64(key), NULL, NULL, NULL, fresh, &value);

    if (r >= 0)
        *ret_value = (uint32_t)value;
    return r;
}

struct gframe {
    uint64_t address;    /* as captured (0 for labels) */
    uint32_t request;    /* index into the symbolization batch, or NO_INDEX */
    uint32_t label_name; /* string index, labels only */
    uint32_t category;
    bool is_label;
};

struct gstack {
    uint32_t prefix; /* NO_INDEX = root */
    uint32_t frame;
};

/* Label names of a remembered stack prefix (struct gthread) take at most this many bytes. */
#define PREFIX_LABEL_BYTES 1024

struct gprefix_label {
    uint32_t category;
    uint32_t native_depth;
    uint32_t name_len;
};

/* A sample stack known by its encoded bytes (see add_known_sample). */
struct gknown {
    size_t offset;        /* of its bytes in known_bytes */
    uint32_t len;         /* bytes */
    uint32_t stack;       /* the stack built for them */
    uint32_t label_count; /* labels merged into it */
};

/* Encoded sample stacks remembered take at most this many bytes in a whole process, their
 * index included: stacks that repeat are met early, and a process whose stacks never repeat
 * would only fill it. Later ones are built each time: the profile is the same, only slower. */
#define KNOWN_STACK_BYTES    (4u << 20)
/* What one remembered stack costs besides its bytes: its gknown, and two map slots (the
 * map is at most half full). */
#define KNOWN_STACK_OVERHEAD (sizeof(struct gknown) + 2 * sizeof(struct fleetprof_map_slot))
/* After this many samples not found among the remembered stacks, fewer than one hit in four
 * turns the remembering off for the process: a miss costs a hash, a lookup and a copy, and
 * with no stack ever repeated (bench-gecko's samples with a unique frame each) the writer
 * was ~30 % slower than building alone. */
#define KNOWN_STACK_TRIAL    2048

struct gthread {
    int32_t tid;
    const struct prof_thread_info *info; /* NULL: seen only in entries */
    bool stand_in_main; /* an empty "GeckoMain" made so that the counters show (see below) */
    struct json_unique_strings *strings;
    struct fleetprof_map frame_map;
    struct gframe *frames;
    size_t frame_count, frame_cap;
    struct fleetprof_map stack_map;
    struct gstack *stacks;
    size_t stack_count, stack_cap;
    struct json_writer *samples; /* an open array of rows */
    struct json_writer *markers; /* an open array of rows */
    uint32_t last_stack;         /* for same-samples; NO_INDEX = none yet */
    /* The last stack built here, root first: the frame key at each native depth, the stack
     * index and the count of labels merged in up to there, and its labels. Consecutive
     * samples share most of their stack, and that shared prefix needs no lookups. */
    uint32_t prefix_depth;
    uint32_t prefix_label_count; /* NO_INDEX: none remembered */
    uint64_t prefix_key[PROF_MAX_FRAMES];
    uint32_t prefix_stack[PROF_MAX_FRAMES];
    /* Labels merged in (at most PROF_MAX_LABELS), | PREFIX_UNDER_RUNTIME from the outermost
     * frame of the runtime on (the pseudo-frame is in the stack from there). */
    uint8_t prefix_next_label[PROF_MAX_FRAMES];
    struct gprefix_label prefix_labels[PROF_MAX_LABELS];
    char prefix_label_names[PREFIX_LABEL_BYTES];
    uint64_t last_sample_ns;
    /* Stacks of samples by the bytes that encode their frames and labels: a thread mostly
     * repeats a few stacks, and a known one needs neither decoding nor lookups. */
    struct fleetprof_map known_map; /* hash of the bytes -> index in known[] */
    struct gknown *known;
    size_t known_count, known_cap;
    uint8_t *known_bytes; /* owned */
    size_t known_bytes_used, known_bytes_cap;
    /* The last marker name and its string index: a thread mostly repeats one name, and a
     * compare is cheaper than hashing it again. len MARKER_NAME_CACHE_BYTES + 1 = none. */
    size_t marker_name_len;
    uint32_t marker_name_index;
    char marker_name[MARKER_NAME_CACHE_BYTES];
};

struct gcounter {
    struct json_writer *rows; /* NULL until the first sample */
    uint64_t last_ns;         /* time of the last row: rows never go back in time */
};

/* A track's label in the front-end (processName): the program and its arguments, this long
 * at most: git's eight processes read "git pack-objects --all…", not "git" eight times. */
#define PROCESS_NAME_MAX 80

struct gecko {
    const struct prof_process_info *info;
    char process_name[PROCESS_NAME_MAX + 4]; /* + "…" and NUL */
    const struct progress_logger *progress;
    struct gthread *threads;
    size_t thread_count, thread_cap;
    struct fleetprof_map request_map; /* normalized address -> request index */
    struct prof_frame_request *requests;
    size_t request_count, request_cap;
    struct prof_frame_result *results;
    const char **callers; /* per request: the vdso function unnamed vdso code was called
                           * from, or NULL (see find_vdso_callers); NULL when none */
    struct gcounter *counters;
    struct json_writer *overhead; /* open array of rows */
    uint64_t last_overhead_ns;    /* rows never go back in time */
    uint64_t *pauses;             /* pairs (start, end); end 0 = open */
    size_t pause_count, pause_cap;
    uint64_t range_start, range_span;
    uint64_t entries, decode_errors, unknown_kinds, samples, same_samples, markers;
    uint64_t unknown_counters, unresolved_frames, label_frames;
    uint64_t cpu_written_ns; /* the threadCPUDelta of every sample written */
    int symbolizer_error;
    int error;
    /* The stack bytes of the sample entry being read when its thread does not know them yet
     * (add_known_sample), to remember with the stack built; len 0 = none. Borrowed from the
     * block, valid during the read callback. */
    const uint8_t *unknown_bytes;
    size_t unknown_len;
    uint64_t unknown_hash;
    size_t known_bytes; /* remembered stacks of all threads, with KNOWN_STACK_OVERHEAD */
    uint64_t known_hits, known_misses; /* samples found among them, or not */
    bool known_off;          /* too few hits: samples are decoded and built (KNOWN_STACK_TRIAL) */
    struct prof_entry entry; /* decode scratch (large) */
};

static int64_t rel_ns(const struct gecko *g, uint64_t t)
{
    return (int64_t)(t - g->info->start_ns);
}

static int new_array_writer(struct json_writer **ret)
{
    int r = json_writer_new_memory(ret);

    if (r == 0)
        json_writer_array_begin(*ret, NULL);
    return r;
}

static struct gthread *thread_find(struct gecko *g, int32_t tid)
{
    for (size_t i = 0; i < g->thread_count; i++)
        if (g->threads[i].tid == tid)
            return &g->threads[i];
    return NULL;
}

static struct gthread *thread_for(struct gecko *g, int32_t tid)
{
    struct gthread *t = thread_find(g, tid);

    if (t)
        return t;
    if (fleetprof_grow((void **)&g->threads, &g->thread_cap, g->thread_count + 1, sizeof(*t)) < 0)
        return NULL;
    t = &g->threads[g->thread_count];
    memset(t, 0, sizeof(*t));
    t->tid = tid;
    t->last_stack = NO_INDEX;
    t->marker_name_len = MARKER_NAME_CACHE_BYTES + 1;
    t->prefix_label_count = NO_INDEX;
    for (size_t i = 0; i < g->info->thread_count; i++)
        if (g->info->threads[i].tid == tid)
            t->info = &g->info->threads[i];
    if (json_unique_strings_new(&t->strings) < 0 || new_array_writer(&t->samples) < 0 ||
        new_array_writer(&t->markers) < 0) {
        t->strings = json_unique_strings_free(t->strings);
        t->samples = json_writer_free(t->samples);
        t->markers = json_writer_free(t->markers);
        return NULL;
    }
    g->thread_count++;
    return t;
}

static int intern_string(struct gthread *t, const char *s, size_t len, uint32_t *ret)
{
    return json_unique_strings_index(t->strings, s, len, ret);
}

/* The key of a native frame: the address looked up (return addresses minus 1). */
static inline uint64_t native_key(uint64_t address, bool is_return)
{
    uint64_t lookup = is_return ? address - 1 : address;

    if (lookup == 0 || lookup >> 62) /* not a user-space code address */
        lookup = 1;
    return lookup;
}

static bool is_runtime_module(const struct prof_lib *lib)
{
    return lib && lib->name &&
           strncmp(lib->name, RUNTIME_MODULE_PREFIX, sizeof(RUNTIME_MODULE_PREFIX) - 1) == 0;
}

/* A native frame at lookup = native_key(address, ...), keyed by lookup, or by
 * lookup | UNDER_RUNTIME_KEY under the runtime's pseudo-frame (then in the Profiler
 * category, as the runtime's own frames always are). Returns 1 for code of the runtime's
 * module, 0 for other code, or -ENOMEM. */
static int intern_native(struct gecko *g, struct gthread *t, uint64_t address, uint64_t lookup,
                         bool under_runtime, uint32_t *ret_frame)
{
    uint64_t key = lookup | (uint64_t)under_runtime << 62; /* UNDER_RUNTIME_KEY */
    struct gframe *f;
    uint32_t value;
    int r;

    r = intern_index(&t->frame_map, key, t->frame_count, &value);
    if (r < 0)
        return r;
    *ret_frame = value & ~RUNTIME_FRAME_BIT;
    if (r == 0)
        return value >> 31;
    if (value & RUNTIME_FRAME_BIT) /* 2^31 frames: the map cannot tell them apart */
        return -ENOMEM;
    if (fleetprof_grow((void **)&t->frames, &t->frame_cap, t->frame_count + 1, sizeof(*f)) < 0)
        return -ENOMEM;
    f = &t->frames[t->frame_count++];
    memset(f, 0, sizeof(*f));
    f->address = address;
    f->category = under_runtime ? PROF_CATEGORY_PROFILER : PROF_CATEGORY_NATIVE;
    f->request = NO_INDEX;

    /* One symbolization request per unique address in the whole process. */
    const struct prof_lib *lib = g->info->libs ? prof_libs_lookup(g->info->libs, lookup) : NULL;
    int is_runtime = is_runtime_module(lib);

    if (is_runtime) {
        f->category = PROF_CATEGORY_PROFILER;
        if (fleetprof_map_set(&t->frame_map, fleetprof_map_mix64(key), NULL, NULL, NULL,
                              value | RUNTIME_FRAME_BIT) < 0)
            return -ENOMEM;
    }
    if (lib) {
        uint32_t req;

        r = intern_index(&g->request_map, lookup, g->request_count, &req);
        if (r < 0)
            return r;
        if (r == 1) {
            if (fleetprof_grow((void **)&g->requests, &g->request_cap, g->request_count + 1,
                               sizeof(*g->requests)) < 0)
                return -ENOMEM;
            g->requests[g->request_count++] = (struct prof_frame_request){lib, lookup - lib->bias};
        }
        f->request = req;
    }
    return is_runtime;
}

/* A label frame; under the runtime's pseudo-frame it is in the Profiler category. */
static int intern_label(struct gthread *t, const struct prof_label *l, bool under_runtime,
                        uint32_t *ret_frame)
{
    uint32_t category = l->category < PROF_CATEGORY_COUNT ? l->category : PROF_CATEGORY_OTHER;
    uint32_t name;
    struct gframe *f;
    int r;

    if (under_runtime)
        category = PROF_CATEGORY_PROFILER;
    r = intern_string(t, l->name.data, l->name.len, &name);
    if (r < 0)
        return r;
    /* Label keys have the top bit set: never a user-space address. */
    r = intern_index(&t->frame_map, (1ull << 63) | ((uint64_t)name << 8) | category, t->frame_count,
                     ret_frame);
    if (r <= 0)
        return r;
    if (fleetprof_grow((void **)&t->frames, &t->frame_cap, t->frame_count + 1, sizeof(*f)) < 0)
        return -ENOMEM;
    f = &t->frames[t->frame_count++];
    memset(f, 0, sizeof(*f));
    f->is_label = true;
    f->label_name = name;
    f->category = category;
    f->request = NO_INDEX;
    return 0;
}

static int intern_stack(struct gthread *t, uint32_t prefix, uint32_t frame, uint32_t *ret_stack)
{
    int r = intern_index(&t->stack_map, (uint64_t)prefix << 32 | frame, t->stack_count, ret_stack);

    if (r <= 0)
        return r;
    if (fleetprof_grow((void **)&t->stacks, &t->stack_cap, t->stack_count + 1, sizeof(*t->stacks)) <
        0)
        return -ENOMEM;
    t->stacks[t->stack_count++] = (struct gstack){prefix, frame};
    return 0;
}

/* Whether labels are those of the thread's remembered stack prefix. */
static bool same_labels(const struct gthread *t, const struct prof_label *labels, uint32_t count)
{
    const char *name = t->prefix_label_names;

    if (count != t->prefix_label_count)
        return false;
    for (uint32_t i = 0; i < count; i++) {
        const struct prof_label *l = &labels[i];
        const struct gprefix_label *p = &t->prefix_labels[i];

        if (l->category != p->category || l->native_depth != p->native_depth ||
            l->name.len != p->name_len || memcmp(l->name.data, name, l->name.len) != 0)
            return false;
        name += p->name_len;
    }
    return true;
}

/* Makes labels those of the remembered prefix (which is then empty). Returns false if they
 * are too long to keep: the next stack is then built without a prefix. */
static bool remember_labels(struct gthread *t, const struct prof_label *labels, uint32_t count)
{
    size_t used = 0;

    t->prefix_depth = 0;
    t->prefix_label_count = NO_INDEX;
    if (count > PROF_MAX_LABELS)
        return false;
    for (uint32_t i = 0; i < count; i++) {
        if (labels[i].name.len > sizeof(t->prefix_label_names) - used)
            return false;
        memcpy(t->prefix_label_names + used, labels[i].name.data, labels[i].name.len);
        used += labels[i].name.len;
        t->prefix_labels[i] = (struct gprefix_label){labels[i].category, labels[i].native_depth,
                                                     (uint32_t)labels[i].name.len};
    }
    t->prefix_label_count = count;
    return true;
}

/* The runtime's frames are the profiler's overhead, not the program's work: the outermost
 * frame of the runtime's module gets the pseudo-frame RUNTIME_FRAME_NAME (Profiler category)
 * as its caller, and it and every frame under it (the runtime's, and the libc it calls)
 * the Profiler category. Appends the pseudo-frame to *stack. */
static int push_runtime_frame(struct gthread *t, uint32_t *stack)
{
    static const struct prof_label runtime = {
            {RUNTIME_FRAME_NAME, sizeof(RUNTIME_FRAME_NAME) - 1}, PROF_CATEGORY_PROFILER, 0, 0, 0};
    uint32_t frame;
    int r = intern_label(t, &runtime, true, &frame);

    return r < 0 ? r : intern_stack(t, *stack, frame, stack);
}

/* Builds the stack of native frames (innermost first) with labels merged in, and the
 * runtime's pseudo-frame above its outermost frame (push_runtime_frame); NO_INDEX for an
 * empty stack. Prefixes always point to earlier stacks (parents first). */
static int build_stack(struct gecko *g, struct gthread *t, const uint64_t *frames,
                       uint32_t frame_count, const struct prof_label *labels, uint32_t label_count,
                       uint32_t *ret_stack)
{
    uint32_t stack = NO_INDEX, frame, next_label = 0, depth = 1;
    bool cacheable = true, under_runtime = false;
    int r;

    /* Reuse the prefix shared with the previous stack of this thread (same labels: they are
     * merged in at the same depths): the stack index, the labels consumed so far, and
     * whether the runtime's pseudo-frame is in it. */
    if (same_labels(t, labels, label_count)) {
        while (depth <= frame_count && depth <= t->prefix_depth &&
               t->prefix_key[depth - 1] ==
                       native_key(frames[frame_count - depth], depth != frame_count))
            depth++;
        if (depth > 1) {
            stack = t->prefix_stack[depth - 2];
            next_label = t->prefix_next_label[depth - 2] & ~PREFIX_UNDER_RUNTIME;
            under_runtime = (t->prefix_next_label[depth - 2] & PREFIX_UNDER_RUNTIME) != 0;
            g->label_frames += next_label;
        }
    } else {
        cacheable = remember_labels(t, labels, label_count);
    }
    /* From here on the remembered prefix is what this stack has in common with it. */
    t->prefix_depth = cacheable ? depth - 1 : 0;
    for (; depth <= frame_count; depth++) {
        uint32_t i = frame_count - depth; /* root first */
        uint64_t key = native_key(frames[i], i != 0);

        r = intern_native(g, t, frames[i], key, under_runtime, &frame);
        if (r < 0)
            return r;
        if (r > 0 && !under_runtime) {
            under_runtime = true;
            r = push_runtime_frame(t, &stack);
            if (r < 0)
                return r;
        }
        r = intern_stack(t, stack, frame, &stack);
        if (r < 0)
            return r;
        while (next_label < label_count && labels[next_label].native_depth != 0 &&
               labels[next_label].native_depth <= depth) {
            r = intern_label(t, &labels[next_label++], under_runtime, &frame);
            if (r < 0)
                return r;
            r = intern_stack(t, stack, frame, &stack);
            if (r < 0)
                return r;
            g->label_frames++;
        }
        if (cacheable) {
            t->prefix_key[depth - 1] = key;
            t->prefix_stack[depth - 1] = stack;
            t->prefix_next_label[depth - 1] =
                    (uint8_t)(next_label | (under_runtime ? PREFIX_UNDER_RUNTIME : 0));
            t->prefix_depth = depth;
        }
    }
    /* Labels whose function was not found go on top: they are active at the sample. */
    while (next_label < label_count) {
        r = intern_label(t, &labels[next_label++], under_runtime, &frame);
        if (r < 0)
            return r;
        r = intern_stack(t, stack, frame, &stack);
        if (r < 0)
            return r;
        g->label_frames++;
    }
    *ret_stack = stack;
    return 0;
}

static void write_stack_or_null(struct json_writer *w, uint32_t stack)
{
    if (stack == NO_INDEX)
        json_writer_null(w, NULL);
    else
        json_writer_uint(w, NULL, stack);
}

static char *put_stack_or_null(char *p, uint32_t stack)
{
    if (stack != NO_INDEX)
        return json_raw_uint(p, stack);
    memcpy(p, "null", 4);
    return p + 4;
}

/* Why a sample has no stack, as a pseudo-frame of its own, so a user sees the cause in
 * the call tree rather than an unexplained gap; NULL when it has one. */
static const char *no_stack_reason(const struct prof_sample *s, uint32_t *ret_category)
{
    *ret_category = PROF_CATEGORY_PROFILER;
    if (s->frame_count > 0 || s->label_count > 0)
        return NULL;
    if (s->flags & PROF_SAMPLE_BLOCKED_SINCE_START) {
        *ret_category = PROF_CATEGORY_IDLE;
        return "(no stack: blocked since the thread started)";
    }
    if (s->flags & PROF_SAMPLE_ENDED_UNSAMPLED)
        return "(no stack: the thread ended before its first sample)";
    if (s->flags & PROF_SAMPLE_NO_TIMER)
        return "(no stack: the kernel gave the thread no CPU timer (RLIMIT_SIGPENDING or perf "
               "limits): see profilingLog)";
    if (s->flags & PROF_SAMPLE_SIGNAL_BLOCKED)
        return "(no stack: the thread blocks SIGPROF)";
    if (s->flags & PROF_SAMPLE_BELOW_PERIOD)
        return "(no stack: the thread ran less than one sampling period)";
    if (s->flags & PROF_SAMPLE_BEFORE_START)
        return "(no stack: before the profiler started: the fork or exec, loading, start-up)";
    if (s->flags & PROF_SAMPLE_NO_NATIVE)
        return "(no stack: interrupted in the dynamic loader)";
    if (s->flags & PROF_SAMPLE_UNWIND_FAIL)
        return "(no stack: unwinding failed)";
    /* The runtime always walks at least the interrupted frame, or gives one of the reasons
     * above: an entry with neither comes from damaged chunks, or a runtime that wrote none. */
    return "(no stack: none recorded)";
}

/* Appends the row [stack|null, time, eventDelay 0, threadCPUDelta] in one call. */
static int write_sample_row(struct gecko *g, struct gthread *t, uint32_t stack, uint64_t time_ns,
                            uint64_t cpu_delta_ns)
{
    uint64_t time;
    char *p;

    /* The front-end stores time deltas and never re-sorts: keep them non-decreasing. */
    time = time_ns < t->last_sample_ns ? t->last_sample_ns : time_ns;
    t->last_sample_ns = time;
    g->cpu_written_ns += cpu_delta_ns;
    p = json_writer_raw_begin(t->samples, NULL, 3 * JSON_RAW_NUMBER_BYTES + 8);
    if (!p)
        return json_writer_error(t->samples);
    *p++ = '[';
    p = put_stack_or_null(p, stack);
    *p++ = ',';
    p = json_raw_time_ms(p, rel_ns(g, time));
    memcpy(p, ",0,", 3);
    p = json_raw_uint(p + 3, cpu_delta_ns);
    *p++ = ']';
    json_writer_raw_end(t->samples, p);
    return 0;
}

/* Turns the remembering off for the rest of the profile, and frees what it kept. */
static void forget_known(struct gecko *g)
{
    for (size_t i = 0; i < g->thread_count; i++) {
        struct gthread *t = &g->threads[i];

        fleetprof_map_free(&t->known_map);
        free(t->known);
        free(t->known_bytes);
        t->known = NULL;
        t->known_bytes = NULL;
        t->known_count = t->known_cap = t->known_bytes_used = t->known_bytes_cap = 0;
    }
    g->known_off = true;
}

/* A sample whose frames and labels its thread has seen encoded by the same bytes gets the
 * stack built then: same bytes decode to the same frames and labels, and building is
 * deterministic. Only stacks that build_stack() made are remembered (remember_known), so a
 * hit never skips the checks of a damaged entry: its bytes once decoded without error.
 * Returns 1 when the sample was written, 0 to decode it (with its bytes noted in
 * g->unknown_* when its thread may remember them), or -ENOMEM. Not inlined: on_entry()
 * stays as small for the other entries. */
static __attribute__((noinline)) int add_known_sample(struct gecko *g,
                                                      struct buf_entry_reader *reader)
{
    const struct gknown *k = NULL;
    struct prof_sample head;
    const uint8_t *bytes;
    struct gthread *t;
    size_t len;
    uint64_t hash, index;
    bool found;
    int r;

    if (prof_entry_decode_sample_head(reader, &head, &bytes, &len) < 0)
        return 0; /* another kind, straddling, or damaged: the full decoder decides */
    /* Found, not made: an entry that then fails to decode must not add a thread. */
    t = thread_find(g, head.tid);
    if (!t)
        return 0;
    hash = fleetprof_hash64(bytes, len);
    found = fleetprof_map_find(&t->known_map, fleetprof_map_mix64(hash), NULL, NULL, NULL, &index);
    if (found)
        k = &t->known[index];
    if (!k || k->len != len || memcmp(t->known_bytes + k->offset, bytes, len) != 0) {
        if (++g->known_misses >= KNOWN_STACK_TRIAL && g->known_hits < g->known_misses / 4) {
            forget_known(g);
            return 0;
        }
        if (!found) { /* else another stack with the same hash: built each time */
            g->unknown_bytes = bytes;
            g->unknown_len = len;
            g->unknown_hash = hash;
        }
        return 0;
    }
    g->known_hits++;
    t->last_stack = k->stack;
    g->label_frames += k->label_count;
    g->samples++;
    r = write_sample_row(g, t, k->stack, head.time_ns, head.cpu_delta_ns);
    return r < 0 ? r : 1;
}

/* Remembers the stack just built for the bytes add_known_sample() noted. Out of memory only
 * ends the remembering: the profile is the same without it. */
static void remember_known(struct gecko *g, struct gthread *t, uint32_t stack, uint32_t label_count)
{
    size_t len = g->unknown_len;
    uint32_t index;

    if (len == 0 || len + KNOWN_STACK_OVERHEAD > KNOWN_STACK_BYTES - g->known_bytes)
        return;
    if (fleetprof_grow((void **)&t->known, &t->known_cap, t->known_count + 1, sizeof(*t->known)) <
                0 ||
        fleetprof_grow((void **)&t->known_bytes, &t->known_bytes_cap, t->known_bytes_used + len,
                       1) < 0)
        return;
    if (intern_index(&t->known_map, g->unknown_hash, t->known_count, &index) != 1)
        return;
    memcpy(t->known_bytes + t->known_bytes_used, g->unknown_bytes, len);
    t->known[t->known_count++] =
            (struct gknown){t->known_bytes_used, (uint32_t)len, stack, label_count};
    t->known_bytes_used += len;
    g->known_bytes += len + KNOWN_STACK_OVERHEAD;
}

static int add_sample(struct gecko *g, const struct prof_sample *s, bool same)
{
    struct gthread *t = thread_for(g, s->tid);
    uint32_t stack;
    int r;

    if (!t)
        return -ENOMEM;
    if (same) {
        stack = t->last_stack;
        g->same_samples++;
    } else {
        uint32_t category;
        const char *reason = no_stack_reason(s, &category);

        if (reason) {
            struct prof_label l = {{reason, strlen(reason)}, category, 0, 0, 0};
            uint32_t frame;

            r = intern_label(t, &l, false, &frame);
            if (r == 0)
                r = intern_stack(t, NO_INDEX, frame, &stack);
        } else {
            r = build_stack(g, t, s->frames, s->frame_count, s->labels, s->label_count, &stack);
            if (r == 0)
                remember_known(g, t, stack, s->label_count);
        }
        if (r < 0)
            return r;
        t->last_stack = stack;
        g->samples++;
    }
    return write_sample_row(g, t, stack, s->time_ns, s->cpu_delta_ns);
}

/* intern_string() for marker names, remembering the last one of the thread. */
static int intern_marker_name(struct gthread *t, const struct prof_string *name, uint32_t *ret)
{
    int r;

    if (name->len == t->marker_name_len && memcmp(name->data, t->marker_name, name->len) == 0) {
        *ret = t->marker_name_index;
        return 0;
    }
    r = intern_string(t, name->data, name->len, ret);
    if (r < 0 || name->len > MARKER_NAME_CACHE_BYTES)
        return r;
    memcpy(t->marker_name, name->data, name->len);
    t->marker_name_len = name->len;
    t->marker_name_index = *ret;
    return 0;
}

static const struct prof_marker_schema *schema_for(const struct gecko *g, uint32_t id)
{
    for (size_t i = 0; i < g->info->schema_count; i++)
        if (g->info->schemas[i].id == id)
            return &g->info->schemas[i];
    return NULL;
}

static int write_typed_fields(struct gthread *t, const struct prof_marker_schema *schema,
                              const struct prof_marker *m)
{
    struct json_writer *w = t->markers;

    for (uint32_t i = 0; i < m->field_count && i < schema->field_count; i++) {
        const struct prof_field *f = &m->fields[i];
        const char *key = schema->fields[i].key;
        uint32_t index;

        switch (f->kind) {
        case PROF_FIELD_INT:
            json_writer_int(w, key, f->v.i);
            break;
        case PROF_FIELD_UINT:
            json_writer_uint(w, key, f->v.u);
            break;
        case PROF_FIELD_DOUBLE:
            json_writer_double(w, key, f->v.d);
            break;
        case PROF_FIELD_STRING:
            /* unique-string fields hold an index into the thread's string table. */
            if (schema->fields[i].format && !strcmp(schema->fields[i].format, "unique-string")) {
                if (intern_string(t, f->v.s.data, f->v.s.len, &index) < 0)
                    return -ENOMEM;
                json_writer_uint(w, key, index);
            } else {
                json_writer_string_len(w, key, f->v.s.data, f->v.s.len);
            }
            break;
        }
    }
    return 0;
}

static int add_marker(struct gecko *g, const struct prof_marker *m)
{
    struct gthread *t = thread_for(g, m->tid);
    const struct prof_marker_schema *schema = NULL;
    struct json_writer *w;
    uint32_t name, stack = NO_INDEX;
    uint64_t time = m->phase == PROF_PHASE_END ? m->end_ns : m->start_ns;
    int r;

    if (!t)
        return -ENOMEM;
    w = t->markers;
    r = intern_marker_name(t, &m->name, &name);
    if (r < 0)
        return r;
    if (m->frame_count > 0) {
        r = build_stack(g, t, m->frames, m->frame_count, NULL, 0, &stack);
        if (r < 0)
            return r;
    }
    if (m->payload_kind == PROF_PAYLOAD_TYPED)
        schema = schema_for(g, m->schema_id);
    g->markers++;

    /* The common rows (no payload, or text, and no stack) in one call; same bytes. */
    if (stack == NO_INDEX && !schema && m->text.len <= MARKER_FAST_TEXT_BYTES) {
        char *p = json_writer_raw_begin(
                w, NULL, 5 * JSON_RAW_NUMBER_BYTES + 40 + JSON_RAW_STRING_BYTES(m->text.len));

        if (!p)
            return json_writer_error(w);
        *p++ = '[';
        p = json_raw_uint(p, name);
        *p++ = ',';
        if (m->phase == PROF_PHASE_END) {
            memcpy(p, "null", 4);
            p += 4;
        } else {
            p = json_raw_time_ms(p, rel_ns(g, m->start_ns));
        }
        *p++ = ',';
        if (m->phase == PROF_PHASE_INTERVAL || m->phase == PROF_PHASE_END) {
            p = json_raw_time_ms(p, rel_ns(g, m->end_ns));
        } else {
            memcpy(p, "null", 4);
            p += 4;
        }
        *p++ = ',';
        p = json_raw_uint(p, (uint64_t)m->phase);
        *p++ = ',';
        p = json_raw_uint(p, m->category < PROF_CATEGORY_COUNT ? m->category : 0);
        if (m->payload_kind == PROF_PAYLOAD_NONE) {
            memcpy(p, ",null]", 6);
            p += 6;
        } else {
            static const char text_head[] = ",{\"type\":\"Text\",\"name\":";

            memcpy(p, text_head, sizeof(text_head) - 1);
            p = json_raw_string(p + sizeof(text_head) - 1, m->text.data ? m->text.data : "",
                                m->text.len);
            memcpy(p, "}]", 2);
            p += 2;
        }
        json_writer_raw_end(w, p);
        return 0;
    }

    json_writer_array_begin(w, NULL);
    json_writer_uint(w, NULL, name);
    if (m->phase == PROF_PHASE_END)
        json_writer_null(w, NULL);
    else
        json_writer_time_ms(w, NULL, rel_ns(g, m->start_ns));
    if (m->phase == PROF_PHASE_INTERVAL || m->phase == PROF_PHASE_END)
        json_writer_time_ms(w, NULL, rel_ns(g, m->end_ns));
    else
        json_writer_null(w, NULL);
    json_writer_int(w, NULL, m->phase);
    json_writer_uint(w, NULL, m->category < PROF_CATEGORY_COUNT ? m->category : 0);
    if (m->payload_kind == PROF_PAYLOAD_NONE && stack == NO_INDEX) {
        json_writer_null(w, NULL);
    } else {
        json_writer_object_begin(w, NULL);
        if (schema) {
            json_writer_string(w, "type", schema->name);
            r = write_typed_fields(t, schema, m);
            if (r < 0)
                return r;
        } else {
            /* Text, a typed marker whose schema is unknown, or a bare stack. */
            json_writer_string(w, "type", "Text");
            json_writer_string_len(w, "name", m->text.data ? m->text.data : "", m->text.len);
        }
        if (stack != NO_INDEX) {
            json_writer_object_begin(w, "stack");
            json_writer_string(w, "name", "SyncProfile");
            json_writer_null(w, "registerTime");
            json_writer_null(w, "unregisterTime");
            json_writer_string(w, "processType", g->info->process_type);
            json_writer_int(w, "tid", t->tid);
            json_writer_int(w, "pid", g->info->pid);
            json_writer_object_begin(w, "markers");
            json_writer_object_begin(w, "schema");
            json_writer_int(w, "name", 0);
            json_writer_int(w, "startTime", 1);
            json_writer_int(w, "endTime", 2);
            json_writer_int(w, "phase", 3);
            json_writer_int(w, "category", 4);
            json_writer_int(w, "data", 5);
            json_writer_object_end(w);
            json_writer_array_begin(w, "data");
            json_writer_array_end(w);
            json_writer_object_end(w);
            json_writer_object_begin(w, "samples");
            json_writer_object_begin(w, "schema");
            json_writer_int(w, "stack", 0);
            json_writer_int(w, "time", 1);
            json_writer_int(w, "responsiveness", 2);
            json_writer_object_end(w);
            json_writer_array_begin(w, "data");
            json_writer_array_begin(w, NULL);
            json_writer_uint(w, NULL, stack);
            json_writer_time_ms(w, NULL, rel_ns(g, time));
            json_writer_int(w, NULL, 0);
            json_writer_array_end(w);
            json_writer_array_end(w);
            json_writer_object_end(w);
            json_writer_object_end(w);
        }
        json_writer_object_end(w);
    }
    json_writer_array_end(w);
    return json_writer_error(w);
}

static int add_counter(struct gecko *g, const struct prof_counter_sample *c)
{
    struct gcounter *gc;
    int r;

    if (c->counter_id >= g->info->counter_count) {
        g->unknown_counters++;
        return 0;
    }
    gc = &g->counters[c->counter_id];
    if (!gc->rows) {
        r = new_array_writer(&gc->rows);
        if (r < 0)
            return r;
    }
    /* As for samples: the front-end needs sorted times, and entries read back from a dead
     * process's memory may be out of order. */
    if (c->time_ns > gc->last_ns)
        gc->last_ns = c->time_ns;
    json_writer_array_begin(gc->rows, NULL);
    json_writer_time_ms(gc->rows, NULL, rel_ns(g, gc->last_ns));
    json_writer_int(gc->rows, NULL, c->delta);
    json_writer_uint(gc->rows, NULL, c->number);
    json_writer_array_end(gc->rows);
    return json_writer_error(gc->rows);
}

/* Microseconds from nanoseconds, exactly: time_ms prints n / 1e6, so pass ns * 1000. */
static void write_us(struct json_writer *w, uint64_t ns)
{
    json_writer_time_ms(w, NULL, (int64_t)(ns * 1000));
}

static int add_overhead(struct gecko *g, const struct prof_overhead *o)
{
    struct json_writer *w = g->overhead;

    if (o->time_ns > g->last_overhead_ns)
        g->last_overhead_ns = o->time_ns;
    json_writer_array_begin(w, NULL);
    json_writer_time_ms(w, NULL, rel_ns(g, g->last_overhead_ns));
    write_us(w, o->locking_ns);
    write_us(w, o->cleaning_ns);
    write_us(w, o->counters_ns);
    write_us(w, o->threads_ns);
    json_writer_array_end(w);
    return json_writer_error(w);
}

static int add_pause(struct gecko *g, bool paused, uint64_t time_ns)
{
    if (paused) {
        if (fleetprof_grow((void **)&g->pauses, &g->pause_cap, g->pause_count * 2 + 2,
                           sizeof(*g->pauses) * 1) < 0)
            return -ENOMEM;
        g->pauses[g->pause_count * 2] = time_ns;
        g->pauses[g->pause_count * 2 + 1] = 0;
        g->pause_count++;
    } else if (g->pause_count > 0 && g->pauses[g->pause_count * 2 - 1] == 0) {
        g->pauses[g->pause_count * 2 - 1] = time_ns;
    }
    return 0;
}

static int on_entry(struct buf_entry_reader *reader, uint64_t index, void *userdata)
{
    struct gecko *g = userdata;
    struct prof_entry *e = &g->entry;
    int r;

    g->entries++;
    if (g->progress && (g->entries & 4095) == 0 && g->range_span)
        progress_logger_set_local(
                g->progress,
                proportion_mul(proportion_from_ratio(index - g->range_start, g->range_span),
                               proportion_from_double(0.6)),
                "reading the buffer");
    g->unknown_len = 0; /* only add_known_sample() notes bytes, for this entry alone */
    if (!g->known_off && prof_entry_may_be_sample(reader)) {
        r = add_known_sample(g, reader);
        if (r != 0)
            return r < 0 ? r : 0;
    }
    r = prof_entry_decode(reader, e);
    if (r == -ENOTSUP) {
        g->unknown_kinds++;
        return 0;
    }
    if (r < 0) {
        g->decode_errors++;
        return 0;
    }
    switch (e->kind) {
    case BUF_ENTRY_SAMPLE:
        r = add_sample(g, &e->u.sample, false);
        break;
    case BUF_ENTRY_SAME_SAMPLE:
        r = add_sample(g, &e->u.sample, true);
        break;
    case BUF_ENTRY_MARKER:
        r = add_marker(g, &e->u.marker);
        break;
    case BUF_ENTRY_COUNTER:
        r = add_counter(g, &e->u.counter);
        break;
    case BUF_ENTRY_OVERHEAD:
        r = add_overhead(g, &e->u.overhead);
        break;
    case BUF_ENTRY_PAUSE:
    case BUF_ENTRY_RESUME:
        r = add_pause(g, e->kind == BUF_ENTRY_PAUSE, e->u.pause_time_ns);
        break;
    default:
        g->unknown_kinds++;
        r = 0;
        break;
    }
    /* Out of memory stops the walk; the error is reported by the caller. */
    return r < 0 ? r : 0;
}

static void write_schema_table(struct json_writer *w, const char *key, const char *const *names,
                               size_t count)
{
    json_writer_object_begin(w, key);
    json_writer_object_begin(w, "schema");
    for (size_t i = 0; i < count; i++)
        json_writer_uint(w, names[i], i);
    json_writer_object_end(w);
}

static void write_categories(struct json_writer *w)
{
    json_writer_array_begin(w, "categories");
    for (size_t i = 0; i < PROF_CATEGORY_COUNT; i++) {
        json_writer_object_begin(w, NULL);
        json_writer_string(w, "name", categories[i].name);
        json_writer_string(w, "color", categories[i].color);
        json_writer_array_begin(w, "subcategories");
        json_writer_string(w, NULL, "Other");
        json_writer_array_end(w);
        json_writer_object_end(w);
    }
    json_writer_array_end(w);
}

void prof_gecko_write_shared_meta(struct json_writer *w)
{
    json_writer_object_begin(w, "sampleUnits");
    json_writer_string(w, "time", "ms");
    json_writer_string(w, "eventDelay", "ms");
    json_writer_string(w, "threadCPUDelta", "ns");
    json_writer_object_end(w);
    write_categories(w);
}

void prof_gecko_write_empty_sources(struct json_writer *w)
{
    static const char *const schema[] = {"id", "filename", "startLine", "startColumn",
                                         "sourceMapURL"};

    write_schema_table(w, "sources", schema, sizeof(schema) / sizeof(schema[0]));
    json_writer_array_begin(w, "data");
    json_writer_array_end(w);
    json_writer_object_end(w);
}

static void write_marker_schemas(struct json_writer *w, const struct prof_process_info *info)
{
    json_writer_array_begin(w, "markerSchema");
    /* Text markers: our own schema says "name" is a plain string (not unique-string). */
    json_writer_object_begin(w, NULL);
    json_writer_string(w, "name", "Text");
    json_writer_string(w, "tooltipLabel", "{marker.name}");
    json_writer_string(w, "tableLabel", "{marker.data.name}");
    json_writer_string(w, "chartLabel", "{marker.data.name}");
    json_writer_array_begin(w, "display");
    json_writer_string(w, NULL, "marker-chart");
    json_writer_string(w, NULL, "marker-table");
    json_writer_array_end(w);
    json_writer_array_begin(w, "data");
    json_writer_object_begin(w, NULL);
    json_writer_string(w, "key", "name");
    json_writer_string(w, "label", "Details");
    json_writer_string(w, "format", "string");
    json_writer_bool(w, "searchable", true);
    json_writer_object_end(w);
    json_writer_array_end(w);
    json_writer_object_end(w);

    for (size_t i = 0; i < info->schema_count; i++) {
        const struct prof_marker_schema *s = &info->schemas[i];

        if (!s->name || !strcmp(s->name, "Text"))
            continue;
        json_writer_object_begin(w, NULL);
        json_writer_string(w, "name", s->name);
        json_writer_string(w, "tooltipLabel",
                           s->tooltip_label ? s->tooltip_label : "{marker.name}");
        json_writer_string(w, "tableLabel", s->table_label ? s->table_label : "{marker.name}");
        json_writer_string(w, "chartLabel", s->chart_label ? s->chart_label : "{marker.name}");
        json_writer_array_begin(w, "display");
        json_writer_string(w, NULL, "marker-chart");
        json_writer_string(w, NULL, "marker-table");
        json_writer_string(w, NULL, "timeline-overview");
        json_writer_array_end(w);
        json_writer_array_begin(w, "data");
        for (size_t f = 0; f < s->field_count; f++) {
            json_writer_object_begin(w, NULL);
            json_writer_string(w, "key", s->fields[f].key);
            json_writer_string(w, "label",
                               s->fields[f].label ? s->fields[f].label : s->fields[f].key);
            json_writer_string(w, "format", s->fields[f].format ? s->fields[f].format : "string");
            json_writer_bool(w, "searchable", s->fields[f].searchable);
            json_writer_object_end(w);
        }
        json_writer_array_end(w);
        json_writer_object_end(w);
    }
    json_writer_array_end(w);
}

/* meta.fleetprof.groups: the process's performance group totals (groups.h), cumulative since
 * it started, so that `fleetprof summary` and `merge` can sum them over a fleet. The
 * histogram's bucket bounds are written too: a reader needs no copy of the layout.
 *
 *   "groups": {"slowEventNs": 16000000,            threshold of a slow event; null: unknown
 *              "bucketLowerUs": [0, 1, 2, 4, ...],  bucket b holds events charged
 *                                                   [lower[b], lower[b+1]) us; the last: more
 *              "totals": [{"name", "cpuNs", "cycles", "activations", "events", "worstEventNs",
 *                          "slowEvents", "discarded", "migrated", "stale",
 *                          "durations": [count per bucket]}, ...]}
 */
static void write_groups(struct json_writer *w, const struct prof_process_info *info)
{
    json_writer_object_begin(w, "groups");
    if (info->slow_event_ns)
        json_writer_uint(w, "slowEventNs", info->slow_event_ns);
    else
        json_writer_null(w, "slowEventNs");
    json_writer_array_begin(w, "bucketLowerUs");
    for (unsigned b = 0; b < PROF_GROUP_BUCKETS; b++)
        json_writer_uint(w, NULL, prof_group_bucket_lower_ns(b) / 1000);
    json_writer_array_end(w);
    json_writer_array_begin(w, "totals");
    for (size_t i = 0; i < info->group_count; i++) {
        const struct prof_group_totals *t = &info->groups[i];

        json_writer_object_begin(w, NULL);
        json_writer_string(w, "name", t->name ? t->name : "?");
        json_writer_uint(w, "cpuNs", t->cpu_ns);
        json_writer_uint(w, "cycles", t->cycles);
        json_writer_uint(w, "activations", t->activations);
        json_writer_uint(w, "events", t->events);
        json_writer_uint(w, "worstEventNs", t->worst_event_ns);
        json_writer_uint(w, "slowEvents", t->slow_events);
        json_writer_uint(w, "discarded", t->discarded);
        json_writer_uint(w, "migrated", t->migrated);
        json_writer_uint(w, "stale", t->stale);
        json_writer_array_begin(w, "durations");
        for (unsigned b = 0; b < PROF_GROUP_BUCKETS; b++)
            json_writer_uint(w, NULL, t->durations[b]);
        json_writer_array_end(w);
        json_writer_object_end(w);
    }
    json_writer_array_end(w);
    json_writer_object_end(w);
}

/* The machine, as every profile's meta describes it: read once per process. A profile costs
 * a uname() and two reads of /sys/devices/system/cpu/online otherwise, and the daemon writes
 * one per short-lived process. */
static struct {
    char oscpu[200];
    char machine[65];
    long cpus;
} host;
static pthread_once_t host_once = PTHREAD_ONCE_INIT;

static void host_read(void)
{
    struct utsname u;

    if (uname(&u) == 0) {
        (void)snprintf(host.oscpu, sizeof(host.oscpu), "%s %s %s", u.sysname, u.release, u.machine);
        (void)snprintf(host.machine, sizeof(host.machine), "%s", u.machine);
    }
    host.cpus = sysconf(_SC_NPROCESSORS_ONLN);
}

static void write_meta(struct gecko *g, struct json_writer *w)
{
    const struct prof_process_info *info = g->info;

    json_writer_object_begin(w, "meta");
    json_writer_int(w, "version", GECKO_VERSION);
    json_writer_double(w, "startTime", info->start_epoch_ms);
    json_writer_time_ms(w, "interval", (int64_t)info->interval_ns);
    if (info->shutdown_ns)
        json_writer_time_ms(w, "shutdownTime", rel_ns(g, info->shutdown_ns));
    else
        json_writer_null(w, "shutdownTime");
    json_writer_int(w, "processType", 0);
    json_writer_string(w, "product", info->product ? info->product : info->name);
    json_writer_int(w, "stackwalk", 1);
    json_writer_int(w, "debug", 0);
    json_writer_bool(w, "presymbolicated", true);
    json_writer_string(w, "platform", "Linux");
    (void)pthread_once(&host_once, host_read);
    if (host.oscpu[0]) {
        json_writer_string(w, "oscpu", host.oscpu);
        json_writer_string(w, "abi", host.machine);
    }
    json_writer_int(w, "logicalCPUs", host.cpus);
    json_writer_int(w, "physicalCPUs", host.cpus);
    json_writer_uint(w, "startTimeAsClockMonotonicNanosecondsSinceBoot", info->start_ns);
    prof_gecko_write_shared_meta(w);
    write_marker_schemas(w, info);
    json_writer_object_begin(w, "configuration");
    json_writer_array_begin(w, "threads");
    json_writer_array_end(w);
    json_writer_array_begin(w, "features");
    json_writer_string(w, NULL, "stackwalk");
    json_writer_string(w, NULL, "cpu");
    json_writer_string(w, NULL, "markers");
    json_writer_array_end(w);
    json_writer_int(w, "capacity", 0);
    json_writer_object_end(w);
    json_writer_object_begin(w, "fleetprof");
    json_writer_int(w, "pid", info->pid);
    json_writer_int(w, "ppid", info->ppid);
    json_writer_string(w, "name", info->name ? info->name : "process");
    if (info->forked) /* how `fleetprof summary` tells forked workers from exec'd children */
        json_writer_bool(w, "forked", true);
    json_writer_string(w, "stackwalk", info->stackwalk ? info->stackwalk : "dwarf");
    json_writer_bool(w, "exit", info->exit_profile);
    if (info->recovered)
        json_writer_string(w, "recovered", info->recovered);
    if (info->execd_into)
        json_writer_string(w, "execdInto", info->execd_into);
    if (info->group_count > 0)
        write_groups(w, info);
    json_writer_object_end(w);
    json_writer_object_end(w);
}

static void write_libs(struct json_writer *w, const struct prof_libs *libs)
{
    json_writer_array_begin(w, "libs");
    for (size_t i = 0; libs && i < libs->count; i++) {
        const struct prof_lib *l = &libs->libs[i];
        const char *path = l->path ? l->path : l->name;
        const char *slash = l->path ? strrchr(l->path, '/') : NULL;

        json_writer_object_begin(w, NULL);
        json_writer_uint(w, "start", l->start);
        json_writer_uint(w, "end", l->end);
        json_writer_uint(w, "offset", l->offset);
        json_writer_string(w, "name", l->name);
        json_writer_string(w, "path", path);
        /* The file's, for symbol servers; name may be the link the program was run by. */
        json_writer_string(w, "debugName", slash ? slash + 1 : l->name);
        json_writer_string(w, "debugPath", path);
        json_writer_string(w, "breakpadId", l->breakpad_id ? l->breakpad_id : "");
        if (l->code_id)
            json_writer_string(w, "codeId", l->code_id);
        else
            json_writer_null(w, "codeId");
        json_writer_string(w, "arch", "x86_64");
        json_writer_object_end(w);
    }
    json_writer_array_end(w);
}

int prof_frame_format_location(const struct prof_frame_name *name, char *buf, size_t buf_size)
{
    int n;

    if (!name || !buf || buf_size == 0)
        return -EINVAL;
    if (name->function && name->module)
        n = snprintf(buf, buf_size, "%s (in %s)", name->function, name->module);
    else if (name->function)
        n = snprintf(buf, buf_size, "%s", name->function);
    else if (name->module && name->caller)
        n = snprintf(buf, buf_size, "%s+0x%" PRIx64 " (called from %s) (in %s)", name->module,
                     name->offset, name->caller, name->module);
    else if (name->module)
        n = snprintf(buf, buf_size, "%s+0x%" PRIx64 " (in %s)", name->module, name->offset,
                     name->module);
    else
        n = snprintf(buf, buf_size, "0x%" PRIx64, name->address);
    if (n < 0)
        return -EINVAL;
    return (size_t)n < buf_size ? n : -ENOSPC;
}

/* Whether request i is code of the vdso (the only module without a file) that no symbol
 * names. */
static bool unnamed_vdso(const struct gecko *g, uint32_t i)
{
    return !g->requests[i].lib->path && !(g->results && g->results[i].function);
}

/* Names the function each piece of unnamed vdso code was called from. On some kernels
 * (reported on 6.18 with a paravirtual clock) clock_gettime's hot code is a local function of
 * the vdso that no dynamic symbol covers, and its frames would read "[vdso]+0x8f0" alone.
 * When the unwinder's caller frame of such code is a named vdso function (an exported
 * entry point such as __vdso_clock_gettime), that name is added: "called from", because the
 * code is not inside that function. Callers outside the vdso say nothing (a frame-pointer
 * walk may skip the vdso's own frame); two different named vdso callers of one address
 * give no name at all. Decided per address for the whole process, so that every thread
 * shows one name. Returns 0 or -ENOMEM. */
static int find_vdso_callers(struct gecko *g)
{
    static const char conflict[] = "(conflict)";
    bool any = false;

    if (!g->results)
        return 0;
    for (uint32_t i = 0; i < g->request_count && !any; i++)
        any = unnamed_vdso(g, i);
    if (!any)
        return 0;
    g->callers = calloc(g->request_count, sizeof(*g->callers));
    if (!g->callers)
        return -ENOMEM;
    for (size_t k = 0; k < g->thread_count; k++) {
        const struct gthread *t = &g->threads[k];

        for (size_t i = 0; i < t->stack_count; i++) {
            const struct gstack *s = &t->stacks[i];
            const struct gframe *f = &t->frames[s->frame], *c;
            const char *name;

            if (s->prefix == NO_INDEX || f->is_label || f->request == NO_INDEX ||
                !unnamed_vdso(g, f->request))
                continue;
            c = &t->frames[t->stacks[s->prefix].frame];
            if (c->is_label || c->request == NO_INDEX ||
                g->requests[c->request].lib != g->requests[f->request].lib ||
                !g->results[c->request].function)
                continue;
            name = g->results[c->request].function;
            if (!g->callers[f->request])
                g->callers[f->request] = name;
            else if (strcmp(g->callers[f->request], name) != 0)
                g->callers[f->request] = conflict;
        }
    }
    for (size_t i = 0; i < g->request_count; i++)
        if (g->callers[i] == conflict)
            g->callers[i] = NULL;
    return 0;
}

/* A function named by its start in the module's file ("redis-check-rdb+0x4710": code no
 * symbol covers, named by the symbol service, which knows files) in the module's name as
 * the program was run ("redis-server+0x4710"), into buf; other names as they are. */
static const char *as_run(const struct prof_lib *lib, const char *function, char *buf, size_t size)
{
    const char *slash = lib->path ? strrchr(lib->path, '/') : NULL;
    const char *file = slash ? slash + 1 : lib->path;
    size_t len = file ? strlen(file) : 0;

    if (!function || !len || !strcmp(file, lib->name) || strncmp(function, file, len) != 0 ||
        strncmp(function + len, "+0x", 3) != 0)
        return function;
    if (snprintf(buf, size, "%s%s", lib->name, function + len) >= (int)size)
        return function;
    return buf;
}

static int write_frame_table(struct gecko *g, struct gthread *t, struct json_writer *w)
{
    static const char *const schema[] = {"location",       "relevantForJS", "innerWindowID",
                                         "implementation", "line",          "column",
                                         "category",       "subcategory"};
    char location[2 * PROF_MAX_STRING + 160], renamed[PROF_MAX_STRING + 64];

    write_schema_table(w, "frameTable", schema, sizeof(schema) / sizeof(schema[0]));
    json_writer_array_begin(w, "data");
    for (size_t i = 0; i < t->frame_count; i++) {
        const struct gframe *f = &t->frames[i];
        const struct prof_frame_result *res =
                f->request != NO_INDEX && g->results ? &g->results[f->request] : NULL;
        uint32_t loc;

        if (f->is_label) {
            loc = f->label_name;
        } else {
            struct prof_frame_name name = {.address = f->address};

            /* In a known module, never a bare address: the module and the offset in its
             * file can be looked up (addr2line, objdump) and read the same in every
             * process, wherever the module was loaded. */
            if (f->request != NO_INDEX) {
                name.module = g->requests[f->request].lib->name;
                name.offset = g->requests[f->request].vaddr;
                name.function = as_run(g->requests[f->request].lib, res ? res->function : NULL,
                                       renamed, sizeof(renamed));
                name.caller = g->callers ? g->callers[f->request] : NULL;
            }
            (void)prof_frame_format_location(&name, location, sizeof(location));
            if (!res || !res->function)
                g->unresolved_frames++;
            if (intern_string(t, location, strlen(location), &loc) < 0)
                return -ENOMEM;
        }
        json_writer_array_begin(w, NULL);
        json_writer_uint(w, NULL, loc);
        json_writer_bool(w, NULL, false);
        json_writer_int(w, NULL, 0);
        json_writer_null(w, NULL);
        if (res && res->function && res->line)
            json_writer_uint(w, NULL, res->line);
        else
            json_writer_null(w, NULL);
        json_writer_null(w, NULL);
        json_writer_uint(w, NULL, f->category);
        json_writer_int(w, NULL, 0);
        json_writer_array_end(w);
    }
    json_writer_array_end(w);
    json_writer_object_end(w);
    return 0;
}

static int write_thread(struct gecko *g, struct gthread *t, struct json_writer *w)
{
    static const char *const stack_schema[] = {"prefix", "frame"};
    static const char *const sample_schema[] = {"stack", "time", "eventDelay", "threadCPUDelta"};
    static const char *const marker_schema[] = {"name",  "startTime", "endTime",
                                                "phase", "category",  "data"};
    const struct prof_thread_info *ti = t->info;
    char fallback[48];
    int r;

    json_writer_object_begin(w, NULL);
    if ((ti && ti->is_main) || t->stand_in_main) {
        json_writer_string(w, "name", "GeckoMain");
    } else if (ti) {
        json_writer_string(w, "name", ti->name ? ti->name : "thread");
    } else {
        (void)snprintf(fallback, sizeof(fallback), "thread %d", (int)t->tid);
        json_writer_string(w, "name", fallback);
    }
    json_writer_string(w, "processType", g->info->process_type ? g->info->process_type : "default");
    json_writer_string(w, "processName", g->process_name);
    json_writer_int(w, "pid", g->info->pid);
    json_writer_int(w, "tid", t->tid);
    json_writer_time_ms(w, "registerTime",
                        ti && ti->register_ns > g->info->start_ns ? rel_ns(g, ti->register_ns) : 0);
    if (ti && ti->unregister_ns)
        json_writer_time_ms(w, "unregisterTime", rel_ns(g, ti->unregister_ns));
    else
        json_writer_null(w, "unregisterTime");

    r = write_frame_table(g, t, w);
    if (r < 0)
        return r;
    write_schema_table(w, "stackTable", stack_schema, 2);
    json_writer_array_begin(w, "data");
    for (size_t i = 0; i < t->stack_count; i++) {
        json_writer_array_begin(w, NULL);
        write_stack_or_null(w, t->stacks[i].prefix);
        json_writer_uint(w, NULL, t->stacks[i].frame);
        json_writer_array_end(w);
    }
    json_writer_array_end(w);
    json_writer_object_end(w);

    write_schema_table(w, "samples", sample_schema, 4);
    json_writer_array_end(t->samples);
    json_writer_splice_writer(w, "data", t->samples);
    json_writer_object_end(w);

    write_schema_table(w, "markers", marker_schema, 6);
    json_writer_array_end(t->markers);
    json_writer_splice_writer(w, "data", t->markers);
    json_writer_object_end(w);

    json_unique_strings_write(t->strings, w, "stringTable");
    json_writer_object_end(w);
    return json_writer_error(w);
}

static void write_counters(struct gecko *g, struct json_writer *w)
{
    static const char *const schema[] = {"time", "count", "number"};

    json_writer_array_begin(w, "counters");
    for (size_t i = 0; i < g->info->counter_count; i++) {
        const struct prof_counter_info *c = &g->info->counters[i];

        if (!g->counters[i].rows)
            continue; /* a counter with no samples is dropped by the front-end anyway */
        json_writer_object_begin(w, NULL);
        json_writer_string(w, "name", c->name ? c->name : "counter");
        json_writer_string(w, "category", c->category ? c->category : "Other");
        json_writer_string(w, "description", c->description ? c->description : "");
        write_schema_table(w, "samples", schema, 3);
        json_writer_array_end(g->counters[i].rows);
        json_writer_splice_writer(w, "data", g->counters[i].rows);
        json_writer_object_end(w);
        json_writer_object_end(w);
    }
    json_writer_array_end(w);
}

static void write_tail(struct gecko *g, struct json_writer *w)
{
    static const char *const overhead_schema[] = {"time", "locking", "expiredMarkerCleaning",
                                                  "counters", "threads"};
    char pid[16];

    json_writer_array_begin(w, "pausedRanges");
    for (size_t i = 0; i < g->pause_count; i++) {
        json_writer_object_begin(w, NULL);
        json_writer_time_ms(w, "startTime", rel_ns(g, g->pauses[2 * i]));
        if (g->pauses[2 * i + 1])
            json_writer_time_ms(w, "endTime", rel_ns(g, g->pauses[2 * i + 1]));
        else
            json_writer_null(w, "endTime");
        json_writer_string(w, "reason", "profiler-paused");
        json_writer_object_end(w);
    }
    json_writer_array_end(w);

    prof_gecko_write_empty_sources(w);

    write_counters(g, w);

    json_writer_object_begin(w, "profilerOverhead");
    write_schema_table(w, "samples", overhead_schema, 5);
    json_writer_array_end(g->overhead);
    json_writer_splice_writer(w, "data", g->overhead);
    json_writer_object_end(w);
    json_writer_object_end(w);

    (void)snprintf(pid, sizeof(pid), "%d", (int)g->info->pid);
    json_writer_object_begin(w, "profilingLog");
    json_writer_object_begin(w, pid);
    json_writer_object_begin(w, "profileWriter");
    json_writer_uint(w, "entries", g->entries);
    json_writer_uint(w, "samples", g->samples);
    json_writer_uint(w, "sameSamples", g->same_samples);
    json_writer_uint(w, "markers", g->markers);
    json_writer_uint(w, "labelFrames", g->label_frames);
    json_writer_uint(w, "decodeErrors", g->decode_errors);
    json_writer_uint(w, "unknownEntryKinds", g->unknown_kinds);
    json_writer_uint(w, "unknownCounters", g->unknown_counters);
    json_writer_uint(w, "symbolRequests", g->request_count);
    json_writer_uint(w, "unresolvedFrames", g->unresolved_frames);
    json_writer_int(w, "symbolizerError", g->symbolizer_error);
    json_writer_uint(w, "cpuNs", g->cpu_written_ns);
    json_writer_object_end(w);
    /* The interval got, beside meta.interval (asked): a stack per this much CPU. */
    if (g->info->timer_captures && g->cpu_written_ns)
        json_writer_double(w, "measuredIntervalMs",
                           (double)g->cpu_written_ns / 1e6 / (double)g->info->timer_captures);
    if (g->info->runtime_log_json)
        json_writer_splice_text(w, "runtime", g->info->runtime_log_json,
                                strlen(g->info->runtime_log_json));
    json_writer_object_end(w);
    json_writer_object_end(w);

    json_writer_array_begin(w, "processes");
    json_writer_array_end(w);
}

/* The front-end attaches a process's counters (memory, performance groups) to its GeckoMain
 * thread and silently drops them when there is none: a process whose profiler was started
 * from another thread than the main one. Such a process gets an empty GeckoMain thread, with
 * the process's pid as its tid (the main thread's id), to carry them. */
static int ensure_main_for_counters(struct gecko *g)
{
    bool rows = false;
    struct gthread *t;

    for (size_t i = 0; i < g->thread_count; i++)
        if (g->threads[i].info && g->threads[i].info->is_main)
            return 0;
    for (size_t i = 0; i < g->info->counter_count; i++)
        rows = rows || g->counters[i].rows;
    if (!rows)
        return 0;
    t = thread_for(g, g->info->pid);
    if (!t)
        return -ENOMEM;
    t->stand_in_main = true;
    return 0;
}

static void gecko_done(struct gecko *g)
{
    for (size_t i = 0; i < g->thread_count; i++) {
        struct gthread *t = &g->threads[i];

        json_unique_strings_free(t->strings);
        fleetprof_map_free(&t->frame_map);
        fleetprof_map_free(&t->stack_map);
        fleetprof_map_free(&t->known_map);
        free(t->known);
        free(t->known_bytes);
        free(t->frames);
        free(t->stacks);
        json_writer_free(t->samples);
        json_writer_free(t->markers);
    }
    free(g->threads);
    for (size_t i = 0; g->counters && i < g->info->counter_count; i++)
        json_writer_free(g->counters[i].rows);
    free(g->counters);
    fleetprof_map_free(&g->request_map);
    free(g->requests);
    free(g->results);
    free(g->callers);
    free(g->pauses);
    json_writer_free(g->overhead);
}

/* The program by its name, then the command line's arguments when its first word is the
 * program (by its path or its name; not under a title the program set over it: the title
 * alone), cut on a character's boundary with "…". */
static void set_process_name(struct gecko *g)
{
    const char *name = g->info->name ? g->info->name : "process";
    const char *product = g->info->product, *args = product ? strchr(product, ' ') : NULL;
    size_t len = strlen(name), room = PROCESS_NAME_MAX;

    if (args) {
        const char *base = memrchr(product, '/', (size_t)(args - product));

        base = base ? base + 1 : product;
        if ((size_t)(args - base) != len || strncmp(base, name, len) != 0)
            args = NULL;
    }

    if (len > room)
        len = room;
    memcpy(g->process_name, name, len);
    room -= len;
    if (args && args[1]) {
        size_t n = strlen(args);

        if (n > room) {
            n = room;
            while (n > 0 && ((unsigned char)args[n] & 0xc0) == 0x80)
                n--; /* not inside a UTF-8 sequence */
            memcpy(g->process_name + len, args, n);
            memcpy(g->process_name + len + n, "\xe2\x80\xa6", 3); /* … */
            len += n + 3;
        } else {
            memcpy(g->process_name + len, args, n);
            len += n;
        }
    }
    g->process_name[len] = '\0';
}

int prof_gecko_write_process(struct json_writer *w, const char *key,
                             const struct prof_process_info *info,
                             struct buf_chunked_buffer *buffer,
                             const struct prof_symbolizer *symbolizer,
                             const struct progress_logger *progress)
{
    struct buf_chunked_buffer_state state;
    struct gecko *g;
    int r;

    if (!w || !info || !buffer)
        return -EINVAL;
    g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    g->info = info;
    set_process_name(g);
    g->progress = progress;
    g->counters = calloc(info->counter_count ? info->counter_count : 1, sizeof(*g->counters));
    r = g->counters ? new_array_writer(&g->overhead) : -ENOMEM;
    if (r < 0)
        goto out;

    /* Every registered thread appears, even one that was never sampled. */
    for (size_t i = 0; i < info->thread_count; i++)
        if (!thread_for(g, info->threads[i].tid)) {
            r = -ENOMEM;
            goto out;
        }

    buf_chunked_buffer_get_state(buffer, &state);
    g->range_start = state.range_start;
    g->range_span = state.range_end - state.range_start;
    r = buf_chunked_buffer_read_each(buffer, on_entry, g);
    if (r < 0)
        goto out;

    if (progress)
        progress_logger_set_local(progress, proportion_from_double(0.6), "symbolizing");
    if (g->request_count > 0 && symbolizer && symbolizer->resolve) {
        g->results = calloc(g->request_count, sizeof(*g->results));
        if (!g->results) {
            r = -ENOMEM;
            goto out;
        }
        g->symbolizer_error = symbolizer->resolve(symbolizer->userdata, g->requests,
                                                  g->request_count, g->results);
        if (g->symbolizer_error < 0)
            memset(g->results, 0, g->request_count * sizeof(*g->results));
    }
    r = find_vdso_callers(g);
    if (r < 0)
        goto out;
    r = ensure_main_for_counters(g);
    if (r < 0)
        goto out;

    if (progress)
        progress_logger_set_local(progress, proportion_from_double(0.75), "writing threads");
    json_writer_object_begin(w, key);
    write_meta(g, w);
    write_libs(w, info->libs);
    json_writer_array_begin(w, "threads");
    for (size_t i = 0; i < g->thread_count; i++) {
        r = write_thread(g, &g->threads[i], w);
        if (r < 0)
            goto out;
        if (progress)
            progress_logger_set_local(
                    progress,
                    proportion_add(proportion_from_double(0.75),
                                   proportion_mul(proportion_from_ratio(i + 1, g->thread_count),
                                                  proportion_from_double(0.25))),
                    "writing threads");
    }
    json_writer_array_end(w);
    write_tail(g, w);
    json_writer_object_end(w);
    r = json_writer_error(w);
    if (progress && r == 0)
        progress_logger_set_local(progress, PROPORTION_ONE, "done");
out:
    gecko_done(g);
    free(g);
    return r;
}
