/* tools/profile-stacks.c - a profile's samples as stacks of interned functions. */
#include "tools/profile-stacks.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "common/hash.h"
#include "json/reader.h"

static uint64_t func_hash(const char *name, size_t name_len, const char *lib, size_t lib_len)
{
    uint64_t h = fleetprof_fnv1a64(name, name_len, FLEETPROF_FNV64_SEED);

    h = fleetprof_fnv1a64("\xff", 1, h ^ (lib ? 0x5a : 0xa5));
    return lib ? fleetprof_fnv1a64(lib, lib_len, h) : h;
}

/* A function looked for: what fleetprof_map's `same` compares with v[id]. */
struct func_key {
    const char *name, *lib;
    size_t name_len, lib_len;
};

static bool func_same(const void *ctx, const void *key, uint64_t id)
{
    const struct pstack_func *f = &((const struct pstack_func *)ctx)[id];
    const struct func_key *k = key;

    if (f->name_len != k->name_len || memcmp(f->name, k->name, k->name_len) != 0)
        return false;
    if (!k->lib || !f->lib)
        return !k->lib && !f->lib;
    return f->lib_len == k->lib_len && !memcmp(f->lib, k->lib, k->lib_len);
}

static char *dup_bytes(const char *s, size_t len)
{
    char *d = malloc(len + 1);

    if (d) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

uint32_t pstack_func_intern(struct pstack_funcs *t, const char *name, size_t name_len,
                            const char *lib, size_t lib_len)
{
    const struct func_key key = {name, lib, name_len, lib_len};
    uint64_t hash = func_hash(name, name_len, lib, lib_len), id;
    struct pstack_func *f;

    if (fleetprof_map_find(&t->ids, hash, func_same, t->v, &key, &id))
        return (uint32_t)id;
    if (FLEETPROF_GROW(t->v, t->cap, t->n + 1) < 0)
        return PSTACK_NONE;
    f = &t->v[t->n];
    f->name = dup_bytes(name, name_len);
    f->lib = lib ? dup_bytes(lib, lib_len) : NULL;
    /* Into the map last: it names only complete functions. */
    if (!f->name || (lib && !f->lib) ||
        fleetprof_map_set(&t->ids, hash, func_same, t->v, &key, t->n) < 0) {
        free(f->name);
        free(f->lib);
        return PSTACK_NONE;
    }
    f->name_len = name_len;
    f->lib_len = lib_len;
    return (uint32_t)t->n++;
}

/* Splits a frame location the way the front-end does for native frames: "func (in lib)",
 * "func (in lib) + 123" and "func (in lib) (file:line)" are func in lib; anything else is a
 * function named by the whole string (labels, "0x..." addresses outside every module). The
 * last " (in " counts: code no symbol covers is "lib+0x1a2c (in lib)", and in the vdso
 * "[vdso]+0x8f0 (called from __vdso_clock_gettime) (in [vdso])" (profile/gecko.h). */
static void split_location(const char *s, size_t len, size_t *ret_name_len, const char **ret_lib,
                           size_t *ret_lib_len)
{
    static const char marker[] = " (in ";
    const size_t mlen = sizeof(marker) - 1;

    for (size_t i = len >= mlen ? len - mlen + 1 : 0; i-- > 0;) {
        const char *lib, *close;

        if (memcmp(s + i, marker, mlen) != 0)
            continue;
        lib = s + i + mlen;
        close = memchr(lib, ')', len - i - mlen);
        if (!close || close == lib || (close + 1 < s + len && close[1] != ' '))
            continue;
        *ret_name_len = i;
        *ret_lib = lib;
        *ret_lib_len = (size_t)(close - lib);
        return;
    }
    *ret_name_len = len;
    *ret_lib = NULL;
    *ret_lib_len = 0;
}

uint32_t pstack_func_intern_location(struct pstack_funcs *t, const char *loc, size_t len)
{
    size_t name_len, lib_len;
    const char *lib;

    split_location(loc, len, &name_len, &lib, &lib_len);
    return pstack_func_intern(t, loc, name_len, lib, lib_len);
}

void pstack_funcs_done(struct pstack_funcs *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->v[i].name);
        free(t->v[i].lib);
    }
    free(t->v);
    fleetprof_map_free(&t->ids);
    memset(t, 0, sizeof(*t));
}

int pstack_each_process(const struct json_doc *doc, pstack_process_fn fn, void *userdata)
{
    const struct json_value *root = json_doc_root(doc);
    const struct json_value *subs = json_object_get(doc, root, "processes");
    size_t n_subs = json_value_type(subs) == JSON_ARRAY ? json_value_len(subs) : 0;
    int r;

    for (size_t i = 0; i <= n_subs; i++) {
        const struct json_value *v = i == 0 ? root : json_array_at(doc, subs, i - 1);
        const struct json_value *meta = json_object_get(doc, v, "meta");
        const struct json_value *units = json_object_get(doc, meta, "sampleUnits");
        const char *u;
        struct pstack_process p = {.value = v};

        /* A gathered fleet's top level is the daemon's part: it has no threads of its own
         * and is not a process anyone profiled. */
        if (i == 0 && n_subs > 0 && json_value_len(json_object_get(doc, root, "threads")) == 0)
            continue;
        profile_process_describe(doc, v, &p.info);
        if (!units) /* sub-process metas may leave it out: the front-end uses the top level's */
            units = json_object_get(doc, json_object_get(doc, root, "meta"), "sampleUnits");
        u = json_value_string(doc, json_object_get(doc, units, "threadCPUDelta"), NULL);
        p.cpu_known = u && (!strcmp(u, "ns") || !strcmp(u, "\xc2\xb5s") || !strcmp(u, "us"));
        r = fn(&p, userdata);
        if (r < 0)
            return r;
    }
    return 0;
}

/* ns per unit of the process's threadCPUDelta column: 1 for "ns", 1000 for "µs"/"us", 0 when
 * it has another unit (CPU cycles) or none. */
static uint64_t cpu_scale(const struct json_doc *doc, const struct pstack_process *proc)
{
    const struct json_value *root = json_doc_root(doc);
    const struct json_value *units =
            json_object_get(doc, json_object_get(doc, proc->value, "meta"), "sampleUnits");
    const char *u;

    if (!proc->cpu_known)
        return 0;
    if (!units)
        units = json_object_get(doc, json_object_get(doc, root, "meta"), "sampleUnits");
    u = json_value_string(doc, json_object_get(doc, units, "threadCPUDelta"), NULL);
    return u && !strcmp(u, "ns") ? 1 : 1000;
}

/* An index into a table of n rows, or -1. */
static int64_t index_of(const struct json_doc *doc, const struct json_value *v, size_t n)
{
    int64_t i;

    if (profile_value_int(doc, v, &i) < 0 || i < 0 || (uint64_t)i >= n)
        return -1;
    return i;
}

struct thread_arrays {
    uint32_t *prefix, *func, *line, *frame_func, *frame_line;
    uint64_t *samples, *cpu_ns;
};

static void arrays_free(struct thread_arrays *a)
{
    free(a->prefix);
    free(a->func);
    free(a->line);
    free(a->frame_func);
    free(a->frame_line);
    free(a->samples);
    free(a->cpu_ns);
}

/* Resolves frame f of the thread to a function, memoized. PSTACK_NONE: invalid. */
static uint32_t frame_function(struct pstack_funcs *funcs, const struct json_doc *doc,
                               const struct json_value *frames, const struct json_value *strings,
                               int loc_col, int line_col, struct thread_arrays *a, size_t f,
                               bool *oom)
{
    const struct json_value *row;
    const char *loc;
    size_t len;
    int64_t str, line;

    if (a->frame_func[f] != PSTACK_NONE)
        return a->frame_func[f];
    row = json_array_at(doc, frames, f);
    str = index_of(doc, json_array_at(doc, row, (size_t)loc_col), json_value_len(strings));
    if (str < 0 || !(loc = json_value_string(doc, json_array_at(doc, strings, (size_t)str), &len)))
        return PSTACK_NONE;
    a->frame_func[f] = pstack_func_intern_location(funcs, loc, len);
    if (a->frame_func[f] == PSTACK_NONE)
        *oom = true;
    if (line_col >= 0 &&
        json_value_int64(doc, json_array_at(doc, row, (size_t)line_col), &line) == 0 && line > 0 &&
        line <= UINT32_MAX)
        a->frame_line[f] = (uint32_t)line;
    return a->frame_func[f];
}

static int each_thread(struct pstack_funcs *funcs, const struct json_doc *doc,
                       const struct pstack_process *proc, const struct json_value *tv,
                       uint64_t scale, pstack_thread_fn fn, void *userdata)
{
    const struct json_value *strings = json_object_get(doc, tv, "stringTable");
    const struct json_value *ft = json_object_get(doc, tv, "frameTable");
    const struct json_value *st = json_object_get(doc, tv, "stackTable");
    const struct json_value *sm = json_object_get(doc, tv, "samples");
    const struct json_value *frames = json_object_get(doc, ft, "data");
    const struct json_value *stacks = json_object_get(doc, st, "data");
    const struct json_value *samples = json_object_get(doc, sm, "data");
    int loc_col = profile_schema_column(doc, ft, "location");
    int line_col = profile_schema_column(doc, ft, "line");
    int prefix_col = profile_schema_column(doc, st, "prefix");
    int frame_col = profile_schema_column(doc, st, "frame");
    int stack_col = profile_schema_column(doc, sm, "stack");
    int cpu_col = profile_schema_column(doc, sm, "threadCPUDelta");
    int weight_col = profile_schema_column(doc, sm, "weight");
    size_t n_frames = json_value_type(frames) == JSON_ARRAY ? json_value_len(frames) : 0;
    size_t n_stacks = json_value_type(stacks) == JSON_ARRAY ? json_value_len(stacks) : 0;
    size_t n_samples = json_value_type(samples) == JSON_ARRAY ? json_value_len(samples) : 0;
    struct pstack_thread t = {.value = tv, .tid = -1, .n_stacks = n_stacks};
    struct thread_arrays a = {0};
    bool oom = false;
    int r;

    t.name = json_value_string(doc, json_object_get(doc, tv, "name"), NULL);
    if (profile_value_int(doc, json_object_get(doc, tv, "tid"), &t.tid) < 0)
        t.tid = -1;
    if (loc_col < 0 || frame_col < 0 || prefix_col < 0)
        n_frames = n_stacks = t.n_stacks = 0; /* no stack can be valid */
    a.prefix = malloc((n_stacks + 1) * sizeof(*a.prefix));
    a.func = malloc((n_stacks + 1) * sizeof(*a.func));
    a.line = calloc(n_stacks + 1, sizeof(*a.line));
    a.frame_func = malloc((n_frames + 1) * sizeof(*a.frame_func));
    a.frame_line = calloc(n_frames + 1, sizeof(*a.frame_line));
    a.samples = calloc(n_stacks + 1, sizeof(*a.samples));
    a.cpu_ns = calloc(n_stacks + 1, sizeof(*a.cpu_ns));
    if (!a.prefix || !a.func || !a.line || !a.frame_func || !a.frame_line || !a.samples ||
        !a.cpu_ns) {
        arrays_free(&a);
        return -ENOMEM;
    }
    memset(a.frame_func, 0xff, (n_frames + 1) * sizeof(*a.frame_func)); /* PSTACK_NONE */
    for (size_t s = 0; s < n_stacks && !oom; s++) {
        const struct json_value *row = json_array_at(doc, stacks, s);
        const struct json_value *pv = json_array_at(doc, row, (size_t)prefix_col);
        int64_t frame = index_of(doc, json_array_at(doc, row, (size_t)frame_col), n_frames);
        int64_t prefix = json_value_type(pv) == JSON_NULL ? -1 : index_of(doc, pv, s);

        a.prefix[s] = prefix < 0 ? PSTACK_NONE : (uint32_t)prefix;
        a.func[s] = PSTACK_NONE;
        /* Invalid: a bad frame, a prefix that is not an earlier stack, or an invalid
         * prefix (so a valid stack's whole path is valid). */
        if (frame < 0 || (json_value_type(pv) != JSON_NULL && prefix < 0) ||
            (prefix >= 0 && a.func[prefix] == PSTACK_NONE))
            continue;
        a.func[s] = frame_function(funcs, doc, frames, strings, loc_col, line_col, &a,
                                   (size_t)frame, &oom);
        a.line[s] = a.func[s] == PSTACK_NONE ? 0 : a.frame_line[frame];
    }
    for (size_t i = 0; i < n_samples && !oom; i++) {
        const struct json_value *row = json_array_at(doc, samples, i);
        const struct json_value *sv =
                stack_col < 0 ? NULL : json_array_at(doc, row, (size_t)stack_col);
        uint64_t weight = 1, cpu = 0;
        double delta;
        int64_t stack, w;

        if (weight_col >= 0 &&
            json_value_int64(doc, json_array_at(doc, row, (size_t)weight_col), &w) == 0 && w >= 0)
            weight = (uint64_t)w;
        if (cpu_col >= 0 && scale &&
            json_value_double(doc, json_array_at(doc, row, (size_t)cpu_col), &delta) == 0 &&
            delta > 0 && delta < 1e18)
            cpu = (uint64_t)(delta * (double)scale);
        t.samples_total += weight;
        t.cpu_ns_total += cpu;
        if (json_value_type(sv) == JSON_NULL) {
            t.no_stack_samples += weight;
            t.no_stack_cpu_ns += cpu;
            continue;
        }
        stack = index_of(doc, sv, n_stacks);
        if (stack < 0 || a.func[stack] == PSTACK_NONE) {
            t.bad_samples += weight;
            t.bad_cpu_ns += cpu;
            continue;
        }
        a.samples[stack] += weight;
        a.cpu_ns[stack] += cpu;
    }
    if (oom) {
        arrays_free(&a);
        return -ENOMEM;
    }
    t.prefix = a.prefix;
    t.func = a.func;
    t.line = a.line;
    t.samples = a.samples;
    t.cpu_ns = a.cpu_ns;
    r = fn(proc, &t, userdata);
    arrays_free(&a);
    return r;
}

int pstack_each_thread(struct pstack_funcs *funcs, const struct json_doc *doc,
                       const struct pstack_process *proc, pstack_thread_fn fn, void *userdata)
{
    const struct json_value *threads = json_object_get(doc, proc->value, "threads");
    uint64_t scale = cpu_scale(doc, proc);

    for (size_t i = 0; json_value_type(threads) == JSON_ARRAY && i < json_value_len(threads); i++) {
        int r = each_thread(funcs, doc, proc, json_array_at(doc, threads, i), scale, fn, userdata);

        if (r < 0)
            return r;
    }
    return 0;
}

bool pstack_is_profiler(const struct pstack_thread *t, uint32_t s, uint32_t pseudo)
{
    if (pseudo == PSTACK_NONE)
        return false;
    for (; s != PSTACK_NONE; s = t->prefix[s])
        if (t->func[s] == pseudo)
            return true;
    return false;
}
