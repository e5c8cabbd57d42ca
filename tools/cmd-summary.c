/* tools/cmd-summary.c - `fleetprof summary FILE [--json] [--top N]`: a profile on one screen.
 *
 * Prints, for the top level and every entry of `processes`: pid, name, exit or live, samples
 * and the top functions by self time (the leaf frame of each sample); the top functions of the
 * whole fleet; the daemon's profileGatheringLog as a timeline plus a digest (who was waited
 * for, who answered, who made no progress, what was dropped and why); and the non-zero
 * problem counters of profilingLog; and, when any process used performance groups, a fleet
 * table of the groups (meta.fleetprof.groups summed over the processes). --json prints the
 * same as one document for scripts.
 * Reads any Gecko profile defensively: a value of the wrong type is skipped, never trusted.
 *
 * profileGatheringLog event conventions (for the daemon's authors; this file only relies on
 * these, and on keywords in the message):
 *
 *   "profileGatheringLog": { "<daemon pid>": { "begin": MS, "events": [EVENT...], "end": MS } }
 *   ("begin_ms"/"end_ms" are accepted too; MS are the daemon's own milliseconds, events are
 *   printed relative to "begin".)
 *
 *   EVENT = [MS, "message"]                              nothing more to say
 *         | [MS, "message", {"key": value, ...}]         preferred: named arguments
 *         | [MS, "message", PID_OR_PIDS, more...]        positional: the first is the pid(s)
 *
 *   A positional pid that the message already spells out ("child 1234 ended", 1234) is not
 *   printed twice.
 *
 *   Named arguments with a meaning: "pid" (one process, number or numeric string), "pids" and
 *   "pending" (arrays of pids), "name" (that process's name), "reason" (why something was
 *   dropped), "bytes". A message may hold "{key}" placeholders, which are replaced by the
 *   argument's value ("asked child {pid} ({name}) for its profile"); the arguments not used
 *   by a placeholder are printed after the message as key=value.
 *
 *   The digest classifies each event by its message, case-insensitively, first match wins:
 *     dropped     "dropped", "drop ", "evicted", "expired", "too large", "rejected",
 *                 "refused", "discard", "lost", "ended without"
 *                 (the reason is the "reason" argument, else the whole event)
 *     no progress "no progress", "gave up", "give up", "giving up", "timed out", "timeout",
 *                 "unresponsive"
 *     answered    "received", "replied", "reply from", "answered", "arrived", "complete",
 *                 "spliced", "added", "got ", "recovered"
 *     waited for  "asked", "ask ", "request", "waiting", "waited", "pending"
 *   and attributes it to the event's pids. "no answer" lists those waited for that neither
 *   answered nor were dropped. Example events:
 *     [0.2, "asked child {pid} ({name}) for its profile", {"pid": 1234, "name": "worker"}]
 *     [1.5, "received profile from {pid}", {"pid": 1234, "bytes": 52311}]
 *     [2004.1, "gave up on pending children: no progress", {"pending": [1236, 1240]}]
 *     [2004.2, "dropped exit profile of {pid}", {"pid": 1237, "reason": "evicted by the limit"}]
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buffer/json-writer.h"
#include "tools/commands.h"
#include "tools/json-read.h"
#include "tools/profile-read.h"

#define DEFAULT_TOP      10
#define MAX_TOP          100000
#define NO_FUNC          UINT32_MAX
#define MAX_PLACEHOLDERS 64 /* named arguments tracked per event; later ones always print */

/* A growing string; a failed allocation latches oom and drops the text. */
struct strbuf {
    char *s; /* owned, NUL-terminated when len > 0 */
    size_t len, cap;
    bool oom;
};

static void sb_add(struct strbuf *sb, const char *data, size_t len)
{
    if (sb->oom)
        return;
    if (sb->cap - sb->len <= len) {
        size_t cap = sb->cap ? sb->cap : 128;
        char *grown;

        while (cap - sb->len <= len)
            cap *= 2;
        grown = realloc(sb->s, cap);
        if (!grown) {
            sb->oom = true;
            return;
        }
        sb->s = grown;
        sb->cap = cap;
    }
    memcpy(sb->s + sb->len, data, len);
    sb->len += len;
    sb->s[sb->len] = '\0';
}

static void sb_adds(struct strbuf *sb, const char *s)
{
    sb_add(sb, s, strlen(s));
}

static const char *sb_str(const struct strbuf *sb)
{
    return sb->len ? sb->s : "";
}

/* Writes len bytes of s for a terminal: control characters (which could move the cursor or
 * change colours: the profile is the user's file, not ours) become '?'. */
static void print_clean(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        (void)putchar(c < 0x20 || c == 0x7f ? '?' : c);
    }
}

static void print_cleans(const char *s)
{
    print_clean(s, strlen(s));
}

/* Functions: one table for the whole file, so the fleet's counts add up across processes. */

struct func {
    char *name; /* owned: the part before " (in lib)", or the whole location */
    char *lib;  /* owned, or NULL when the location names no library */
    size_t name_len, lib_len;
    uint64_t fleet_samples;
    uint64_t proc_samples; /* in the process being counted; reset after it */
    bool touched;          /* on the touched list of the process being counted */
};

struct func_table {
    struct func *v; /* owned */
    size_t n, cap;
    uint32_t *slots; /* owned: open addressing, id + 1, 0 = empty; nslots a power of 2 */
    size_t nslots;
};

static uint64_t hash_bytes(uint64_t h, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t func_hash(const char *name, size_t name_len, const char *lib, size_t lib_len)
{
    uint64_t h = hash_bytes(0xcbf29ce484222325ull, name, name_len);

    h = hash_bytes(h ^ (lib ? 0x5a : 0xa5), "\xff", 1);
    return lib ? hash_bytes(h, lib, lib_len) : h;
}

static bool func_matches(const struct func *f, const char *name, size_t name_len, const char *lib,
                         size_t lib_len)
{
    if (f->name_len != name_len || memcmp(f->name, name, name_len) != 0)
        return false;
    if (!lib || !f->lib)
        return !lib && !f->lib;
    return f->lib_len == lib_len && !memcmp(f->lib, lib, lib_len);
}

static int func_table_grow(struct func_table *t)
{
    size_t nslots = t->nslots ? t->nslots * 2 : 1024;
    uint32_t *slots = calloc(nslots, sizeof(*slots));

    if (!slots)
        return -ENOMEM;
    for (size_t id = 0; id < t->n; id++) {
        const struct func *f = &t->v[id];
        size_t i = func_hash(f->name, f->name_len, f->lib, f->lib_len) & (nslots - 1);

        while (slots[i])
            i = (i + 1) & (nslots - 1);
        slots[i] = (uint32_t)id + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = nslots;
    return 0;
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

/* Returns the id of (name, lib), adding it if new, or NO_FUNC when out of memory. */
static uint32_t func_intern(struct func_table *t, const char *name, size_t name_len,
                            const char *lib, size_t lib_len)
{
    size_t i;
    struct func *f;

    if ((t->n + 1) * 2 > t->nslots && func_table_grow(t) < 0)
        return NO_FUNC;
    i = func_hash(name, name_len, lib, lib_len) & (t->nslots - 1);
    for (; t->slots[i]; i = (i + 1) & (t->nslots - 1))
        if (func_matches(&t->v[t->slots[i] - 1], name, name_len, lib, lib_len))
            return t->slots[i] - 1;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        struct func *grown = realloc(t->v, cap * sizeof(*grown));

        if (!grown)
            return NO_FUNC;
        t->v = grown;
        t->cap = cap;
    }
    f = &t->v[t->n];
    memset(f, 0, sizeof(*f));
    f->name = dup_bytes(name, name_len);
    f->lib = lib ? dup_bytes(lib, lib_len) : NULL;
    if (!f->name || (lib && !f->lib)) {
        free(f->name);
        free(f->lib);
        return NO_FUNC;
    }
    f->name_len = name_len;
    f->lib_len = lib_len;
    t->slots[i] = (uint32_t)t->n + 1;
    return (uint32_t)t->n++;
}

static void func_table_done(struct func_table *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->v[i].name);
        free(t->v[i].lib);
    }
    free(t->v);
    free(t->slots);
}

/* Splits a frame location the way the front-end does for native frames: "func (in lib)",
 * "func (in lib) + 123" and "func (in lib) (file:line)" are func in lib; anything else is a
 * function named by the whole string (labels, "0x..." addresses outside every module). The
 * last " (in " counts: code no symbol covers is "lib+0x1a2c (in lib)", and in the vdso
 * "[vdso]+0x8f0 (called from __vdso_clock_gettime) (in [vdso])" (child/profile/gecko.h). */
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

struct top_entry {
    uint32_t fid;
    uint64_t samples;
};

struct proc_result {
    struct profile_process info; /* strings borrowed from the document */
    uint64_t samples;
    uint64_t bad_samples;  /* stack, frame or string indexes out of range */
    struct top_entry *top; /* owned */
    size_t n_top;
};

/* Performance groups: meta.fleetprof.groups of every process, summed by name. Totals are
 * cumulative per process (a forked child starts at zero), so the fleet's are plain sums. */
#define MAX_GROUP_BUCKETS 64

struct group_sum {
    const char *name; /* borrowed from the document */
    size_t name_len;
    uint64_t cpu_ns, events, slow_events, worst_event_ns, discarded, migrated, stale;
    uint64_t durations[MAX_GROUP_BUCKETS];
    size_t processes; /* that used the group */
};

struct group_table {
    struct group_sum *v; /* owned, indexed by the name's id in names */
    size_t n, cap;
    struct func_table names; /* group names (no library), interned in order: ids are dense */
    uint64_t lower_us[MAX_GROUP_BUCKETS]; /* bucket lower bounds, from the first process */
    size_t buckets;                       /* 0 until a process gave its bounds */
    uint64_t cpu_ns;                      /* all groups */
};

struct summary {
    const struct json_doc *doc; /* borrowed */
    unsigned top_n;
    struct func_table funcs;
    uint32_t *touched; /* owned: ids counted in the current process */
    size_t n_touched, cap_touched;
    struct proc_result *procs; /* owned */
    size_t n_procs;
    uint64_t total_samples;
    uint32_t no_stack, bad_stack; /* pseudo functions */
    struct group_table groups;
    uint64_t fleet_cpu_ns;  /* sum of the samples' threadCPUDelta, in ns */
    bool fleet_cpu_unknown; /* some process's CPU deltas are not in ns or us */
    bool oom;
};

static void count_sample(struct summary *s, uint32_t fid)
{
    struct func *f;

    if (fid == NO_FUNC) {
        s->oom = true;
        return;
    }
    f = &s->funcs.v[fid];
    if (!f->touched) {
        if (s->n_touched == s->cap_touched) {
            size_t cap = s->cap_touched ? s->cap_touched * 2 : 256;
            uint32_t *grown = realloc(s->touched, cap * sizeof(*grown));

            if (!grown) {
                s->oom = true;
                return;
            }
            s->touched = grown;
            s->cap_touched = cap;
        }
        s->touched[s->n_touched++] = fid;
        f->touched = true;
    }
    f->proc_samples++;
    f->fleet_samples++;
}

/* The function of frame index frame in thread t, memoized in frame_fid. */
static uint32_t frame_function(struct summary *s, const struct json_value *frames, int loc_col,
                               const struct json_value *strings, size_t frame, uint32_t *frame_fid)
{
    const struct json_doc *d = s->doc;
    const char *loc, *lib;
    size_t len, name_len, lib_len;
    int64_t idx;

    if (frame_fid[frame] != NO_FUNC)
        return frame_fid[frame];
    if (loc_col < 0 ||
        json_value_int64(d, json_array_at(d, json_array_at(d, frames, frame), (size_t)loc_col),
                         &idx) < 0 ||
        idx < 0 || (uint64_t)idx >= json_value_len(strings) ||
        !(loc = json_value_string(d, json_array_at(d, strings, (size_t)idx), &len)))
        return s->bad_stack;
    split_location(loc, len, &name_len, &lib, &lib_len);
    frame_fid[frame] = func_intern(&s->funcs, loc, name_len, lib, lib_len);
    return frame_fid[frame];
}

/* Counts the self time of every sample of thread t into the current process. */
/* ns per unit of the process's threadCPUDelta column: 1 for "ns", 1000 for "µs"/"us", 0 when
 * it has another unit (CPU cycles) or none. */
static uint64_t cpu_delta_scale(const struct json_doc *d, const struct json_value *proc,
                                const struct json_value *root)
{
    const struct json_value *units =
            json_object_get(d, json_object_get(d, proc, "meta"), "sampleUnits");
    const char *u;

    if (!units) /* sub-process metas may leave it out: the front-end uses the top level's */
        units = json_object_get(d, json_object_get(d, root, "meta"), "sampleUnits");
    u = json_value_string(d, json_object_get(d, units, "threadCPUDelta"), NULL);
    if (!u)
        return 0;
    if (!strcmp(u, "ns"))
        return 1;
    if (!strcmp(u, "\xc2\xb5s") || !strcmp(u, "us"))
        return 1000;
    return 0;
}

/* Adds the thread's CPU time (threadCPUDelta) to the fleet's. */
static void count_thread_cpu(struct summary *s, const struct json_value *t, uint64_t scale)
{
    const struct json_doc *d = s->doc;
    const struct json_value *sm = json_object_get(d, t, "samples");
    const struct json_value *samples = json_object_get(d, sm, "data");
    int col = profile_schema_column(d, sm, "threadCPUDelta");

    if (col < 0)
        return;
    for (size_t i = 0; i < json_value_len(samples); i++) {
        const struct json_value *v = json_array_at(d, json_array_at(d, samples, i), (size_t)col);
        double delta;

        if (json_value_type(v) != JSON_NUMBER)
            continue; /* null: the thread's first sample */
        if (!scale) {
            s->fleet_cpu_unknown = true;
            return;
        }
        if (json_value_double(d, v, &delta) == 0 && delta > 0)
            s->fleet_cpu_ns += (uint64_t)(delta * (double)scale);
    }
}

static struct group_sum *group_find(struct summary *s, const char *name, size_t len)
{
    struct group_table *g = &s->groups;
    uint32_t id = func_intern(&g->names, name, len, NULL, 0);

    if (id == NO_FUNC) {
        s->oom = true;
        return NULL;
    }
    if (id < g->n)
        return &g->v[id];
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 16;
        struct group_sum *v = realloc(g->v, cap * sizeof(*v));

        if (!v) {
            s->oom = true;
            return NULL;
        }
        g->v = v;
        g->cap = cap;
    }
    memset(&g->v[g->n], 0, sizeof(g->v[0]));
    g->v[g->n].name = name;
    g->v[g->n].name_len = len;
    return &g->v[g->n++];
}

/* A non-negative integer member of o, or 0. */
static uint64_t member_u64(const struct json_doc *d, const struct json_value *o, const char *key)
{
    int64_t v;

    if (json_value_int64(d, json_object_get(d, o, key), &v) < 0 || v < 0)
        return 0;
    return (uint64_t)v;
}

/* Adds the process's meta.fleetprof.groups to the fleet's groups. */
static void count_groups(struct summary *s, const struct json_value *proc)
{
    const struct json_doc *d = s->doc;
    const struct json_value *groups = json_object_get(
            d, json_object_get(d, json_object_get(d, proc, "meta"), "fleetprof"), "groups");
    const struct json_value *lower = json_object_get(d, groups, "bucketLowerUs");
    const struct json_value *totals = json_object_get(d, groups, "totals");

    if (!s->groups.buckets && json_value_type(lower) == JSON_ARRAY) {
        size_t n = json_value_len(lower);

        n = n < MAX_GROUP_BUCKETS ? n : MAX_GROUP_BUCKETS;
        for (size_t b = 0; b < n; b++) {
            int64_t v = 0;

            (void)json_value_int64(d, json_array_at(d, lower, b), &v);
            s->groups.lower_us[b] = v < 0 ? 0 : (uint64_t)v;
        }
        s->groups.buckets = n;
    }
    for (size_t i = 0; json_value_type(totals) == JSON_ARRAY && i < json_value_len(totals); i++) {
        const struct json_value *t = json_array_at(d, totals, i);
        const struct json_value *durations = json_object_get(d, t, "durations");
        size_t len;
        const char *name = json_value_string(d, json_object_get(d, t, "name"), &len);
        struct group_sum *g;
        uint64_t cpu, worst;

        if (!name)
            continue;
        g = group_find(s, name, len);
        if (!g)
            return;
        cpu = member_u64(d, t, "cpuNs");
        g->cpu_ns += cpu;
        s->groups.cpu_ns += cpu;
        g->events += member_u64(d, t, "events");
        g->slow_events += member_u64(d, t, "slowEvents");
        g->discarded += member_u64(d, t, "discarded");
        g->migrated += member_u64(d, t, "migrated");
        g->stale += member_u64(d, t, "stale");
        worst = member_u64(d, t, "worstEventNs");
        if (worst > g->worst_event_ns)
            g->worst_event_ns = worst;
        for (size_t b = 0; b < json_value_len(durations) && b < MAX_GROUP_BUCKETS; b++) {
            int64_t v;

            if (json_value_int64(d, json_array_at(d, durations, b), &v) == 0 && v > 0)
                g->durations[b] += (uint64_t)v;
        }
        g->processes++;
    }
}

/* The q-quantile of a group's per-event CPU time from its summed histogram: the upper bound
 * of the bucket holding it (the next bucket's lower bound), never above the worst event; 0
 * without events or bucket bounds. Same rule as child/profile/groups.c. */
static uint64_t group_quantile_ns(const struct group_table *t, const struct group_sum *g, double q)
{
    uint64_t total = 0, seen = 0, rank;
    size_t n = t->buckets;

    for (size_t b = 0; b < n; b++)
        total += g->durations[b];
    if (!total)
        return 0;
    rank = (uint64_t)((double)total * q);
    if ((double)rank < (double)total * q - 1e-6)
        rank++;
    if (rank == 0)
        rank = 1;
    for (size_t b = 0; b < n; b++) {
        seen += g->durations[b];
        if (seen >= rank) {
            uint64_t upper = b + 1 < n ? t->lower_us[b + 1] * 1000 : UINT64_MAX;

            return upper > g->worst_event_ns ? g->worst_event_ns : upper;
        }
    }
    return g->worst_event_ns;
}

static int compare_group_cpu(const void *a, const void *b)
{
    const struct group_sum *ga = a, *gb = b;
    size_t n = ga->name_len < gb->name_len ? ga->name_len : gb->name_len;
    int c;

    if (ga->cpu_ns != gb->cpu_ns)
        return ga->cpu_ns < gb->cpu_ns ? 1 : -1;
    c = memcmp(ga->name, gb->name, n);
    return c ? c : (ga->name_len > gb->name_len) - (ga->name_len < gb->name_len);
}

static void count_thread(struct summary *s, struct proc_result *pr, const struct json_value *t)
{
    const struct json_doc *d = s->doc;
    const struct json_value *strings = json_object_get(d, t, "stringTable");
    const struct json_value *ft = json_object_get(d, t, "frameTable");
    const struct json_value *st = json_object_get(d, t, "stackTable");
    const struct json_value *sm = json_object_get(d, t, "samples");
    const struct json_value *frames = json_object_get(d, ft, "data");
    const struct json_value *stacks = json_object_get(d, st, "data");
    const struct json_value *samples = json_object_get(d, sm, "data");
    int loc_col = profile_schema_column(d, ft, "location");
    int frame_col = profile_schema_column(d, st, "frame");
    int stack_col = profile_schema_column(d, sm, "stack");
    size_t n_frames = json_value_len(frames), n_stacks = json_value_len(stacks);
    size_t n_samples = json_value_type(samples) == JSON_ARRAY ? json_value_len(samples) : 0;
    uint32_t *stack_fid, *frame_fid;

    if (!n_samples)
        return;
    stack_fid = malloc((n_stacks + 1) * sizeof(*stack_fid));
    frame_fid = malloc((n_frames + 1) * sizeof(*frame_fid));
    if (!stack_fid || !frame_fid) {
        s->oom = true;
        goto out;
    }
    memset(stack_fid, 0xff, (n_stacks + 1) * sizeof(*stack_fid)); /* NO_FUNC */
    memset(frame_fid, 0xff, (n_frames + 1) * sizeof(*frame_fid));
    pr->samples += n_samples;
    for (size_t i = 0; i < n_samples && !s->oom; i++) {
        const struct json_value *sv =
                stack_col < 0 ? NULL
                              : json_array_at(d, json_array_at(d, samples, i), (size_t)stack_col);
        int64_t stack, frame;
        uint32_t fid;

        if (json_value_type(sv) == JSON_NULL) {
            count_sample(s, s->no_stack);
            continue;
        }
        if (json_value_int64(d, sv, &stack) < 0 || stack < 0 || (uint64_t)stack >= n_stacks) {
            pr->bad_samples++;
            count_sample(s, s->bad_stack);
            continue;
        }
        fid = stack_fid[stack];
        if (fid == NO_FUNC) {
            /* A stack's leaf is its own frame: no need to walk the prefixes. */
            if (frame_col < 0 ||
                json_value_int64(d,
                                 json_array_at(d, json_array_at(d, stacks, (size_t)stack),
                                               (size_t)frame_col),
                                 &frame) < 0 ||
                frame < 0 || (uint64_t)frame >= n_frames)
                fid = s->bad_stack;
            else
                fid = frame_function(s, frames, loc_col, strings, (size_t)frame, frame_fid);
            stack_fid[stack] = fid;
        }
        if (fid == s->bad_stack)
            pr->bad_samples++;
        count_sample(s, fid);
    }
out:
    free(stack_fid);
    free(frame_fid);
}

static int compare_proc_samples(const void *a, const void *b, void *userdata)
{
    const struct func_table *t = userdata;
    const struct func *fa = &t->v[*(const uint32_t *)a], *fb = &t->v[*(const uint32_t *)b];

    if (fa->proc_samples != fb->proc_samples)
        return fa->proc_samples < fb->proc_samples ? 1 : -1;
    return strcmp(fa->name, fb->name);
}

static int compare_fleet_samples(const void *a, const void *b, void *userdata)
{
    const struct func_table *t = userdata;
    const struct func *fa = &t->v[*(const uint32_t *)a], *fb = &t->v[*(const uint32_t *)b];

    if (fa->fleet_samples != fb->fleet_samples)
        return fa->fleet_samples < fb->fleet_samples ? 1 : -1;
    return strcmp(fa->name, fb->name);
}

static void summarize_process(struct summary *s, const struct json_value *proc)
{
    const struct json_value *threads = json_object_get(s->doc, proc, "threads");
    struct proc_result *pr = &s->procs[s->n_procs++];
    uint64_t scale;
    size_t n;

    memset(pr, 0, sizeof(*pr));
    profile_process_describe(s->doc, proc, &pr->info);
    s->n_touched = 0;
    scale = cpu_delta_scale(s->doc, proc, json_doc_root(s->doc));
    for (size_t i = 0; i < json_value_len(threads); i++) {
        count_thread(s, pr, json_array_at(s->doc, threads, i));
        count_thread_cpu(s, json_array_at(s->doc, threads, i), scale);
    }
    count_groups(s, proc);
    s->total_samples += pr->samples;
    if (s->n_touched > 1) /* qsort_r(NULL, 0, ...) is undefined: a process may have none */
        qsort_r(s->touched, s->n_touched, sizeof(*s->touched), compare_proc_samples, &s->funcs);
    n = s->n_touched < s->top_n ? s->n_touched : s->top_n;
    pr->top = calloc(n ? n : 1, sizeof(*pr->top));
    if (!pr->top) {
        s->oom = true;
        n = 0;
    }
    for (size_t i = 0; i < n; i++) {
        pr->top[i].fid = s->touched[i];
        pr->top[i].samples = s->funcs.v[s->touched[i]].proc_samples;
    }
    pr->n_top = n;
    for (size_t i = 0; i < s->n_touched; i++) {
        s->funcs.v[s->touched[i]].proc_samples = 0;
        s->funcs.v[s->touched[i]].touched = false;
    }
    s->n_touched = 0;
}

static double percent(uint64_t part, uint64_t whole)
{
    double p = whole ? 100.0 * (double)part / (double)whole : 0.0;

    return (double)(int64_t)(p * 100.0 + 0.5) / 100.0; /* two decimals are plenty */
}

/* Gathering log. */

enum event_class { EV_OTHER, EV_DROP, EV_STALL, EV_ANSWER, EV_WAIT };

static const char *const class_json_names[] = {NULL, "dropped", "noProgress", "answered",
                                               "waitedFor"};

static enum event_class classify(const char *message)
{
    static const struct {
        enum event_class cls;
        const char *const words[10];
    } rules[] = {
            {EV_DROP,
             {"dropped", "drop ", "evicted", "expired", "too large", "rejected", "refused",
              "discard", "lost", "ended without"}},
            {EV_STALL,
             {"no progress", "gave up", "give up", "giving up", "timed out", "timeout",
              "unresponsive"}},
            {EV_ANSWER,
             {"received", "replied", "reply from", "answered", "arrived", "complete", "spliced",
              "added", "got ", "recovered"}},
            {EV_WAIT, {"asked", "ask ", "request", "waiting", "waited", "pending"}},
    };

    for (size_t r = 0; r < sizeof(rules) / sizeof(rules[0]); r++)
        for (size_t w = 0; w < 10 && rules[r].words[w]; w++)
            if (strcasestr(message, rules[r].words[w]))
                return rules[r].cls;
    return EV_OTHER;
}

struct named_pid {
    int64_t pid;
    const char *text; /* borrowed from the document (a name) or owned (a drop reason) */
};

struct digest {
    struct pid_set waited, answered, stalled, dropped_pids;
    struct named_pid *drops; /* owned, with owned texts */
    size_t n_drops, cap_drops;
    bool oom;
};

static void digest_done(struct digest *g)
{
    free(g->waited.v);
    free(g->answered.v);
    free(g->stalled.v);
    free(g->dropped_pids.v);
    for (size_t i = 0; i < g->n_drops; i++)
        free((char *)g->drops[i].text);
    free(g->drops);
}

/* Names seen in event arguments ({"pid": P, "name": N}), for pids no profile describes. */
struct name_map {
    struct named_pid *v; /* owned array, borrowed texts */
    size_t n, cap;
};

static void name_map_add(struct name_map *m, int64_t pid, const char *name)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i].pid == pid)
            return;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 16;
        struct named_pid *grown = realloc(m->v, cap * sizeof(*grown));

        if (!grown)
            return; /* names are a nicety */
        m->v = grown;
        m->cap = cap;
    }
    m->v[m->n].pid = pid;
    m->v[m->n++].text = name;
}

static const char *pid_name(const struct summary *s, const struct name_map *m, int64_t pid)
{
    for (size_t i = 0; i < s->n_procs; i++)
        if (s->procs[i].info.pid == pid)
            return s->procs[i].info.name;
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i].pid == pid)
            return m->v[i].text;
    return NULL;
}

/* Appends v as text: strings as they are, numbers as written, arrays as [a, b], objects as
 * {k=v, ...}. depth bounds the recursion on hostile arguments. */
static void append_value(const struct json_doc *d, const struct json_value *v, struct strbuf *sb,
                         int depth)
{
    const char *s;
    size_t len;

    switch (json_value_type(v)) {
    case JSON_STRING:
        s = json_value_string(d, v, &len);
        sb_add(sb, s, len);
        break;
    case JSON_NUMBER:
        s = json_value_number_text(d, v, &len);
        sb_add(sb, s, len);
        break;
    case JSON_TRUE:
        sb_adds(sb, "true");
        break;
    case JSON_FALSE:
        sb_adds(sb, "false");
        break;
    case JSON_ARRAY:
        sb_adds(sb, "[");
        for (size_t i = 0; i < json_value_len(v); i++) {
            if (i)
                sb_adds(sb, ", ");
            if (depth > 4) {
                sb_adds(sb, "...");
                break;
            }
            append_value(d, json_array_at(d, v, i), sb, depth + 1);
        }
        sb_adds(sb, "]");
        break;
    case JSON_OBJECT:
        sb_adds(sb, "{");
        for (size_t i = 0; i < json_value_len(v); i++) {
            if (i)
                sb_adds(sb, ", ");
            if (depth > 4) {
                sb_adds(sb, "...");
                break;
            }
            append_value(d, json_object_key_at(d, v, i), sb, depth + 1);
            sb_adds(sb, "=");
            append_value(d, json_object_value_at(d, v, i), sb, depth + 1);
        }
        sb_adds(sb, "}");
        break;
    default:
        sb_adds(sb, "null");
        break;
    }
}

/* Whether text holds the len bytes of num as a whole number (no digit just before or after). */
static bool contains_number(const char *text, const char *num, size_t len)
{
    for (const char *p = text; *p; p++) {
        if (strncmp(p, num, len) != 0)
            continue;
        if ((p == text || p[-1] < '0' || p[-1] > '9') && (p[len] < '0' || p[len] > '9'))
            return true;
    }
    return false;
}

/* The event's text: the message with {key} placeholders filled from an object argument, then
 * the arguments not used by a placeholder. */
static void render_event(const struct json_doc *d, const struct json_value *ev, struct strbuf *sb)
{
    const struct json_value *named = json_array_at(d, ev, 2);
    const char *msg = json_value_string(d, json_array_at(d, ev, 1), NULL), *full;
    size_t n_named = json_value_type(named) == JSON_OBJECT ? json_value_len(named) : 0;
    bool used[MAX_PLACEHOLDERS] = {false};

    if (!msg)
        msg = "(no message)";
    full = msg;
    while (*msg) {
        const char *open = strchr(msg, '{'), *close = open ? strchr(open, '}') : NULL;
        bool done = false;

        if (!open || !close) {
            sb_adds(sb, msg);
            break;
        }
        sb_add(sb, msg, (size_t)(open - msg));
        for (size_t i = 0; i < n_named && !done; i++) {
            size_t klen;
            const char *k = json_value_string(d, json_object_key_at(d, named, i), &klen);

            if (klen == (size_t)(close - open - 1) && !memcmp(k, open + 1, klen)) {
                append_value(d, json_object_value_at(d, named, i), sb, 0);
                if (i < MAX_PLACEHOLDERS)
                    used[i] = true;
                done = true;
            }
        }
        if (!done)
            sb_add(sb, open, (size_t)(close - open + 1));
        msg = close + 1;
    }
    for (size_t i = 0; i < n_named; i++) {
        if (i < MAX_PLACEHOLDERS && used[i])
            continue;
        sb_adds(sb, "  ");
        append_value(d, json_object_key_at(d, named, i), sb, 0);
        sb_adds(sb, "=");
        append_value(d, json_object_value_at(d, named, i), sb, 0);
    }
    for (size_t i = json_value_type(named) == JSON_OBJECT ? 3 : 2; i < json_value_len(ev); i++) {
        const struct json_value *arg = json_array_at(d, ev, i);
        size_t len;
        const char *num = json_value_number_text(d, arg, &len);

        if (i == 2 && num && contains_number(full, num, len))
            continue; /* the positional pid, already in the message */
        sb_adds(sb, "  ");
        append_value(d, arg, sb, 0);
    }
}

static void add_pid_list(const struct json_doc *d, const struct json_value *list,
                         struct pid_set *out, bool *oom)
{
    int64_t pid;

    for (size_t i = 0; i < json_value_len(list); i++)
        if (profile_value_int(d, json_array_at(d, list, i), &pid) == 0 && pid_set_add(out, pid) < 0)
            *oom = true;
}

/* The pids an event is about: named "pid", "pids", "pending", or the first positional one. */
static void event_pids(const struct json_doc *d, const struct json_value *ev,
                       struct name_map *names, struct pid_set *out, bool *oom)
{
    const struct json_value *a = json_array_at(d, ev, 2);
    int64_t pid;

    out->n = 0;
    if (json_value_type(a) == JSON_OBJECT) {
        if (profile_value_int(d, json_object_get(d, a, "pid"), &pid) == 0) {
            const char *name = json_value_string(d, json_object_get(d, a, "name"), NULL);

            if (pid_set_add(out, pid) < 0)
                *oom = true;
            if (name)
                name_map_add(names, pid, name);
        }
        add_pid_list(d, json_object_get(d, a, "pids"), out, oom);
        add_pid_list(d, json_object_get(d, a, "pending"), out, oom);
    } else if (json_value_type(a) == JSON_ARRAY) {
        add_pid_list(d, a, out, oom);
    } else if (profile_value_int(d, a, &pid) == 0 && pid_set_add(out, pid) < 0) {
        *oom = true;
    }
}

static void digest_add(struct digest *g, enum event_class cls, const struct pid_set *pids,
                       const char *reason)
{
    struct pid_set *set = cls == EV_WAIT     ? &g->waited
                          : cls == EV_ANSWER ? &g->answered
                          : cls == EV_STALL  ? &g->stalled
                          : cls == EV_DROP   ? &g->dropped_pids
                                             : NULL;

    for (size_t i = 0; set && i < pids->n; i++) {
        bool seen = pid_set_has(set, pids->v[i]);

        if (pid_set_add(set, pids->v[i]) < 0)
            g->oom = true;
        if (cls != EV_DROP || seen)
            continue;
        if (g->n_drops == g->cap_drops) {
            size_t cap = g->cap_drops ? g->cap_drops * 2 : 8;
            struct named_pid *grown = realloc(g->drops, cap * sizeof(*grown));

            if (!grown) {
                g->oom = true;
                return;
            }
            g->drops = grown;
            g->cap_drops = cap;
        }
        g->drops[g->n_drops].pid = pids->v[i];
        g->drops[g->n_drops].text = strdup(reason);
        if (!g->drops[g->n_drops].text)
            g->oom = true;
        else
            g->n_drops++;
    }
}

/* Gathering logs: {"<pid>": {"begin", "events", "end"}}, or one log object directly. */
static size_t log_count(const struct json_doc *d, const struct json_value *gl)
{
    if (json_value_type(json_object_get(d, gl, "events")) == JSON_ARRAY)
        return 1;
    return json_value_type(gl) == JSON_OBJECT ? json_value_len(gl) : 0;
}

static const struct json_value *log_at(const struct json_doc *d, const struct json_value *gl,
                                       size_t i, const char **ret_daemon)
{
    if (json_value_type(json_object_get(d, gl, "events")) == JSON_ARRAY) {
        *ret_daemon = "?";
        return gl;
    }
    *ret_daemon = json_value_string(d, json_object_key_at(d, gl, i), NULL);
    return json_object_value_at(d, gl, i);
}

static const struct json_value *log_time(const struct json_doc *d, const struct json_value *log,
                                         const char *key)
{
    char long_key[16];
    const struct json_value *v = json_object_get(d, log, key);

    if (v)
        return v;
    (void)snprintf(long_key, sizeof(long_key), "%s_ms", key);
    return json_object_get(d, log, long_key);
}

struct log_walk {
    double begin;
    bool has_begin;
    struct digest digest;
    struct name_map names;
    struct pid_set pids; /* of the current event */
    struct strbuf text;  /* of the current event */
    bool oom;
};

/* Walks one log's events and builds walk->digest. For each event it fills walk->text and
 * walk->pids, then calls each() with the event's time relative to the log's begin (has_ms is
 * false for an event without a numeric time) and its class. */
typedef void (*log_event_fn)(struct log_walk *walk, bool has_ms, double ms, enum event_class cls,
                             void *userdata);

static void walk_log(const struct json_doc *d, const struct json_value *log, struct log_walk *walk,
                     log_event_fn each, void *userdata)
{
    const struct json_value *events = json_object_get(d, log, "events");

    walk->has_begin = json_value_double(d, log_time(d, log, "begin"), &walk->begin) == 0;
    for (size_t i = 0; i < json_value_len(events); i++) {
        const struct json_value *ev = json_array_at(d, events, i);
        const char *msg = json_value_string(d, json_array_at(d, ev, 1), NULL);
        enum event_class cls = msg ? classify(msg) : EV_OTHER;
        const struct json_value *reason = json_object_get(d, json_array_at(d, ev, 2), "reason");
        double ms = 0;
        bool has_ms = json_value_double(d, json_array_at(d, ev, 0), &ms) == 0;

        if (json_value_type(ev) != JSON_ARRAY)
            continue;
        if (has_ms && walk->has_begin)
            ms -= walk->begin;
        walk->text.len = 0;
        render_event(d, ev, &walk->text);
        event_pids(d, ev, &walk->names, &walk->pids, &walk->oom);
        digest_add(&walk->digest, cls, &walk->pids,
                   json_value_string(d, reason, NULL) ? json_value_string(d, reason, NULL)
                                                      : sb_str(&walk->text));
        if (each)
            each(walk, has_ms, ms, cls, userdata);
    }
}

static void walk_done(struct log_walk *walk)
{
    digest_done(&walk->digest);
    free(walk->names.v);
    free(walk->pids.v);
    free(walk->text.s);
}

/* Pids waited for that neither answered nor were dropped. */
static void no_answer(const struct digest *g, struct pid_set *out, bool *oom)
{
    for (size_t i = 0; i < g->waited.n; i++)
        if (!pid_set_has(&g->answered, g->waited.v[i]) &&
            !pid_set_has(&g->dropped_pids, g->waited.v[i]) && pid_set_add(out, g->waited.v[i]) < 0)
            *oom = true;
}

/* profilingLog counters worth a line when non-zero, looked up in each pid's entry and in the
 * objects inside it (the runtime writes "profileWriter" and "runtime"). */
static const char *const problem_keys[] = {
        "decodeErrors",   "unresolvedFrames",  "unsafeSamplesInLoader", "failedPuts",
        "failedBytes",    "unknownEntryKinds", "unknownCounters",       "symbolizerError",
        "droppedUpdates", "rejectedUpdates",
};

/* Calls each(key, value) for the non-zero problem counters of one profilingLog entry. */
typedef void (*problem_fn)(const char *key, const struct json_value *v, void *userdata);

static void each_problem(const struct json_doc *d, const struct json_value *entry, problem_fn each,
                         void *userdata)
{
    for (size_t k = 0; k < sizeof(problem_keys) / sizeof(problem_keys[0]); k++) {
        const struct json_value *v = json_object_get(d, entry, problem_keys[k]);
        double x;

        for (size_t i = 0; !v && i < json_value_len(entry); i++)
            v = json_object_get(d, json_object_value_at(d, entry, i), problem_keys[k]);
        if (json_value_double(d, v, &x) == 0 && x != 0)
            each(problem_keys[k], v, userdata);
    }
}

/* The controller's "updates": [[pid, ms, +1/-1/0], ...]: how many, how many evictions. */
static void count_updates(const struct json_doc *d, const struct json_value *entry,
                          size_t *ret_updates, size_t *ret_evictions)
{
    const struct json_value *updates = json_object_get(d, entry, "updates");
    int64_t delta;

    *ret_updates = json_value_type(updates) == JSON_ARRAY ? json_value_len(updates) : 0;
    *ret_evictions = 0;
    for (size_t i = 0; i < *ret_updates; i++)
        if (json_value_int64(d, json_array_at(d, json_array_at(d, updates, i), 2), &delta) == 0 &&
            delta < 0)
            (*ret_evictions)++;
}

/* Text output. */

/* "lib!func"; just "lib+0x1a2c" for code no symbol covers, which names its library. */
static void print_function(const struct func *f)
{
    bool names_lib = f->lib && f->name_len > f->lib_len + 3 &&
                     memcmp(f->name, f->lib, f->lib_len) == 0 &&
                     memcmp(f->name + f->lib_len, "+0x", 3) == 0;

    if (f->lib && !names_lib) {
        print_clean(f->lib, f->lib_len);
        (void)putchar('!');
    }
    print_clean(f->name, f->name_len);
}

static void print_top(const struct summary *s, const struct top_entry *top, size_t n,
                      uint64_t whole)
{
    for (size_t i = 0; i < n; i++) {
        (void)printf("  %9llu %6.1f%%  ", (unsigned long long)top[i].samples,
                     percent(top[i].samples, whole));
        print_function(&s->funcs.v[top[i].fid]);
        (void)putchar('\n');
    }
}

static void print_pid_list(const struct summary *s, const struct name_map *names, const char *title,
                           const struct pid_set *set)
{
    if (!set->n)
        return;
    (void)printf("  %-24s", title);
    for (size_t i = 0; i < set->n; i++) {
        const char *name = pid_name(s, names, set->v[i]);

        (void)printf("%s%lld", i ? ", " : "", (long long)set->v[i]);
        if (name) {
            (void)printf(" (");
            print_cleans(name);
            (void)printf(")");
        }
    }
    (void)putchar('\n');
}

static void print_event(struct log_walk *walk, bool has_ms, double ms, enum event_class cls,
                        void *userdata)
{
    char when[32];

    (void)cls;
    (void)userdata;
    if (has_ms)
        (void)snprintf(when, sizeof(when), "%+.1f ms", ms);
    else
        (void)snprintf(when, sizeof(when), "? ms");
    (void)printf("  %12s  ", when);
    print_cleans(sb_str(&walk->text));
    (void)putchar('\n');
}

struct problem_line {
    const struct json_doc *doc;
    size_t printed;
};

static void print_problem(const char *key, const struct json_value *v, void *userdata)
{
    struct problem_line *pl = userdata;
    size_t len;
    const char *text = json_value_number_text(pl->doc, v, &len);

    (void)printf("%s%s ", pl->printed++ ? ", " : " ", key);
    print_clean(text, len);
}

static void count_problem(const char *key, const struct json_value *v, void *userdata)
{
    (void)key;
    (void)v;
    (*(size_t *)userdata)++;
}

static int print_logs(const struct summary *s)
{
    const struct json_doc *d = s->doc;
    const struct json_value *root = json_doc_root(d);
    const struct json_value *gl = json_object_get(d, root, "profileGatheringLog");
    const struct json_value *pl = json_object_get(d, root, "profilingLog");
    bool oom = false;

    for (size_t i = 0; i < log_count(d, gl); i++) {
        const char *daemon;
        const struct json_value *log = log_at(d, gl, i, &daemon);
        struct log_walk walk = {0};
        struct pid_set silent = {0};
        double begin, end;

        (void)printf("\nGathering log of daemon ");
        print_cleans(daemon ? daemon : "?");
        if (json_value_double(d, log_time(d, log, "begin"), &begin) == 0 &&
            json_value_double(d, log_time(d, log, "end"), &end) == 0)
            (void)printf(" (%.1f ms, %zu events)", end - begin,
                         json_value_len(json_object_get(d, log, "events")));
        (void)printf(":\n");
        walk_log(d, log, &walk, print_event, NULL);
        no_answer(&walk.digest, &silent, &oom);
        (void)printf("Digest:\n");
        if (!walk.digest.waited.n && !walk.digest.answered.n && !walk.digest.stalled.n &&
            !walk.digest.n_drops)
            (void)printf("  no process named in the events\n");
        print_pid_list(s, &walk.names, "waited for:", &walk.digest.waited);
        print_pid_list(s, &walk.names, "answered:", &walk.digest.answered);
        print_pid_list(s, &walk.names, "no answer:", &silent);
        print_pid_list(s, &walk.names, "no progress / gave up:", &walk.digest.stalled);
        for (size_t k = 0; k < walk.digest.n_drops; k++) {
            const char *name = pid_name(s, &walk.names, walk.digest.drops[k].pid);

            (void)printf("  %-24s%lld", k ? "" : "dropped:", (long long)walk.digest.drops[k].pid);
            if (name) {
                (void)printf(" (");
                print_cleans(name);
                (void)printf(")");
            }
            (void)printf(": ");
            print_cleans(walk.digest.drops[k].text);
            (void)putchar('\n');
        }
        oom = oom || walk.oom || walk.digest.oom || walk.text.oom;
        free(silent.v);
        walk_done(&walk);
    }

    if (json_value_type(pl) == JSON_OBJECT) {
        bool header = false;

        for (size_t i = 0; i < json_value_len(pl); i++) {
            const char *key = json_value_string(d, json_object_key_at(d, pl, i), NULL);
            const struct json_value *entry = json_object_value_at(d, pl, i);
            size_t updates, evictions, problems = 0;
            struct problem_line line = {.doc = d};
            const struct name_map no_names = {0};
            const char *name;
            int64_t pid;

            count_updates(d, entry, &updates, &evictions);
            each_problem(d, entry, count_problem, &problems);
            if (!problems && !evictions)
                continue; /* only what needs a look */
            if (!header) {
                header = true;
                (void)printf("\nProfiling log (non-zero problem counters):\n");
            }
            (void)printf("  pid ");
            print_cleans(key);
            if (profile_value_int(d, json_object_key_at(d, pl, i), &pid) == 0 &&
                (name = pid_name(s, &no_names, pid))) {
                (void)printf(" (");
                print_cleans(name);
                (void)printf(")");
            }
            (void)printf(":");
            each_problem(d, entry, print_problem, &line);
            if (evictions)
                (void)printf("%s evicted chunks %zu (of %zu controller updates)",
                             line.printed ? "," : "", evictions, updates);
            (void)putchar('\n');
        }
    }
    return oom ? -ENOMEM : 0;
}

static void print_text(const struct summary *s, const char *path)
{
    const struct json_doc *d = s->doc;
    const struct json_value *meta = json_object_get(d, json_doc_root(d), "meta");
    size_t len;
    const char *interval = json_value_number_text(d, json_object_get(d, meta, "interval"), &len);

    print_cleans(path);
    (void)printf(": %zu process%s, %llu samples", s->n_procs, s->n_procs == 1 ? "" : "es",
                 (unsigned long long)s->total_samples);
    if (interval) {
        (void)printf(", interval ");
        print_clean(interval, len);
        (void)printf(" ms");
    }
    (void)putchar('\n');
    for (size_t i = 0; i < s->n_procs; i++) {
        const struct proc_result *pr = &s->procs[i];

        (void)printf("\nProcess ");
        if (pr->info.pid >= 0)
            (void)printf("%lld ", (long long)pr->info.pid);
        print_cleans(pr->info.name);
        (void)printf(" (%s, %zu thread%s, %llu samples)%s\n",
                     pr->info.recovered ? "recovered after it died"
                     : pr->info.exit    ? "exit profile"
                                        : "live",
                     pr->info.threads, pr->info.threads == 1 ? "" : "s",
                     (unsigned long long)pr->samples, pr->n_top ? ":" : "");
        print_top(s, pr->top, pr->n_top, pr->samples);
        if (pr->bad_samples)
            (void)printf("  warning: %llu samples have invalid stack, frame or string indexes\n",
                         (unsigned long long)pr->bad_samples);
    }
}

static void print_fleet(const struct summary *s, const uint32_t *order, size_t n)
{
    size_t with_samples = 0;

    for (size_t i = 0; i < s->n_procs; i++)
        with_samples += s->procs[i].samples > 0;
    if (with_samples < 2 || !n)
        return;
    (void)printf("\nTop functions of the whole fleet (self time, %llu samples):\n",
                 (unsigned long long)s->total_samples);
    (void)printf("  %9s %7s  %s\n", "SAMPLES", "%", "FUNCTION");
    for (size_t i = 0; i < n; i++) {
        const struct func *f = &s->funcs.v[order[i]];

        (void)printf("  %9llu %6.1f%%  ", (unsigned long long)f->fleet_samples,
                     percent(f->fleet_samples, s->total_samples));
        print_function(f);
        (void)putchar('\n');
    }
}

/* A duration for a table cell: "850ns", "12.3us", "4.56ms", "2.10s". */
static const char *format_ns(char *buf, size_t size, uint64_t ns)
{
    if (ns < 1000)
        (void)snprintf(buf, size, "%lluns", (unsigned long long)ns);
    else if (ns < 1000000)
        (void)snprintf(buf, size, "%.1fus", (double)ns / 1e3);
    else if (ns < 1000000000)
        (void)snprintf(buf, size, "%.2fms", (double)ns / 1e6);
    else
        (void)snprintf(buf, size, "%.2fs", (double)ns / 1e9);
    return buf;
}

static void sort_groups(struct summary *s)
{
    if (s->groups.n > 1)
        qsort(s->groups.v, s->groups.n, sizeof(*s->groups.v), compare_group_cpu);
}

/* The fleet's CPU time when every process's CPU deltas could be read, else 0. */
static uint64_t fleet_cpu(const struct summary *s)
{
    return s->fleet_cpu_unknown ? 0 : s->fleet_cpu_ns;
}

static void print_groups(const struct summary *s)
{
    const struct group_table *t = &s->groups;
    uint64_t fleet = fleet_cpu(s), dropped = 0;
    char worst[32], p50[32], p99[32];

    if (!t->n)
        return;
    (void)printf("\nPerformance groups of the fleet (charged CPU, summed over the processes):\n");
    (void)printf("  %-20s %10s %8s %7s %9s %6s %9s %9s %9s %5s\n", "GROUP", "CPU ms", "%GROUPS",
                 "%FLEET", "EVENTS", "SLOW", "WORST", "P50", "P99", "PROCS");
    for (size_t i = 0; i < t->n; i++) {
        const struct group_sum *g = &t->v[i];

        (void)printf("  ");
        print_clean(g->name, g->name_len);
        (void)printf("%*s", g->name_len < 20 ? (int)(20 - g->name_len) : 0, "");
        (void)printf(" %10.1f %7.1f%%", (double)g->cpu_ns / 1e6, percent(g->cpu_ns, t->cpu_ns));
        if (fleet)
            (void)printf(" %6.1f%%", percent(g->cpu_ns, fleet));
        else
            (void)printf(" %7s", "-");
        (void)printf(" %9llu %6llu %9s %9s %9s %5zu\n", (unsigned long long)g->events,
                     (unsigned long long)g->slow_events,
                     format_ns(worst, sizeof(worst), g->worst_event_ns),
                     format_ns(p50, sizeof(p50), group_quantile_ns(t, g, 0.5)),
                     format_ns(p99, sizeof(p99), group_quantile_ns(t, g, 0.99)), g->processes);
        dropped += g->discarded + g->migrated + g->stale;
    }
    (void)printf("  %%FLEET: of the CPU time the profile's samples recorded%s. P50/P99: per-event "
                 "CPU,\n  upper bound of its log2 histogram bucket.",
                 fleet ? "" : " (not known: no CPU deltas in ns)");
    if (dropped)
        (void)printf(" Measures dropped (share outside 0..100 %%,\n  CPU migration, stale "
                     "stopwatch): %llu.",
                     (unsigned long long)dropped);
    (void)putchar('\n');
}

static void write_groups(struct json_writer *w, const struct summary *s)
{
    const struct group_table *t = &s->groups;
    uint64_t fleet = fleet_cpu(s);

    if (!t->n)
        return;
    json_writer_object_begin(w, "groups");
    json_writer_uint(w, "cpuNs", t->cpu_ns);
    if (fleet)
        json_writer_uint(w, "fleetCpuNs", fleet);
    else
        json_writer_null(w, "fleetCpuNs");
    json_writer_array_begin(w, "list");
    for (size_t i = 0; i < t->n; i++) {
        const struct group_sum *g = &t->v[i];

        json_writer_object_begin(w, NULL);
        json_writer_string_len(w, "name", g->name, g->name_len);
        json_writer_uint(w, "cpuNs", g->cpu_ns);
        json_writer_double(w, "groupsPercent", percent(g->cpu_ns, t->cpu_ns));
        if (fleet)
            json_writer_double(w, "fleetPercent", percent(g->cpu_ns, fleet));
        else
            json_writer_null(w, "fleetPercent");
        json_writer_uint(w, "events", g->events);
        json_writer_uint(w, "slowEvents", g->slow_events);
        json_writer_uint(w, "worstEventNs", g->worst_event_ns);
        json_writer_uint(w, "p50Ns", group_quantile_ns(t, g, 0.5));
        json_writer_uint(w, "p99Ns", group_quantile_ns(t, g, 0.99));
        json_writer_uint(w, "discarded", g->discarded);
        json_writer_uint(w, "migrated", g->migrated);
        json_writer_uint(w, "stale", g->stale);
        json_writer_uint(w, "processes", g->processes);
        json_writer_object_end(w);
    }
    json_writer_array_end(w);
    json_writer_object_end(w);
}

/* JSON output. */

static void write_function(struct json_writer *w, const struct func *f, uint64_t samples,
                           uint64_t whole)
{
    json_writer_object_begin(w, NULL);
    json_writer_string_len(w, "function", f->name, f->name_len);
    if (f->lib)
        json_writer_string_len(w, "lib", f->lib, f->lib_len);
    else
        json_writer_null(w, "lib");
    json_writer_uint(w, "samples", samples);
    json_writer_double(w, "percent", percent(samples, whole));
    json_writer_object_end(w);
}

static void write_pid_array(struct json_writer *w, const char *key, const struct pid_set *set)
{
    json_writer_array_begin(w, key);
    for (size_t i = 0; i < set->n; i++)
        json_writer_int(w, NULL, set->v[i]);
    json_writer_array_end(w);
}

static void write_event(struct log_walk *walk, bool has_ms, double ms, enum event_class cls,
                        void *userdata)
{
    struct json_writer *w = userdata;

    json_writer_object_begin(w, NULL);
    if (has_ms)
        json_writer_double(w, "ms", ms);
    else
        json_writer_null(w, "ms");
    json_writer_string(w, "text", sb_str(&walk->text));
    if (class_json_names[cls])
        json_writer_string(w, "class", class_json_names[cls]);
    else
        json_writer_null(w, "class");
    write_pid_array(w, "pids", &walk->pids);
    json_writer_object_end(w);
}

static void write_problem(const char *key, const struct json_value *v, void *userdata)
{
    void **args = userdata;

    json_value_write(args[0], v, args[1], key);
}

static int write_json(const struct summary *s, const char *path, const uint32_t *order, size_t n)
{
    const struct json_doc *d = s->doc;
    const struct json_value *root = json_doc_root(d);
    const struct json_value *gl = json_object_get(d, root, "profileGatheringLog");
    const struct json_value *pl = json_object_get(d, root, "profilingLog");
    struct json_writer *w;
    bool oom = false;
    int r;

    r = json_writer_new_fd(STDOUT_FILENO, &w);
    if (r < 0)
        return r;
    json_writer_object_begin(w, NULL);
    json_writer_string(w, "file", path);
    json_writer_uint(w, "samples", s->total_samples);
    json_writer_array_begin(w, "processes");
    for (size_t i = 0; i < s->n_procs; i++) {
        const struct proc_result *pr = &s->procs[i];

        json_writer_object_begin(w, NULL);
        if (pr->info.pid >= 0)
            json_writer_int(w, "pid", pr->info.pid);
        else
            json_writer_null(w, "pid");
        json_writer_string(w, "name", pr->info.name);
        json_writer_bool(w, "exit", pr->info.exit);
        json_writer_bool(w, "recovered", pr->info.recovered != NULL);
        json_writer_uint(w, "threads", pr->info.threads);
        json_writer_uint(w, "samples", pr->samples);
        json_writer_uint(w, "invalidSamples", pr->bad_samples);
        json_writer_array_begin(w, "top");
        for (size_t k = 0; k < pr->n_top; k++)
            write_function(w, &s->funcs.v[pr->top[k].fid], pr->top[k].samples, pr->samples);
        json_writer_array_end(w);
        json_writer_object_end(w);
    }
    json_writer_array_end(w);

    json_writer_object_begin(w, "fleet");
    json_writer_uint(w, "processes", s->n_procs);
    json_writer_uint(w, "samples", s->total_samples);
    json_writer_array_begin(w, "top");
    for (size_t i = 0; i < n; i++) {
        const struct func *f = &s->funcs.v[order[i]];

        write_function(w, f, f->fleet_samples, s->total_samples);
    }
    json_writer_array_end(w);
    json_writer_object_end(w);
    write_groups(w, s);

    json_writer_array_begin(w, "gatheringLogs");
    for (size_t i = 0; i < log_count(d, gl); i++) {
        const char *daemon;
        const struct json_value *log = log_at(d, gl, i, &daemon);
        struct log_walk walk = {0};
        struct pid_set silent = {0};

        json_writer_object_begin(w, NULL);
        json_writer_string(w, "daemon", daemon ? daemon : "?");
        json_value_write(d, log_time(d, log, "begin"), w, "begin");
        json_value_write(d, log_time(d, log, "end"), w, "end");
        json_writer_array_begin(w, "events");
        walk_log(d, log, &walk, write_event, w);
        json_writer_array_end(w);
        no_answer(&walk.digest, &silent, &oom);
        json_writer_object_begin(w, "digest");
        write_pid_array(w, "waitedFor", &walk.digest.waited);
        write_pid_array(w, "answered", &walk.digest.answered);
        write_pid_array(w, "noAnswer", &silent);
        write_pid_array(w, "noProgress", &walk.digest.stalled);
        json_writer_array_begin(w, "dropped");
        for (size_t k = 0; k < walk.digest.n_drops; k++) {
            json_writer_object_begin(w, NULL);
            json_writer_int(w, "pid", walk.digest.drops[k].pid);
            json_writer_string(w, "reason", walk.digest.drops[k].text);
            json_writer_object_end(w);
        }
        json_writer_array_end(w);
        json_writer_object_end(w);
        json_writer_object_end(w);
        oom = oom || walk.oom || walk.digest.oom || walk.text.oom;
        free(silent.v);
        walk_done(&walk);
    }
    json_writer_array_end(w);

    json_writer_array_begin(w, "profilingLog");
    for (size_t i = 0; json_value_type(pl) == JSON_OBJECT && i < json_value_len(pl); i++) {
        const struct json_value *entry = json_object_value_at(d, pl, i);
        const void *args[2] = {d, w};
        size_t updates, evictions;

        json_writer_object_begin(w, NULL);
        json_value_write(d, json_object_key_at(d, pl, i), w, "pid");
        json_writer_object_begin(w, "problems");
        each_problem(d, entry, write_problem, args);
        json_writer_object_end(w);
        count_updates(d, entry, &updates, &evictions);
        json_writer_uint(w, "controllerUpdates", updates);
        json_writer_uint(w, "controllerEvictions", evictions);
        json_writer_object_end(w);
    }
    json_writer_array_end(w);
    json_writer_object_end(w);
    r = json_writer_finish(w);
    json_writer_free(w);
    if (r == 0 && write(STDOUT_FILENO, "\n", 1) != 1)
        r = -errno;
    return r < 0 ? r : oom ? -ENOMEM : 0;
}

static void usage(FILE *out)
{
    (void)fprintf(out,
                  "Usage: fleetprof summary FILE [--json] [--top N]\n"
                  "Per process: pid, name, exit or live, samples, top functions by self time;\n"
                  "the fleet's top functions; the gathering log with a digest; profilingLog\n"
                  "problem counters; a fleet table of performance groups when any were used.\n"
                  "  --json    one JSON document for scripts\n"
                  "  --top N   functions per list (default 10)\n");
}

int cmd_summary(int argc, char **argv)
{
    static const struct option longopts[] = {{"json", no_argument, NULL, 'j'},
                                             {"top", required_argument, NULL, 't'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    struct summary s = {.top_n = DEFAULT_TOP};
    const struct json_value *root, *procs;
    struct json_doc *doc = NULL;
    uint32_t *order = NULL;
    size_t n_order = 0;
    char why[256];
    bool json = false;
    char *end;
    long top;
    int c, r, status = 1;

    optind = 1;
    while ((c = getopt_long(argc, argv, "ht:", longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            json = true;
            break;
        case 't':
            errno = 0;
            top = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end || top < 0 || top > MAX_TOP) {
                (void)fprintf(stderr,
                              "fleetprof summary: --top wants a number from 0 to %d, not '%s'\n",
                              MAX_TOP, optarg);
                return 2;
            }
            s.top_n = (unsigned)top;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        usage(stderr);
        return 2;
    }
    r = profile_load(argv[optind], &doc, why, sizeof(why));
    if (r < 0) {
        (void)fprintf(stderr, "fleetprof summary: %s: %s\n", argv[optind], why);
        return 1;
    }
    s.doc = doc;
    root = json_doc_root(doc);
    procs = json_object_get(doc, root, "processes");
    s.procs = calloc(1 + json_value_len(procs), sizeof(*s.procs));
    s.no_stack = func_intern(&s.funcs, "(no stack)", 10, NULL, 0);
    s.bad_stack = func_intern(&s.funcs, "(invalid stack)", 15, NULL, 0);
    if (!s.procs || s.no_stack == NO_FUNC || s.bad_stack == NO_FUNC)
        goto oom;
    /* A gathered fleet's top level is the daemon's part: it has no threads of its own and
     * is not a process anyone profiled. */
    if (json_value_len(json_object_get(doc, root, "threads")) > 0 || json_value_len(procs) == 0)
        summarize_process(&s, root);
    for (size_t i = 0; json_value_type(procs) == JSON_ARRAY && i < json_value_len(procs); i++)
        summarize_process(&s, json_array_at(doc, procs, i));
    if (s.oom)
        goto oom;

    order = malloc(s.funcs.n * sizeof(*order));
    if (!order)
        goto oom;
    for (size_t i = 0; i < s.funcs.n; i++)
        if (s.funcs.v[i].fleet_samples)
            order[n_order++] = (uint32_t)i;
    if (n_order > 1)
        qsort_r(order, n_order, sizeof(*order), compare_fleet_samples, &s.funcs);
    if (n_order > s.top_n)
        n_order = s.top_n;
    sort_groups(&s);

    if (json) {
        r = write_json(&s, argv[optind], order, n_order);
    } else {
        print_text(&s, argv[optind]);
        print_fleet(&s, order, n_order);
        print_groups(&s);
        r = print_logs(&s);
        if (fflush(stdout) != 0)
            r = -errno;
    }
    if (r == -ENOMEM)
        goto oom;
    if (r < 0) {
        (void)fprintf(stderr, "fleetprof summary: cannot write the summary: %s\n", strerror(-r));
        goto out;
    }
    status = 0;
    goto out;

oom:
    (void)fprintf(stderr, "fleetprof summary: out of memory reading %s\n", argv[optind]);
out:
    free(order);
    for (size_t i = 0; i < s.n_procs; i++)
        free(s.procs[i].top);
    free(s.procs);
    free(s.touched);
    free(s.groups.v);
    func_table_done(&s.groups.names);
    func_table_done(&s.funcs);
    json_doc_free(doc);
    return status;
}
