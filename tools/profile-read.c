/* tools/profile-read.c - loading and describing Gecko profiles for the tools. */
#include "tools/profile-read.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "json/reader.h"

int profile_load(const char *path, struct json_doc **ret_doc, char *why, size_t why_size)
{
    struct json_read_error err;
    struct json_doc *doc = NULL;
    const struct json_value *root;
    int r;

    r = json_doc_read_file(path, 0, &doc, &err);
    if (r == -EBADMSG) {
        (void)snprintf(why, why_size, "not JSON: line %lu, column %lu: %s", err.line, err.column,
                       err.message);
        return r;
    }
    if (r < 0) {
        (void)snprintf(why, why_size, "%s", err.message);
        return r;
    }
    root = json_doc_root(doc);
    if (json_value_type(root) != JSON_OBJECT) {
        (void)snprintf(why, why_size, "not a Gecko profile (the top level is not an object)");
        r = -EPROTO;
    } else if (json_value_type(json_object_get(doc, root, "meta")) != JSON_OBJECT) {
        (void)snprintf(why, why_size, "not a Gecko profile (no meta field)");
        r = -EPROTO;
    } else if (json_value_type(json_object_get(doc, root, "threads")) != JSON_ARRAY) {
        (void)snprintf(why, why_size, "not a Gecko profile (no threads array)");
        r = -EPROTO;
    }
    if (r < 0) {
        json_doc_free(doc);
        return r;
    }
    *ret_doc = doc;
    return 0;
}

int profile_value_int(const struct json_doc *doc, const struct json_value *v, int64_t *ret)
{
    const char *s;
    char *end;
    long long ll;

    if (json_value_type(v) == JSON_NUMBER)
        return json_value_int64(doc, v, ret) < 0 ? -EINVAL : 0;
    s = json_value_string(doc, v, NULL);
    if (!s || !*s)
        return -EINVAL;
    errno = 0;
    ll = strtoll(s, &end, 10);
    if (errno || *end)
        return -EINVAL;
    *ret = ll;
    return 0;
}

void profile_process_describe(const struct json_doc *doc, const struct json_value *proc,
                              struct profile_process *ret)
{
    const struct json_value *meta = json_object_get(doc, proc, "meta");
    const struct json_value *threads = json_object_get(doc, proc, "threads");
    const struct json_value *main_thread = NULL;
    const char *s;

    memset(ret, 0, sizeof(*ret));
    ret->pid = -1;
    ret->name = "?";
    ret->threads = json_value_len(threads);
    for (size_t i = 0; i < ret->threads && !main_thread; i++) {
        const struct json_value *t = json_array_at(doc, threads, i);

        s = json_value_string(doc, json_object_get(doc, t, "name"), NULL);
        if (s && !strcmp(s, "GeckoMain"))
            main_thread = t;
    }
    if (profile_value_int(doc, json_object_get(doc, json_object_get(doc, meta, "fleetprof"), "pid"),
                          &ret->pid) < 0 &&
        profile_value_int(doc, json_object_get(doc, main_thread, "pid"), &ret->pid) < 0)
        ret->pid = -1;
    ret->command = json_value_string(doc, json_object_get(doc, meta, "product"), NULL);
    /* The program's name: ours say it in meta.fleetprof (processName, the track's label,
     * carries its arguments too); another producer's, or an older file, in processName. */
    s = json_value_string(
            doc, json_object_get(doc, json_object_get(doc, meta, "fleetprof"), "name"), NULL);
    if (!s)
        s = json_value_string(doc, json_object_get(doc, main_thread, "processName"), NULL);
    if (!s)
        s = ret->command;
    if (s)
        ret->name = s;
    ret->exit = json_value_is_true(
            json_object_get(doc, json_object_get(doc, meta, "fleetprof"), "exit"));
    ret->recovered = json_value_string(
            doc, json_object_get(doc, json_object_get(doc, meta, "fleetprof"), "recovered"), NULL);
    ret->execd_into = json_value_string(
            doc, json_object_get(doc, json_object_get(doc, meta, "fleetprof"), "execdInto"), NULL);
    ret->has_start_time =
            json_value_double(doc, json_object_get(doc, meta, "startTime"), &ret->start_time) == 0;
}

int profile_schema_column(const struct json_doc *doc, const struct json_value *table,
                          const char *name)
{
    int64_t col;

    if (json_value_int64(doc, json_object_get(doc, json_object_get(doc, table, "schema"), name),
                         &col) < 0 ||
        col < 0 || col > 1000)
        return -1;
    return (int)col;
}

bool pid_set_has(const struct pid_set *set, int64_t pid)
{
    for (size_t i = 0; i < set->n; i++)
        if (set->v[i] == pid)
            return true;
    return false;
}

int pid_set_add(struct pid_set *set, int64_t pid)
{
    if (pid_set_has(set, pid))
        return 0;
    if (FLEETPROF_GROW(set->v, set->cap, set->n + 1) < 0)
        return -ENOMEM;
    set->v[set->n++] = pid;
    return 1;
}
