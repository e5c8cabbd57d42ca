/* tools/summary-log.c - the gathering and profiling logs of a profile, for the summary.
 *
 * profileGatheringLog event conventions (for the daemon's authors; the summary only relies on
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
 *   "kind" says what the event tells of its process: "waitedFor", "answered", "dropped",
 *   "noProgress", or "note" (nothing); the digest counts by it. fleetprofd writes every event
 *   so, with the process's name and error only in arguments, never in the message: a process
 *   named "lost-worker" that answered is counted as answered. Without "kind" (files from
 *   before), the digest classifies each event by its message, case-insensitively, first match
 *   wins:
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
#include "tools/summary-log.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "json/reader.h"
#include "json/writer.h"
#include "tools/profile-read.h"

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
    if (FLEETPROF_GROW(sb->s, sb->cap, sb->len + len + 1) < 0) {
        sb->oom = true;
        return;
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

void summary_print_clean(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        (void)putchar(c < 0x20 || c == 0x7f ? '?' : c);
    }
}

void summary_print_cleans(const char *s)
{
    summary_print_clean(s, strlen(s));
}

/* Gathering log. */

enum event_class { EV_OTHER, EV_DROP, EV_STALL, EV_ANSWER, EV_WAIT };

static const char *const class_json_names[] = {NULL, "dropped", "noProgress", "answered",
                                               "waitedFor"};

/* The class an event's "kind" names (the daemon's typed events), or -1 for none. */
static int class_of_kind(const char *kind)
{
    if (!kind)
        return -1;
    if (!strcmp(kind, "note"))
        return EV_OTHER;
    for (size_t c = 1; c < sizeof(class_json_names) / sizeof(class_json_names[0]); c++)
        if (!strcmp(kind, class_json_names[c]))
            return (int)c;
    return -1;
}

/* Files from before typed events: the class from the message's words. */
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
    if (FLEETPROF_GROW(m->v, m->cap, m->n + 1) < 0)
        return; /* names are a nicety */
    m->v[m->n].pid = pid;
    m->v[m->n++].text = name;
}

static const char *pid_name(const struct summary_names *s, const struct name_map *m, int64_t pid)
{
    const char *known = s && s->name ? s->name(pid, s->userdata) : NULL;

    if (known)
        return known;
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
    case JSON_OBJECT: {
        bool object = json_value_type(v) == JSON_OBJECT;

        sb_adds(sb, object ? "{" : "[");
        for (size_t i = 0; i < json_value_len(v); i++) {
            if (i)
                sb_adds(sb, ", ");
            if (depth > 4) {
                sb_adds(sb, "...");
                break;
            }
            if (object) {
                append_value(d, json_object_key_at(d, v, i), sb, depth + 1);
                sb_adds(sb, "=");
                append_value(d, json_object_value_at(d, v, i), sb, depth + 1);
            } else {
                append_value(d, json_array_at(d, v, i), sb, depth + 1);
            }
        }
        sb_adds(sb, object ? "}" : "]");
        break;
    }
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
        size_t klen;
        const char *k = json_value_string(d, json_object_key_at(d, named, i), &klen);

        if ((i < MAX_PLACEHOLDERS && used[i]) || (k && klen == 4 && !memcmp(k, "kind", 4)))
            continue; /* said by the text, or by the digest's counts */
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
        if (FLEETPROF_GROW(g->drops, g->cap_drops, g->n_drops + 1) < 0) {
            g->oom = true;
            return;
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
    const char *message; /* of the current event, before its placeholders are filled */
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
        const struct json_value *named = json_array_at(d, ev, 2);
        int kind = class_of_kind(json_value_string(d, json_object_get(d, named, "kind"), NULL));
        enum event_class cls = kind >= 0 ? (enum event_class)kind : msg ? classify(msg) : EV_OTHER;
        const struct json_value *reason = json_object_get(d, named, "reason");
        double ms = 0;
        bool has_ms = json_value_double(d, json_array_at(d, ev, 0), &ms) == 0;

        if (json_value_type(ev) != JSON_ARRAY)
            continue;
        if (has_ms && walk->has_begin)
            ms -= walk->begin;
        walk->text.len = 0;
        walk->message = msg ? msg : "(no message)";
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

static void print_pid_list(const struct summary_names *s, const struct name_map *names,
                           const char *title, const struct pid_set *set)
{
    if (!set->n)
        return;
    (void)printf("  %-24s", title);
    for (size_t i = 0; i < set->n; i++) {
        const char *name = pid_name(s, names, set->v[i]);

        (void)printf("%s%lld", i ? ", " : "", (long long)set->v[i]);
        if (name) {
            (void)printf(" (");
            summary_print_cleans(name);
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
    summary_print_cleans(sb_str(&walk->text));
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
    summary_print_clean(text, len);
}

static void count_problem(const char *key, const struct json_value *v, void *userdata)
{
    (void)key;
    (void)v;
    (*(size_t *)userdata)++;
}

int summary_log_print(const struct json_doc *d, const struct summary_names *s)
{
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
        summary_print_cleans(daemon ? daemon : "?");
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
                summary_print_cleans(name);
                (void)printf(")");
            }
            (void)printf(": ");
            summary_print_cleans(walk.digest.drops[k].text);
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
            summary_print_cleans(key);
            if (profile_value_int(d, json_object_key_at(d, pl, i), &pid) == 0 &&
                (name = pid_name(s, &no_names, pid))) {
                (void)printf(" (");
                summary_print_cleans(name);
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

int summary_log_write_json(const struct json_doc *d, struct json_writer *w)
{
    const struct json_value *root = json_doc_root(d);
    const struct json_value *gl = json_object_get(d, root, "profileGatheringLog");
    const struct json_value *pl = json_object_get(d, root, "profilingLog");
    bool oom = false;

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
    return oom ? -ENOMEM : 0;
}

/* The digest: events a user must read, each message once. */

struct notable {
    const char *message; /* borrowed: the event's message before its placeholders are filled */
    const char *example; /* owned: the first such event's text */
    size_t count;
    struct pid_set pids;
};

struct notables {
    struct notable *v; /* owned */
    size_t n, cap;
    size_t by_class[5];
    bool oom;
};

/* Whether an event no rule classifies still says something went wrong. */
static bool says_error(const char *message)
{
    static const char *const words[] = {"error", "fail",    "cannot", "can't", "invalid",
                                        "refus", "corrupt", "crash",  "killed"};

    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strcasestr(message, words[i]))
            return true;
    return false;
}

/* Whether two messages differ at most in their numbers ("child 12 ended", "child 345
 * ended"): daemons often write the pid into the text rather than as an argument. */
static bool same_but_numbers(const char *a, const char *b)
{
    while (*a && *b) {
        bool da = *a >= '0' && *a <= '9', db = *b >= '0' && *b <= '9';

        if (da && db) {
            while (*a >= '0' && *a <= '9')
                a++;
            while (*b >= '0' && *b <= '9')
                b++;
            continue;
        }
        if (*a++ != *b++)
            return false;
    }
    return *a == *b;
}

static void note_event(struct log_walk *walk, bool has_ms, double ms, enum event_class cls,
                       void *userdata)
{
    struct notables *ns = userdata;
    struct notable *n = NULL;

    (void)has_ms;
    (void)ms;
    ns->by_class[cls]++;
    if (cls != EV_DROP && cls != EV_STALL && !(cls == EV_OTHER && says_error(walk->message)))
        return;
    for (size_t i = 0; i < ns->n && !n; i++)
        if (same_but_numbers(ns->v[i].message, walk->message))
            n = &ns->v[i];
    if (!n) {
        if (FLEETPROF_GROW(ns->v, ns->cap, ns->n + 1) < 0) {
            ns->oom = true;
            return;
        }
        n = &ns->v[ns->n++];
        memset(n, 0, sizeof(*n));
        n->message = walk->message;
        n->example = strdup(sb_str(&walk->text));
        if (!n->example)
            ns->oom = true;
    }
    n->count++;
    for (size_t i = 0; i < walk->pids.n; i++)
        if (pid_set_add(&n->pids, walk->pids.v[i]) < 0)
            ns->oom = true;
}

/* "pid (name), pid (name) and N more". */
static void print_some_pids(const struct summary_names *s, const struct name_map *names,
                            const struct pid_set *set)
{
    const size_t shown = 4;

    for (size_t i = 0; i < set->n && i < shown; i++) {
        const char *name = pid_name(s, names, set->v[i]);

        (void)printf("%s%lld", i ? ", " : "", (long long)set->v[i]);
        if (name) {
            (void)printf(" (");
            summary_print_cleans(name);
            (void)printf(")");
        }
    }
    if (set->n > shown)
        (void)printf(" and %zu more", set->n - shown);
}

struct problem_sum {
    const struct json_doc *doc;
    double totals[sizeof(problem_keys) / sizeof(problem_keys[0])];
    size_t procs[sizeof(problem_keys) / sizeof(problem_keys[0])];
};

static void sum_problem(const char *key, const struct json_value *v, void *userdata)
{
    struct problem_sum *ps = userdata;
    double x;

    for (size_t k = 0; k < sizeof(problem_keys) / sizeof(problem_keys[0]); k++)
        if (!strcmp(problem_keys[k], key) && json_value_double(ps->doc, v, &x) == 0) {
            ps->totals[k] += x;
            ps->procs[k]++;
        }
}

/* One line: each non-zero problem counter summed over the processes. */
static void print_problem_digest(const struct json_doc *d)
{
    const struct json_value *pl = json_object_get(d, json_doc_root(d), "profilingLog");
    struct problem_sum ps = {.doc = d};
    size_t evictions = 0, evicting = 0, printed = 0;

    for (size_t i = 0; json_value_type(pl) == JSON_OBJECT && i < json_value_len(pl); i++) {
        const struct json_value *entry = json_object_value_at(d, pl, i);
        size_t updates, ev;

        each_problem(d, entry, sum_problem, &ps);
        count_updates(d, entry, &updates, &ev);
        evictions += ev;
        evicting += ev > 0;
    }
    for (size_t k = 0; k < sizeof(problem_keys) / sizeof(problem_keys[0]); k++) {
        if (!ps.procs[k])
            continue;
        (void)printf("%s %s %.0f (%zu process%s)",
                     printed++ ? "," : "\nProblems (profilingLog):", problem_keys[k], ps.totals[k],
                     ps.procs[k], ps.procs[k] == 1 ? "" : "es");
    }
    if (evictions)
        (void)printf("%s evicted chunks %zu (%zu log%s)",
                     printed++ ? "," : "\nProblems (profilingLog):", evictions, evicting,
                     evicting == 1 ? "" : "s");
    if (printed)
        (void)printf(".\n  --log lists them by process.\n");
}

int summary_log_print_digest(const struct json_doc *d, const struct summary_names *s)
{
    const struct json_value *gl = json_object_get(d, json_doc_root(d), "profileGatheringLog");
    bool oom = false;

    for (size_t i = 0; i < log_count(d, gl); i++) {
        const char *daemon;
        const struct json_value *log = log_at(d, gl, i, &daemon);
        struct log_walk walk = {0};
        struct notables ns = {0};
        struct pid_set silent = {0};
        double begin, end;

        walk_log(d, log, &walk, note_event, &ns);
        no_answer(&walk.digest, &silent, &oom);
        (void)printf("\nGathering (daemon ");
        summary_print_cleans(daemon ? daemon : "?");
        if (json_value_double(d, log_time(d, log, "begin"), &begin) == 0 &&
            json_value_double(d, log_time(d, log, "end"), &end) == 0)
            (void)printf(", %.1f ms", end - begin);
        (void)printf(", %zu events): answered %zu, no answer %zu, no progress %zu, "
                     "dropped %zu.\n",
                     json_value_len(json_object_get(d, log, "events")), walk.digest.answered.n,
                     silent.n, walk.digest.stalled.n, walk.digest.dropped_pids.n);
        if (silent.n) {
            (void)printf("  no answer from ");
            print_some_pids(s, &walk.names, &silent);
            (void)putchar('\n');
        }
        for (size_t k = 0; k < ns.n; k++) {
            const struct notable *n = &ns.v[k];

            (void)printf("  %zux ", n->count);
            summary_print_cleans(n->example);
            if (n->count > 1 && n->pids.n) {
                (void)printf("\n       (all %zu: ", n->count);
                print_some_pids(s, &walk.names, &n->pids);
                (void)printf(")");
            }
            (void)putchar('\n');
            free((char *)n->example);
            free(n->pids.v);
        }
        oom = oom || walk.oom || walk.digest.oom || walk.text.oom || ns.oom;
        free(ns.v);
        free(silent.v);
        walk_done(&walk);
    }
    print_problem_digest(d);
    return oom ? -ENOMEM : 0;
}
