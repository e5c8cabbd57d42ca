/* tools/merge.c - several process profiles into one fleet profile: `fleetprof merge`, and
 * `recover` and `record` when they have several profiles to fold.
 *
 * Each input is a complete Gecko profile (what the runtime writes to FLEETPROF_OUTPUT or
 * FLEETPROF_DIR/<pid>.json, or an earlier merge). The input with the earliest meta.startTime
 * (the first on the command line on a tie) becomes the top level, kept whole; every other
 * input becomes an entry of its `processes`, kept whole too (its meta included) but with
 * `processes: []`; inputs that are themselves fleets have their sub-processes lifted to the
 * top level, which is the only level the front-end reads. Every `profilingLog` and
 * `profileGatheringLog` entry moves to the top level, keyed by pid as before ("<pid>#2" if a
 * pid comes twice). Values are re-serialized from the parsed documents, numbers from their
 * original text, so nothing changes on the way. The output is written beside OUT and renamed
 * over it (common/outfile.h): OUT is either the old file or the complete new one. Chunk files a
 * killed process left are recovered into profiles first (chunk-files.c).
 */
#include "tools/merge.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/grow.h"
#include "common/outfile.h"
#include "json/reader.h"
#include "json/writer.h"
#include "tools/chunk-files.h"
#include "tools/profile-read.h"

/* Inputs parsed in the first pass stay in memory up to this many bytes of JSON; beyond it,
 * they are parsed again when written (memory is about 2.5 times the text). */
#define KEEP_PARSED_BYTES ((size_t)512 << 20)

/* A sub-process is written two levels below the root (root -> processes -> process). */
#define SUBPROCESS_DEPTH 2

struct input {
    const char *path;     /* borrowed from the caller */
    size_t position;      /* on the command line */
    double start_time;    /* meta.startTime */
    struct json_doc *doc; /* owned: kept from the first pass, or NULL (parse again) */
};

/* Log entries moved to the top level: one memory writer per log, and the keys used so far. */
struct log_merge {
    const char *name;      /* "profilingLog" or "profileGatheringLog" */
    struct json_writer *w; /* owned; NULL until the first entry */
    char **keys;           /* owned copies */
    size_t n_keys, cap_keys;
};

/* The temporary file, removed by the signal handler if the merge is interrupted. */
static char *volatile tmp_path_for_signal;

static void on_fatal_signal(int sig)
{
    char *p = tmp_path_for_signal;

    if (p)
        (void)unlink(p);
    (void)signal(sig, SIG_DFL);
    (void)raise(sig);
}

static bool log_has_key(const struct log_merge *lm, const char *key)
{
    for (size_t i = 0; i < lm->n_keys; i++)
        if (!strcmp(lm->keys[i], key))
            return true;
    return false;
}

static int log_add_key(struct log_merge *lm, const char *key)
{
    if (FLEETPROF_GROW(lm->keys, lm->cap_keys, lm->n_keys + 1) < 0)
        return -ENOMEM;
    lm->keys[lm->n_keys] = strdup(key);
    if (!lm->keys[lm->n_keys])
        return -ENOMEM;
    lm->n_keys++;
    return 0;
}

/* Copies every member of the log object log (from doc) into lm. */
static int log_merge_add(struct log_merge *lm, const struct json_doc *doc,
                         const struct json_value *log)
{
    int r;

    if (json_value_type(log) != JSON_OBJECT)
        return 0;
    if (!lm->w) {
        r = json_writer_new_memory(&lm->w);
        if (r < 0)
            return r;
        json_writer_object_begin(lm->w, NULL);
    }
    for (size_t i = 0; i < json_value_len(log); i++) {
        const char *key = json_value_string(doc, json_object_key_at(doc, log, i), NULL);
        char unique[256];

        (void)snprintf(unique, sizeof(unique), "%s", key);
        for (unsigned n = 2; log_has_key(lm, unique); n++)
            (void)snprintf(unique, sizeof(unique), "%.200s#%u", key, n);
        r = log_add_key(lm, unique);
        if (r < 0)
            return r;
        json_value_write(doc, json_object_value_at(doc, log, i), lm->w, unique);
    }
    return json_writer_error(lm->w);
}

static void log_merge_write(struct log_merge *lm, struct json_writer *w)
{
    if (!lm->w)
        return;
    json_writer_object_end(lm->w);
    json_writer_splice_writer(w, lm->name, lm->w);
}

static void log_merge_done(struct log_merge *lm)
{
    json_writer_free(lm->w);
    for (size_t i = 0; i < lm->n_keys; i++)
        free(lm->keys[i]);
    free(lm->keys);
}

static bool is_moved_key(const char *key)
{
    return !strcmp(key, "processes") || !strcmp(key, "profilingLog") ||
           !strcmp(key, "profileGatheringLog");
}

/* Writes the members of process proc except those merge moves; adds "libs": [] if missing
 * (the front-end needs it). */
static void write_members(const struct json_doc *doc, const struct json_value *proc,
                          struct json_writer *w)
{
    for (size_t i = 0; i < json_value_len(proc); i++) {
        const char *key = json_value_string(doc, json_object_key_at(doc, proc, i), NULL);

        if (!is_moved_key(key))
            json_value_write(doc, json_object_value_at(doc, proc, i), w, key);
    }
    if (json_value_type(json_object_get(doc, proc, "libs")) != JSON_ARRAY) {
        json_writer_array_begin(w, "libs");
        json_writer_array_end(w);
    }
}

struct merge {
    const char *who;       /* the command, for messages: "merge", "recover", "record" */
    struct json_writer *w; /* borrowed: the output */
    struct log_merge logs[2];
    const struct json_doc *top_doc; /* borrowed: for the categories check */
    const struct json_value *top_categories;
    size_t processes;    /* written, the top level included */
    struct pid_set pids; /* pids written so far, to warn about duplicates */
};

/* Notes proc's pid; warns if an earlier process had it (the front-end would show the threads
 * of both as one process). Returns 0 or -ENOMEM. */
static int note_pid(struct merge *m, const char *path, const struct json_doc *doc,
                    const struct json_value *proc)
{
    struct profile_process info;
    int r;

    profile_process_describe(doc, proc, &info);
    if (info.pid < 0)
        return 0;
    /* An image that exec'd shares its pid with what it became, by design. */
    if (json_object_get(doc, json_object_get(doc, json_object_get(doc, proc, "meta"), "fleetprof"),
                        "execdInto"))
        return 0;
    r = pid_set_add(&m->pids, info.pid);
    if (r == 0)
        (void)fprintf(stderr,
                      "fleetprof %s: warning: %s: pid %lld is already in the output; the "
                      "front-end will show both as one process\n",
                      m->who, path, (long long)info.pid);
    return r < 0 ? r : 0;
}

static int collect_logs(struct merge *m, const struct json_doc *doc, const struct json_value *proc)
{
    int r = log_merge_add(&m->logs[0], doc, json_object_get(doc, proc, "profilingLog"));

    return r < 0 ? r
                 : log_merge_add(&m->logs[1], doc,
                                 json_object_get(doc, proc, "profileGatheringLog"));
}

/* Writes proc as an entry of the top-level processes array, and moves its logs. */
static int write_subprocess(struct merge *m, const char *path, const struct json_doc *doc,
                            const struct json_value *proc)
{
    const struct json_value *cats =
            json_object_get(doc, json_object_get(doc, proc, "meta"), "categories");
    int r;

    if (json_value_type(proc) != JSON_OBJECT ||
        json_value_type(json_object_get(doc, proc, "meta")) != JSON_OBJECT) {
        (void)fprintf(stderr, "fleetprof %s: warning: %s: skipping a sub-process without meta\n",
                      m->who, path);
        return 0;
    }
    if (!json_value_equal(m->top_doc, m->top_categories, doc, cats))
        (void)fprintf(stderr,
                      "fleetprof %s: warning: %s: meta.categories differ from the top level's; the "
                      "front-end uses the top level's for every process\n",
                      m->who, path);
    r = note_pid(m, path, doc, proc);
    if (r < 0)
        return r;
    json_writer_object_begin(m->w, NULL);
    write_members(doc, proc, m->w);
    json_writer_array_begin(m->w, "processes");
    json_writer_array_end(m->w);
    json_writer_object_end(m->w);
    m->processes++;
    return collect_logs(m, doc, proc);
}

/* Writes input's top level as a sub-process, then lifts its own sub-processes. */
static int write_input(struct merge *m, const char *path, const struct json_doc *doc)
{
    const struct json_value *root = json_doc_root(doc);
    const struct json_value *subs = json_object_get(doc, root, "processes");
    int r;

    /* A gathered fleet's top level is its daemon's part: no threads, no process of the
     * fleet. Only its logs move; as an entry of processes it would be an empty process. */
    if (json_value_len(json_object_get(doc, root, "threads")) == 0 && json_value_len(subs) > 0)
        r = collect_logs(m, doc, root);
    else
        r = write_subprocess(m, path, doc, root);
    for (size_t i = 0; r >= 0 && json_value_type(subs) == JSON_ARRAY && i < json_value_len(subs);
         i++)
        r = write_subprocess(m, path, doc, json_array_at(doc, subs, i));
    return r < 0 ? r : json_writer_error(m->w);
}

/* Loads and checks one input; prints why it is skipped. */
static int load_input(struct input *in, unsigned max_depth, const char *who,
                      struct json_doc **ret_doc)
{
    struct json_doc *doc;
    char why[256];
    double start;
    int r;

    r = profile_load(in->path, &doc, why, sizeof(why));
    if (r == -ENOMEM)
        return r;
    if (r < 0) {
        (void)fprintf(stderr, "fleetprof %s: warning: skipping %s: %s\n", who, in->path, why);
        return r;
    }
    if (json_value_double(
                doc,
                json_object_get(doc, json_object_get(doc, json_doc_root(doc), "meta"), "startTime"),
                &start) < 0) {
        (void)fprintf(stderr, "fleetprof %s: warning: skipping %s: no meta.startTime\n", who,
                      in->path);
        json_doc_free(doc);
        return -EPROTO;
    }
    if (json_doc_depth(doc) > max_depth) {
        (void)fprintf(stderr,
                      "fleetprof %s: warning: skipping %s: nested %u levels deep (at most %u)\n",
                      who, in->path, json_doc_depth(doc), max_depth);
        json_doc_free(doc);
        return -EPROTO;
    }
    in->start_time = start;
    *ret_doc = doc;
    return 0;
}

static int compare_inputs(const void *a, const void *b)
{
    const struct input *ia = a, *ib = b;

    if (ia->start_time != ib->start_time)
        return ia->start_time < ib->start_time ? -1 : 1;
    return ia->position < ib->position ? -1 : ia->position > ib->position;
}

int fleetprof_merge(const char *const *paths, size_t n_inputs, const char *out, const char *who,
                    struct merge_result *ret)
{
    const unsigned max_depth = JSON_WRITER_MAX_DEPTH - SUBPROCESS_DEPTH;
    struct merge m = {.who = who,
                      .logs = {{.name = "profilingLog"}, {.name = "profileGatheringLog"}}};
    struct input *inputs = NULL, *top;
    char **recovered = NULL; /* profiles recovered from chunk inputs, next to out */
    struct json_writer *w = NULL;
    struct json_doc *top_doc = NULL;
    const struct json_value *top_root, *top_subs;
    size_t n_usable = 0, kept_bytes = 0, skipped, files = 1;
    struct fleetprof_outfile file = {.fd = -1};
    int r, status = -EIO;

    inputs = calloc(n_inputs, sizeof(*inputs));
    recovered = calloc(n_inputs, sizeof(*recovered));
    if (!inputs || !recovered)
        goto oom;

    /* First pass: which inputs are usable, and when each started. */
    for (size_t i = 0; i < n_inputs; i++) {
        struct input *in = &inputs[n_usable];
        struct json_doc *doc;

        in->path = paths[i];
        in->position = i;
        /* What a process that died without a profile left (FLEETPROF_DIR): recovered first. */
        if (is_chunk_file(in->path)) {
            if (chunk_file_recover_beside(in->path, out, &recovered[i]) < 0)
                continue;
            in->path = recovered[i];
        }
        r = load_input(in, max_depth, who, &doc);
        if (r == -ENOMEM)
            goto oom;
        if (r < 0)
            continue;
        if (kept_bytes + json_doc_size(doc) <= KEEP_PARSED_BYTES) {
            kept_bytes += json_doc_size(doc);
            in->doc = doc;
        } else {
            json_doc_free(doc);
        }
        n_usable++;
    }
    skipped = n_inputs - n_usable;
    if (!n_usable) {
        (void)fprintf(stderr,
                      "fleetprof %s: nothing to merge: none of the %zu input%s is a usable "
                      "profile\n",
                      who, n_inputs, n_inputs == 1 ? "" : "s");
        status = -ENODATA;
        goto out;
    }
    qsort(inputs, n_usable, sizeof(*inputs), compare_inputs);
    top = &inputs[0];
    top_doc = top->doc;
    top->doc = NULL;
    if (!top_doc) {
        r = load_input(top, max_depth, who, &top_doc);
        if (r == -ENOMEM)
            goto oom;
        if (r < 0) {
            (void)fprintf(stderr, "fleetprof %s: %s changed while merging\n", who, top->path);
            goto out;
        }
    }
    top_root = json_doc_root(top_doc);
    top_subs = json_object_get(top_doc, top_root, "processes");
    m.top_doc = top_doc;
    m.top_categories =
            json_object_get(top_doc, json_object_get(top_doc, top_root, "meta"), "categories");

    r = fleetprof_outfile_open(&file, out);
    if (r < 0) {
        (void)fprintf(stderr, "fleetprof %s: cannot create a temporary file next to %s: %s\n", who,
                      out, strerror(-r));
        goto out;
    }
    tmp_path_for_signal = file.tmp;
    (void)signal(SIGINT, on_fatal_signal);
    (void)signal(SIGTERM, on_fatal_signal);
    (void)signal(SIGHUP, on_fatal_signal);
    /* Past a file size limit, write() must fail with EFBIG (and the temp file go) rather than
     * the process die of SIGXFSZ with the temp file left behind. */
    (void)signal(SIGXFSZ, SIG_IGN);

    r = json_writer_new_fd(file.fd, &w);
    if (r < 0)
        goto oom;
    m.w = w;
    /* The top level is a process, unless it is a gathered fleet's daemon part. */
    m.processes = json_value_len(json_object_get(top_doc, top_root, "threads")) > 0 ||
                  json_value_len(json_object_get(top_doc, top_root, "processes")) == 0;
    json_writer_object_begin(w, NULL);
    write_members(top_doc, top_root, w);
    r = note_pid(&m, top->path, top_doc, top_root);
    if (r >= 0)
        r = collect_logs(&m, top_doc, top_root);
    json_writer_array_begin(w, "processes");
    for (size_t i = 0;
         r >= 0 && json_value_type(top_subs) == JSON_ARRAY && i < json_value_len(top_subs); i++)
        r = write_subprocess(&m, top->path, top_doc, json_array_at(top_doc, top_subs, i));
    for (size_t i = 1; r >= 0 && i < n_usable; i++) {
        struct json_doc *doc = inputs[i].doc;

        inputs[i].doc = NULL;
        if (!doc) {
            r = load_input(&inputs[i], max_depth, who, &doc);
            if (r == -ENOMEM)
                break;
            if (r < 0) {
                skipped++;
                r = 0;
                continue;
            }
        }
        r = write_input(&m, inputs[i].path, doc);
        json_doc_free(doc);
        files++;
    }
    json_writer_array_end(w);
    if (r >= 0) {
        log_merge_write(&m.logs[0], w);
        log_merge_write(&m.logs[1], w);
        json_writer_object_end(w);
        r = json_writer_finish(w);
    }
    tmp_path_for_signal = NULL; /* the commit frees the name */
    r = fleetprof_outfile_commit(&file, r < 0 ? r : 0);
    if (r < 0) {
        if (r == -ENOMEM)
            goto oom;
        (void)fprintf(stderr, "fleetprof %s: cannot write %s: %s\n", who, out, strerror(-r));
        status = r;
        goto out;
    }
    (void)printf("fleetprof %s: wrote %s: %zu process%s from %zu file%s", who, out, m.processes,
                 m.processes == 1 ? "" : "es", files, files == 1 ? "" : "s");
    if (skipped)
        (void)printf(", %zu skipped", skipped);
    (void)printf("\n");
    if (ret)
        *ret = (struct merge_result){.processes = m.processes, .files = files, .skipped = skipped};
    status = 0;
    goto out;

oom:
    (void)fprintf(stderr, "fleetprof %s: out of memory\n", who);
    status = -ENOMEM;
out:
    tmp_path_for_signal = NULL;
    fleetprof_outfile_abort(&file);
    json_writer_free(w);
    log_merge_done(&m.logs[0]);
    log_merge_done(&m.logs[1]);
    free(m.pids.v);
    json_doc_free(top_doc);
    for (size_t i = 0; inputs && i < n_inputs; i++)
        json_doc_free(inputs[i].doc);
    free(inputs);
    for (size_t i = 0; recovered && i < n_inputs; i++) {
        if (recovered[i])
            (void)unlink(recovered[i]);
        free(recovered[i]);
    }
    free(recovered);
    return status;
}
