/* tools/export-pprof.c - a Gecko profile as gzipped pprof (see export-pprof.h).
 *
 * The profile is built in compact tables (strings, functions, mappings, locations, samples
 * with their location ids in one pool), then packed with protobuf-c into a gzip stream. The
 * samples are packed in batches, each batch a Profile message holding only samples: protobuf
 * merges concatenated messages (repeated fields append), so the file decodes as one Profile
 * while memory holds the message structs of one batch only.
 */
#include "tools/export-pprof.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <protobuf-c/protobuf-c.h>

#include "common/grow.h"
#include "common/hash.h"
#include "common/map.h"
#include "common/outfile.h"
#include "json/reader.h"
#include "profile.pb-c.h"
#include "tools/idmap.h"
#include "tools/profile-read.h"
#include "tools/profile-stacks.h"

#define SAMPLE_BATCH   4096 /* samples per packed Profile message */
#define NO_STACK_NAME  "(no stack)"
#define BAD_STACK_NAME "(invalid stack)"

/* ---- one pprof profile under construction ----------------------------------------------- */

struct pp_mapping {
    uint64_t start, limit, offset;
    int64_t filename, build_id; /* string indexes */
};

struct pp_location {
    uint64_t mapping_id; /* 0: none */
    uint64_t function_id;
    int64_t line; /* 0: unknown */
};

struct pp_thread {
    int64_t pid, tid;                 /* tid -1: unknown (no label) */
    int64_t process, thread, command; /* string indexes; command 0: unknown (no label) */
};

struct pp_sample {
    uint32_t thread; /* index into threads */
    uint32_t depth;  /* location ids at pool[at], leaf first */
    size_t at;
    int64_t samples, cpu_ns;
};

struct pprof {
    /* Strings, borrowed from the document, the function table or literals: all outlive the
     * write. Index 0 is "". */
    const char **str;
    size_t n_str, cap_str;
    struct fleetprof_map str_ids; /* string -> index; the keys are str's */

    int64_t *func_name; /* function id - 1 -> name's string index */
    size_t n_funcs, cap_funcs;
    uint32_t *func_ids; /* pstack function id -> function id, 0: not yet */
    size_t cap_func_ids;

    struct pp_mapping *maps;
    size_t n_maps, cap_maps;
    struct fleetprof_map map_ids; /* (start, filename, build_id) -> index of the first such */

    struct pp_location *locs;
    size_t n_locs, cap_locs;
    struct fleetprof_map loc_ids; /* (mapping, function, line) -> location index */

    struct pp_thread *threads;
    size_t n_threads, cap_threads;
    struct pp_sample *samples;
    size_t n_samples, cap_samples;
    uint64_t *pool; /* location ids of the samples */
    size_t n_pool, cap_pool;

    bool has_start, has_end;
    double start_ms, end_ms; /* since the epoch */
    double interval_ms;      /* 0: unknown */
    int64_t comment;         /* string index of meta.product; 0: none */
    bool by_samples;         /* the default sample type is samples/count, not cpu */
};

static bool str_same(const void *ctx, const void *key, uint64_t index)
{
    return strcmp(((const char *const *)ctx)[index], key) == 0;
}

/* The string table index of s (borrowed; NULL is ""); -1 when out of memory. */
static int64_t str_index(struct pprof *pp, const char *s)
{
    uint64_t k;
    int r;

    if (!s)
        s = "";
    /* Room first, so that a string the map adds is in the table at once. */
    if (FLEETPROF_GROW(pp->str, pp->cap_str, pp->n_str + 1) < 0)
        return -1;
    r = fleetprof_map_intern(&pp->str_ids, fleetprof_fnv1a64_str(s), str_same, pp->str, s,
                             pp->n_str, &k);
    if (r < 0)
        return -1;
    if (r == 1)
        pp->str[pp->n_str++] = s;
    return (int64_t)k;
}

/* The strings every profile has, interned first in this order (index 0 is ""). */
enum {
    STR_SAMPLES = 1,
    STR_COUNT,
    STR_CPU,
    STR_NANOSECONDS,
    STR_PID,
    STR_TID,
    STR_PROCESS,
    STR_THREAD,
    STR_COMMAND,
};
/* The labels of a thread's samples: pid, process, thread, command (if known), tid (if
 * known). */
#define LABELS_MAX 5

static int pprof_init(struct pprof *pp)
{
    static const char *const fixed[] = {"",    "samples", "count",   "cpu",    "nanoseconds",
                                        "pid", "tid",     "process", "thread", "command"};

    memset(pp, 0, sizeof(*pp));
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        if (str_index(pp, fixed[i]) != (int64_t)i)
            return -ENOMEM;
    return 0;
}

static void pprof_done(struct pprof *pp)
{
    free(pp->str);
    fleetprof_map_free(&pp->str_ids);
    free(pp->func_name);
    free(pp->func_ids);
    free(pp->maps);
    fleetprof_map_free(&pp->map_ids);
    free(pp->locs);
    fleetprof_map_free(&pp->loc_ids);
    free(pp->threads);
    free(pp->samples);
    free(pp->pool);
    memset(pp, 0, sizeof(*pp));
}

static bool mapping_same(const void *ctx, const void *key, uint64_t index)
{
    const struct pp_mapping *a = &((const struct pp_mapping *)ctx)[index], *b = key;

    return a->start == b->start && a->filename == b->filename && a->build_id == b->build_id;
}

/* The mapping id (1-based) of a library; equal libraries of several processes (forked
 * workers share their parent's) are one mapping. 0 when out of memory. */
static uint64_t pprof_mapping(struct pprof *pp, const struct pp_mapping *m)
{
    uint64_t k;
    int r;

    /* Room first, so that a mapping the map adds is in the table at once. */
    if (FLEETPROF_GROW(pp->maps, pp->cap_maps, pp->n_maps + 1) < 0)
        return 0;
    r = fleetprof_map_intern(
            &pp->map_ids,
            fleetprof_map_mix128(m->start, (uint64_t)m->filename << 32 | (uint64_t)m->build_id),
            mapping_same, pp->maps, m, pp->n_maps, &k);
    if (r < 0)
        return 0;
    if (r == 0) {
        const struct pp_mapping *old = &pp->maps[k];

        if (old->limit == m->limit && old->offset == m->offset)
            return k + 1;
        /* Same start and file, another extent: a mapping of its own, which the map (that
         * names the first) leaves out. */
    }
    pp->maps[pp->n_maps++] = *m;
    return pp->n_maps;
}

/* ---- the walk over the profile ---------------------------------------------------------- */

struct proc_lib {
    const char *name; /* borrowed: the lib's "name" (basename), what frames say "(in ...)" */
    uint64_t mapping_id;
};

struct canon_stack {
    uint32_t loc;    /* location id */
    uint32_t parent; /* canonical caller + 1; 0 at a root */
    uint64_t samples, cpu_ns;
};

struct exporter {
    const struct json_doc *doc;
    const char *out_path; /* borrowed */
    bool split;
    bool by_samples; /* PPROF_WEIGHT_SAMPLES */
    char *why;
    size_t why_size;
    struct pstack_funcs funcs;
    struct pprof *pp; /* the profile being built */
    struct pprof one; /* the fleet's, without split */
    struct pprof_result res;
    int64_t *pids_written; /* split: pids of the files written, to name repeats */
    size_t cap_pids;

    /* The current process. */
    struct proc_lib *libs;
    size_t n_libs, cap_libs;
    uint32_t *func_map; /* pstack function id -> mapping id + 1; 0: not looked up yet */
    size_t cap_func_map;

    /* The current thread. */
    uint32_t *stack_canon; /* stack -> canonical stack */
    size_t cap_stack_canon;
    struct canon_stack *canon;
    size_t n_canon, cap_canon;
    struct idmap canon_ids; /* (location, parent) -> canonical stack */
};

/* Explains failure r in x->why, unless an earlier, more precise line is there; returns r.
 * The line is the subject (a printf format), then the error: "cannot write f: No space". */
__attribute__((format(printf, 3, 4))) static int fail(struct exporter *x, int r, const char *fmt,
                                                      ...)
{
    va_list ap;
    int n;

    if (*x->why)
        return r;
    va_start(ap, fmt);
    n = vsnprintf(x->why, x->why_size, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < x->why_size)
        (void)snprintf(x->why + n, x->why_size - (size_t)n, "%s%s", n ? ": " : "", strerror(-r));
    return r;
}

static uint64_t func_mapping(struct exporter *x, uint32_t func)
{
    const struct pstack_func *f = &x->funcs.v[func];

    if (func >= x->cap_func_map) {
        size_t old = x->cap_func_map;

        if (fleetprof_grow((void **)&x->func_map, &x->cap_func_map, (size_t)func + 1,
                           sizeof(*x->func_map)) < 0)
            return UINT64_MAX;
        memset(x->func_map + old, 0, (x->cap_func_map - old) * sizeof(*x->func_map));
    }
    if (!x->func_map[func]) {
        x->func_map[func] = 1;
        for (size_t i = 0; f->lib && i < x->n_libs; i++) {
            if (x->libs[i].name && strlen(x->libs[i].name) == f->lib_len &&
                memcmp(x->libs[i].name, f->lib, f->lib_len) == 0) {
                x->func_map[func] = (uint32_t)x->libs[i].mapping_id + 1;
                break;
            }
        }
    }
    return x->func_map[func] - 1;
}

static uint64_t func_id(struct exporter *x, uint32_t func)
{
    struct pprof *pp = x->pp;
    int64_t name;

    if (func >= pp->cap_func_ids) {
        size_t old = pp->cap_func_ids;

        if (fleetprof_grow((void **)&pp->func_ids, &pp->cap_func_ids, (size_t)func + 1,
                           sizeof(*pp->func_ids)) < 0)
            return 0;
        memset(pp->func_ids + old, 0, (pp->cap_func_ids - old) * sizeof(*pp->func_ids));
    }
    if (pp->func_ids[func])
        return pp->func_ids[func];
    name = str_index(pp, x->funcs.v[func].name);
    if (name < 0 || fleetprof_grow((void **)&pp->func_name, &pp->cap_funcs, pp->n_funcs + 1,
                                   sizeof(int64_t)) < 0)
        return 0;
    pp->func_name[pp->n_funcs++] = name;
    pp->func_ids[func] = (uint32_t)pp->n_funcs;
    return pp->n_funcs;
}

static bool location_same(const void *ctx, const void *key, uint64_t index)
{
    const struct pp_location *a = &((const struct pp_location *)ctx)[index], *b = key;

    return a->mapping_id == b->mapping_id && a->function_id == b->function_id && a->line == b->line;
}

/* The location id (1-based) of function func (a pstack id) at line; 0: out of memory. */
static uint32_t location_id(struct exporter *x, uint32_t func, uint32_t line)
{
    struct pprof *pp = x->pp;
    uint64_t mapping = func_mapping(x, func), function = func_id(x, func), k;
    struct pp_location key;
    int r;

    if (mapping == UINT64_MAX || !function)
        return 0;
    key = (struct pp_location){mapping, function, line};
    /* Room first, so that a location the map adds is in the table at once. */
    if (FLEETPROF_GROW(pp->locs, pp->cap_locs, pp->n_locs + 1) < 0)
        return 0;
    r = fleetprof_map_intern(&pp->loc_ids, fleetprof_map_mix128(mapping << 32 | function, line),
                             location_same, pp->locs, &key, pp->n_locs, &k);
    if (r < 0)
        return 0;
    if (r == 1)
        pp->locs[pp->n_locs++] = key;
    return (uint32_t)k + 1;
}

/* Adds a sample of thread th under the location ids locs (leaf first). */
static int add_sample(struct pprof *pp, uint32_t th, const uint64_t *locs, size_t depth,
                      uint64_t samples, uint64_t cpu_ns)
{
    if (fleetprof_grow((void **)&pp->samples, &pp->cap_samples, pp->n_samples + 1,
                       sizeof(*pp->samples)) < 0 ||
        fleetprof_grow((void **)&pp->pool, &pp->cap_pool, pp->n_pool + depth, sizeof(*pp->pool)) <
                0)
        return -ENOMEM;
    memcpy(pp->pool + pp->n_pool, locs, depth * sizeof(*locs));
    pp->samples[pp->n_samples++] = (struct pp_sample){.thread = th,
                                                      .depth = (uint32_t)depth,
                                                      .at = pp->n_pool,
                                                      .samples = (int64_t)samples,
                                                      .cpu_ns = (int64_t)cpu_ns};
    pp->n_pool += depth;
    return 0;
}

/* Samples under one pseudo-location named name (no stack, invalid stack). */
static int add_pseudo_sample(struct exporter *x, uint32_t th, const char *name, uint64_t samples,
                             uint64_t cpu_ns)
{
    uint32_t f = pstack_func_intern(&x->funcs, name, strlen(name), NULL, 0);
    uint64_t loc;

    if (!samples && !cpu_ns)
        return 0;
    if (f == PSTACK_NONE || !(loc = location_id(x, f, 0)))
        return -ENOMEM;
    return add_sample(x->pp, th, &loc, 1, samples, cpu_ns);
}

/* The time of a thread's last sample (ms since its process's start), when it has one. */
static bool last_sample_ms(const struct json_doc *doc, const struct json_value *tv, double *ret)
{
    const struct json_value *sm = json_object_get(doc, tv, "samples");
    const struct json_value *data = json_object_get(doc, sm, "data");
    int col = profile_schema_column(doc, sm, "time");
    size_t n = json_value_type(data) == JSON_ARRAY ? json_value_len(data) : 0;

    return col >= 0 && n > 0 &&
           json_value_double(doc, json_array_at(doc, json_array_at(doc, data, n - 1), (size_t)col),
                             ret) == 0;
}

static void extend_span(struct pprof *pp, double start_ms, double end_ms)
{
    if (!pp->has_start || start_ms < pp->start_ms)
        pp->start_ms = start_ms;
    if (!pp->has_end || end_ms > pp->end_ms)
        pp->end_ms = end_ms;
    pp->has_start = pp->has_end = true;
}

static int export_thread(const struct pstack_process *proc, const struct pstack_thread *t,
                         void *userdata)
{
    struct exporter *x = userdata;
    struct pprof *pp = x->pp;
    uint64_t *path = NULL;
    size_t cap_path = 0;
    double last;
    uint32_t th;
    int r = -ENOMEM;

    if (proc->info.has_start_time && last_sample_ms(x->doc, t->value, &last))
        extend_span(pp, proc->info.start_time, proc->info.start_time + last);
    if (fleetprof_grow((void **)&pp->threads, &pp->cap_threads, pp->n_threads + 1,
                       sizeof(*pp->threads)) < 0 ||
        fleetprof_grow((void **)&x->stack_canon, &x->cap_stack_canon, t->n_stacks + 1,
                       sizeof(*x->stack_canon)) < 0)
        return -ENOMEM;
    th = (uint32_t)pp->n_threads;
    pp->threads[th] = (struct pp_thread){.pid = proc->info.pid,
                                         .tid = t->tid,
                                         .process = str_index(pp, proc->info.name),
                                         .thread = str_index(pp, t->name ? t->name : "thread"),
                                         .command = proc->info.command && *proc->info.command
                                                            ? str_index(pp, proc->info.command)
                                                            : 0};
    if (pp->threads[th].process < 0 || pp->threads[th].thread < 0 || pp->threads[th].command < 0)
        return -ENOMEM;
    pp->n_threads++;
    x->res.samples += t->samples_total;
    x->res.bad_samples += t->bad_samples;

    /* Stacks with the same locations all the way up (a function's frames at several
     * addresses of one line) are one canonical stack, and one Sample. */
    x->n_canon = 0;
    idmap_done(&x->canon_ids);
    for (size_t s = 0; s < t->n_stacks; s++) {
        uint32_t loc, parent, k;

        x->stack_canon[s] = UINT32_MAX;
        if (t->func[s] == PSTACK_NONE)
            continue;
        loc = location_id(x, t->func[s], t->line[s]);
        if (!loc)
            goto out;
        /* A valid stack's prefix is valid and earlier: its canonical stack is known. */
        parent = t->prefix[s] == PSTACK_NONE ? 0 : x->stack_canon[t->prefix[s]] + 1;
        /* Room first, so that a stack the map adds is in the table at once. */
        if (FLEETPROF_GROW(x->canon, x->cap_canon, x->n_canon + 1) < 0)
            goto out;
        k = idmap_get(&x->canon_ids, loc, parent, (uint32_t)x->n_canon);
        if (k == UINT32_MAX)
            goto out;
        if (k == x->n_canon)
            x->canon[x->n_canon++] = (struct canon_stack){.loc = loc, .parent = parent};
        x->canon[k].samples += t->samples[s];
        x->canon[k].cpu_ns += t->cpu_ns[s];
        x->stack_canon[s] = k;
    }
    for (size_t c = 0; c < x->n_canon; c++) {
        size_t depth = 0;

        if (!x->canon[c].samples && !x->canon[c].cpu_ns)
            continue;
        for (uint32_t k = (uint32_t)c + 1; k; k = x->canon[k - 1].parent) {
            if (fleetprof_grow((void **)&path, &cap_path, depth + 1, sizeof(*path)) < 0)
                goto out;
            path[depth++] = x->canon[k - 1].loc;
        }
        if (add_sample(pp, th, path, depth, x->canon[c].samples, x->canon[c].cpu_ns) < 0)
            goto out;
    }
    if (add_pseudo_sample(x, th, NO_STACK_NAME, t->no_stack_samples, t->no_stack_cpu_ns) < 0 ||
        add_pseudo_sample(x, th, BAD_STACK_NAME, t->bad_samples, t->bad_cpu_ns) < 0)
        goto out;
    r = 0;
out:
    free(path);
    return r;
}

/* The process's libs as mappings of the current profile, and their names for its frames. */
static int read_libs(struct exporter *x, const struct pstack_process *proc)
{
    const struct json_doc *doc = x->doc;
    const struct json_value *libs = json_object_get(doc, proc->value, "libs");
    size_t n = json_value_type(libs) == JSON_ARRAY ? json_value_len(libs) : 0;

    x->n_libs = 0;
    for (size_t i = 0; i < n; i++) {
        const struct json_value *lib = json_array_at(doc, libs, i);
        const char *name = json_value_string(doc, json_object_get(doc, lib, "name"), NULL);
        const char *path = json_value_string(doc, json_object_get(doc, lib, "path"), NULL);
        const char *code = json_value_string(doc, json_object_get(doc, lib, "codeId"), NULL);
        const char *bp = json_value_string(doc, json_object_get(doc, lib, "breakpadId"), NULL);
        int64_t start = 0, end = 0, offset = 0;
        struct pp_mapping m;
        uint64_t id;

        if (json_value_type(lib) != JSON_OBJECT)
            continue;
        (void)json_value_int64(doc, json_object_get(doc, lib, "start"), &start);
        (void)json_value_int64(doc, json_object_get(doc, lib, "end"), &end);
        (void)json_value_int64(doc, json_object_get(doc, lib, "offset"), &offset);
        m = (struct pp_mapping){
                .start = (uint64_t)start,
                .limit = (uint64_t)end,
                .offset = (uint64_t)offset,
                .filename = str_index(x->pp, path ? path : name),
                .build_id = str_index(x->pp, code && *code ? code : bp),
        };
        if (m.filename < 0 || m.build_id < 0 || !(id = pprof_mapping(x->pp, &m)) ||
            fleetprof_grow((void **)&x->libs, &x->cap_libs, x->n_libs + 1, sizeof(*x->libs)) < 0)
            return -ENOMEM;
        x->libs[x->n_libs++] = (struct proc_lib){.name = name, .mapping_id = id};
    }
    return 0;
}

/* meta.<key> of v as a number. */
static bool meta_number(const struct json_doc *doc, const struct json_value *v, const char *key,
                        double *ret)
{
    return json_value_double(doc, json_object_get(doc, json_object_get(doc, v, "meta"), key),
                             ret) == 0;
}

/* ---- writing ---------------------------------------------------------------------------- */

struct gz_sink {
    ProtobufCBuffer base; /* first: protobuf-c calls append with it */
    gzFile gz;
    int err; /* the first write error, negative errno */
};

static void gz_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
    struct gz_sink *o = (struct gz_sink *)b;

    while (len > 0 && !o->err) {
        unsigned n = len > (1u << 30) ? 1u << 30 : (unsigned)len;

        if (gzwrite(o->gz, data, n) != (int)n) {
            int zerr;

            (void)gzerror(o->gz, &zerr);
            o->err = zerr == Z_ERRNO && errno ? -errno : zerr == Z_MEM_ERROR ? -ENOMEM : -EIO;
        }
        data += n;
        len -= n;
    }
}

/* Packs everything but the samples. */
static int pack_tables(const struct pprof *pp, struct gz_sink *sink)
{
    Perftools__Profiles__Profile prof = PERFTOOLS__PROFILES__PROFILE__INIT;
    Perftools__Profiles__ValueType types[2] = {PERFTOOLS__PROFILES__VALUE_TYPE__INIT,
                                               PERFTOOLS__PROFILES__VALUE_TYPE__INIT};
    Perftools__Profiles__ValueType period = PERFTOOLS__PROFILES__VALUE_TYPE__INIT;
    Perftools__Profiles__ValueType *type_ptrs[2] = {&types[0], &types[1]};
    Perftools__Profiles__Mapping *maps = calloc(pp->n_maps + 1, sizeof(*maps));
    Perftools__Profiles__Mapping **map_ptrs = calloc(pp->n_maps + 1, sizeof(*map_ptrs));
    Perftools__Profiles__Location *locs = calloc(pp->n_locs + 1, sizeof(*locs));
    Perftools__Profiles__Location **loc_ptrs = calloc(pp->n_locs + 1, sizeof(*loc_ptrs));
    Perftools__Profiles__Line *lines = calloc(pp->n_locs + 1, sizeof(*lines));
    Perftools__Profiles__Line **line_ptrs = calloc(pp->n_locs + 1, sizeof(*line_ptrs));
    Perftools__Profiles__Function *funcs = calloc(pp->n_funcs + 1, sizeof(*funcs));
    Perftools__Profiles__Function **func_ptrs = calloc(pp->n_funcs + 1, sizeof(*func_ptrs));
    int64_t comment = pp->comment;
    int r = -ENOMEM;

    if (!maps || !map_ptrs || !locs || !loc_ptrs || !lines || !line_ptrs || !funcs || !func_ptrs)
        goto out;
    types[0].type = STR_SAMPLES;
    types[0].unit = STR_COUNT;
    types[1].type = period.type = STR_CPU;
    types[1].unit = period.unit = STR_NANOSECONDS;
    for (size_t i = 0; i < pp->n_maps; i++) {
        perftools__profiles__mapping__init(&maps[i]);
        maps[i].id = i + 1;
        maps[i].memory_start = pp->maps[i].start;
        maps[i].memory_limit = pp->maps[i].limit;
        maps[i].file_offset = pp->maps[i].offset;
        maps[i].filename = pp->maps[i].filename;
        maps[i].build_id = pp->maps[i].build_id;
        maps[i].has_functions = true;
        map_ptrs[i] = &maps[i];
    }
    for (size_t i = 0; i < pp->n_locs; i++) {
        perftools__profiles__location__init(&locs[i]);
        perftools__profiles__line__init(&lines[i]);
        lines[i].function_id = pp->locs[i].function_id;
        lines[i].line = pp->locs[i].line;
        line_ptrs[i] = &lines[i];
        locs[i].id = i + 1;
        locs[i].mapping_id = pp->locs[i].mapping_id;
        locs[i].n_line = 1;
        locs[i].line = &line_ptrs[i];
        loc_ptrs[i] = &locs[i];
    }
    for (size_t i = 0; i < pp->n_funcs; i++) {
        perftools__profiles__function__init(&funcs[i]);
        funcs[i].id = i + 1;
        /* Our names are already demangled: the system's name is the same. The file is not
         * in our profiles (only the frame's line), so it is left unset. */
        funcs[i].name = funcs[i].system_name = pp->func_name[i];
        func_ptrs[i] = &funcs[i];
    }
    prof.n_sample_type = 2;
    prof.sample_type = type_ptrs;
    prof.default_sample_type = pp->by_samples ? types[0].type : types[1].type;
    prof.period_type = &period;
    prof.period = (int64_t)llround(pp->interval_ms * 1e6);
    if (pp->has_start) {
        prof.time_nanos = (int64_t)llround(pp->start_ms * 1e6);
        prof.duration_nanos = (int64_t)llround((pp->end_ms - pp->start_ms) * 1e6);
    }
    prof.n_comment = comment ? 1 : 0;
    prof.comment = &comment;
    prof.n_mapping = pp->n_maps;
    prof.mapping = map_ptrs;
    prof.n_location = pp->n_locs;
    prof.location = loc_ptrs;
    prof.n_function = pp->n_funcs;
    prof.function = func_ptrs;
    prof.n_string_table = pp->n_str;
    prof.string_table = (char **)pp->str; /* protobuf-c only reads it */
    (void)perftools__profiles__profile__pack_to_buffer(&prof, &sink->base);
    r = sink->err;
out:
    free(maps);
    free(map_ptrs);
    free(locs);
    free(loc_ptrs);
    free(lines);
    free(line_ptrs);
    free(funcs);
    free(func_ptrs);
    return r;
}

/* Packs the samples, SAMPLE_BATCH per Profile message. */
static int pack_samples(const struct pprof *pp, struct gz_sink *sink)
{
    Perftools__Profiles__Label *labels = calloc(pp->n_threads * LABELS_MAX + 1, sizeof(*labels));
    Perftools__Profiles__Label **label_ptrs =
            calloc(pp->n_threads * LABELS_MAX + 1, sizeof(*label_ptrs));
    size_t *n_labels = calloc(pp->n_threads + 1, sizeof(*n_labels));
    Perftools__Profiles__Sample *samples = calloc(SAMPLE_BATCH, sizeof(*samples));
    Perftools__Profiles__Sample **sample_ptrs = calloc(SAMPLE_BATCH, sizeof(*sample_ptrs));
    int64_t(*values)[2] = calloc(SAMPLE_BATCH, sizeof(*values));
    int r = -ENOMEM;

    if (!labels || !label_ptrs || !n_labels || !samples || !sample_ptrs || !values)
        goto out;
    /* Each thread's labels, shared by its samples. */
    for (size_t i = 0; i < pp->n_threads * LABELS_MAX; i++) {
        perftools__profiles__label__init(&labels[i]);
        label_ptrs[i] = &labels[i];
    }
    for (size_t i = 0; i < pp->n_threads; i++) {
        Perftools__Profiles__Label *l = &labels[i * LABELS_MAX];
        size_t n = 0;

        l[n].key = STR_PID;
        l[n++].num = pp->threads[i].pid;
        l[n].key = STR_PROCESS;
        l[n++].str = pp->threads[i].process;
        l[n].key = STR_THREAD;
        l[n++].str = pp->threads[i].thread;
        if (pp->threads[i].command) {
            l[n].key = STR_COMMAND;
            l[n++].str = pp->threads[i].command;
        }
        if (pp->threads[i].tid >= 0) {
            l[n].key = STR_TID;
            l[n++].num = pp->threads[i].tid;
        }
        n_labels[i] = n;
    }
    for (size_t at = 0; at < pp->n_samples && !sink->err; at += SAMPLE_BATCH) {
        Perftools__Profiles__Profile prof = PERFTOOLS__PROFILES__PROFILE__INIT;
        size_t n = pp->n_samples - at < SAMPLE_BATCH ? pp->n_samples - at : SAMPLE_BATCH;

        for (size_t i = 0; i < n; i++) {
            const struct pp_sample *s = &pp->samples[at + i];

            perftools__profiles__sample__init(&samples[i]);
            values[i][0] = s->samples;
            values[i][1] = s->cpu_ns;
            samples[i].n_value = 2;
            samples[i].value = values[i];
            samples[i].n_location_id = s->depth;
            samples[i].location_id = pp->pool + s->at;
            samples[i].label = &label_ptrs[(size_t)s->thread * LABELS_MAX];
            samples[i].n_label = n_labels[s->thread];
            sample_ptrs[i] = &samples[i];
        }
        prof.n_sample = n;
        prof.sample = sample_ptrs;
        (void)perftools__profiles__profile__pack_to_buffer(&prof, &sink->base);
    }
    r = sink->err;
out:
    free(labels);
    free(label_ptrs);
    free(n_labels);
    free(samples);
    free(sample_ptrs);
    free(values);
    return r;
}

/* Writes pp gzipped to path ("-": standard output), replacing path atomically. */
static int write_pprof(struct exporter *x, struct pprof *pp, const char *path)
{
    bool std_out = !path || strcmp(path, "-") == 0;
    struct gz_sink sink = {.base = {.append = gz_append}};
    struct fleetprof_outfile file = {.fd = -1};
    const char *name = std_out ? "standard output" : path;
    struct stat st;
    int fd, r, zr;

    /* zlib closes what it writes: a duplicate, so that the file's own descriptor is still
     * there to be measured and fsynced at the commit. */
    r = std_out ? 0 : fleetprof_outfile_open(&file, path);
    if (r < 0)
        return fail(x, r, "cannot write %s", name);
    fd = dup(std_out ? STDOUT_FILENO : file.fd);
    if (fd < 0) {
        r = -errno;
        fleetprof_outfile_abort(&file);
        return fail(x, r, "cannot write %s", name);
    }
    sink.gz = gzdopen(fd, "wb");
    if (!sink.gz) {
        (void)close(fd);
        fleetprof_outfile_abort(&file);
        return fail(x, -ENOMEM, "cannot write %s", name);
    }
    (void)gzbuffer(sink.gz, 1 << 17);
    r = pack_tables(pp, &sink);
    if (r == 0)
        r = pack_samples(pp, &sink);
    zr = gzclose(sink.gz);
    if (r == 0 && zr != Z_OK)
        r = zr == Z_ERRNO && errno ? -errno : -EIO;
    if (!std_out) {
        if (r == 0 && fstat(file.fd, &st) == 0)
            x->res.bytes += (uint64_t)st.st_size;
        r = fleetprof_outfile_commit(&file, r);
    }
    if (r < 0)
        return fail(x, r, "cannot write %s", name);
    x->res.files++;
    return 0;
}

static void set_interval(struct exporter *x, struct pprof *pp, const struct json_value *v)
{
    double ms;

    if (meta_number(x->doc, v, "interval", &ms) && ms > 0 && ms < 1e6)
        pp->interval_ms = ms;
}

/* The profile's comment: the command line recorded (meta.product). */
static int set_comment(struct exporter *x, struct pprof *pp, const struct json_value *root)
{
    const char *product = json_value_string(
            x->doc, json_object_get(x->doc, json_object_get(x->doc, root, "meta"), "product"),
            NULL);

    pp->comment = product && *product ? str_index(pp, product) : 0;
    return pp->comment < 0 ? -ENOMEM : 0;
}

static int export_process(const struct pstack_process *proc, void *userdata)
{
    struct exporter *x = userdata;
    const struct json_value *root = json_doc_root(x->doc);
    struct pprof single;
    double shutdown;
    int r;

    if (x->split) {
        if (pprof_init(&single) < 0)
            return -ENOMEM;
        x->pp = &single;
        single.by_samples = x->by_samples;
        set_interval(x, &single, root);
        set_interval(x, &single, proc->value);
        if (set_comment(x, &single, root) < 0) {
            pprof_done(&single);
            return -ENOMEM;
        }
    }
    if (proc->info.has_start_time && meta_number(x->doc, proc->value, "shutdownTime", &shutdown))
        extend_span(x->pp, proc->info.start_time, proc->info.start_time + shutdown);
    if (x->cap_func_map)
        memset(x->func_map, 0, x->cap_func_map * sizeof(*x->func_map));
    r = read_libs(x, proc);
    if (r == 0)
        r = pstack_each_thread(&x->funcs, x->doc, proc, export_thread, x);
    if (r == 0)
        x->res.processes++;
    if (r == 0 && x->split) {
        size_t repeat = 1;
        char *path;

        for (size_t i = 0; i < x->res.files; i++)
            repeat += x->pids_written[i] == proc->info.pid;
        if (repeat > 1)
            r = asprintf(&path, "%s/%lld.%zu.pb.gz", x->out_path, (long long)proc->info.pid,
                         repeat);
        else
            r = asprintf(&path, "%s/%lld.pb.gz", x->out_path, (long long)proc->info.pid);
        if (r < 0) {
            r = -ENOMEM;
        } else {
            r = fleetprof_grow((void **)&x->pids_written, &x->cap_pids, x->res.files + 1,
                               sizeof(*x->pids_written));
            if (r == 0) {
                x->pids_written[x->res.files] = proc->info.pid;
                r = write_pprof(x, &single, path);
            }
            free(path);
        }
    }
    if (x->split)
        pprof_done(&single);
    return r;
}

int pprof_export(const struct json_doc *doc, const char *out_path, bool split,
                 enum pprof_weight weight, struct pprof_result *ret, char *why, size_t why_size)
{
    const struct json_value *root = json_doc_root(doc);
    struct exporter x = {.doc = doc,
                         .out_path = out_path,
                         .split = split,
                         .by_samples = weight == PPROF_WEIGHT_SAMPLES,
                         .why = why,
                         .why_size = why_size};
    double start;
    int r;

    if (!doc || !why || !why_size || (split && !out_path))
        return -EINVAL;
    *why = '\0';
    if (split && mkdir(out_path, 0777) < 0 && errno != EEXIST)
        return fail(&x, -errno, "cannot create directory %s", out_path);
    if (!split) {
        if (pprof_init(&x.one) < 0)
            return fail(&x, -ENOMEM, "%s", "");
        x.pp = &x.one;
        x.one.by_samples = x.by_samples;
        set_interval(&x, &x.one, root);
        if (set_comment(&x, &x.one, root) < 0) {
            pprof_done(&x.one);
            return fail(&x, -ENOMEM, "%s", "");
        }
        /* A gathered fleet's top level: when recording started. */
        if (meta_number(doc, root, "startTime", &start))
            extend_span(&x.one, start, start);
    }
    r = pstack_each_process(doc, export_process, &x);
    if (r == 0 && !split && x.one.interval_ms == 0) {
        /* A fleet whose top level gives no interval: its first process's. */
        const struct json_value *subs = json_object_get(doc, root, "processes");

        set_interval(&x, &x.one, json_array_at(doc, subs, 0));
    }
    if (r == 0 && !split)
        r = write_pprof(&x, &x.one, out_path);
    if (r < 0)
        (void)fail(&x, r, "%s", "");
    else
        *ret = x.res;
    if (!split)
        pprof_done(&x.one);
    free(x.pids_written);
    free(x.libs);
    free(x.func_map);
    free(x.stack_canon);
    free(x.canon);
    idmap_done(&x.canon_ids);
    pstack_funcs_done(&x.funcs);
    return r;
}

int pprof_export_file(const char *json_path, const char *out_path, struct pprof_result *ret,
                      char *why, size_t why_size)
{
    struct json_doc *doc;
    char what[400];
    int r;

    r = profile_load(json_path, &doc, what, sizeof(what));
    if (r < 0) {
        (void)snprintf(why, why_size, "%s: %s", json_path, what);
        return r;
    }
    r = pprof_export(doc, out_path, false, PPROF_WEIGHT_CPU, ret, why, why_size);
    json_doc_free(doc);
    return r;
}
