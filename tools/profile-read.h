/* tools/profile-read.h - reading Gecko profiles (shared/gecko-format.md) in the tools.
 *
 * Loads a file with json/reader.h and checks just enough of its shape to be called a
 * profile; describes a process (pid, name, exit or live); finds table columns by schema.
 * Everything else in a profile is read defensively by the commands themselves: any value
 * may be missing or of the wrong type, since the file comes from the user.
 * Used by `fleetprof summary` and `fleetprof merge`.
 */
#ifndef FLEETPROF_TOOLS_PROFILE_READ_H
#define FLEETPROF_TOOLS_PROFILE_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_doc;
struct json_value;

/* Loads path and checks that it is a Gecko profile: a top-level object with a "meta" object
 * and a "threads" array. On success returns 0 and stores the document in *ret_doc (caller
 * frees it with json_doc_free()). On failure returns a negative errno (-ENOENT, -EACCES...
 * for I/O, -EBADMSG for "not JSON", -EPROTO for "not a Gecko profile", -ENOMEM) and writes
 * one line explaining it, without the path, into why (why_size bytes, NUL-terminated), e.g.
 * "not JSON: line 3, column 14: expected ',' or ']' after an array element". */
int profile_load(const char *path, struct json_doc **ret_doc, char *why, size_t why_size);

/* What the tools show about one process profile (the top level or one of its processes). */
struct profile_process {
    int64_t pid;            /* meta.fleetprof.pid, else the GeckoMain thread's, else -1 */
    const char *name;       /* borrowed from the document: meta.fleetprof.name, else the
                               GeckoMain thread's processName, else meta.product, else "?";
                               may hold control characters */
    const char *command;    /* borrowed: meta.product, the process's command line (its
                             * arguments joined by spaces); NULL if none */
    bool exit;              /* meta.fleetprof.exit is true: an exit profile; else live */
    const char *recovered;  /* meta.fleetprof.recovered: read back from a dead process's
                             * chunks ("chunk file", "shared memory"); NULL if not */
    const char *execd_into; /* meta.fleetprof.execdInto: the image ended by exec into this
                             * program (its life before the exec); NULL if not */
    bool has_start_time;    /* meta.startTime is a number */
    double start_time;      /* meta.startTime, ms since the epoch */
    size_t threads;         /* length of the threads array */
};

/* Describes the process profile proc (an object; anything else gives pid -1, name "?"). */
void profile_process_describe(const struct json_doc *doc, const struct json_value *proc,
                              struct profile_process *ret);

/* The column index of name in table's "schema" object ({"schema": {...}, "data": [...]}), or
 * -1 if the table, its schema or the column is missing or not a small non-negative integer. */
int profile_schema_column(const struct json_doc *doc, const struct json_value *table,
                          const char *name);

/* A number, or a string holding a decimal integer (pids may be either), as an int64_t.
 * Returns 0 or -EINVAL; *ret untouched on failure. */
int profile_value_int(const struct json_doc *doc, const struct json_value *v, int64_t *ret);

/* A small set of pids (processes named in a file or a log), in insertion order. Zero-init
 * to start; free v when done. */
struct pid_set {
    int64_t *v; /* owned */
    size_t n, cap;
};

bool pid_set_has(const struct pid_set *set, int64_t pid);
/* Adds pid unless present. Returns 1 if added, 0 if it was there, -ENOMEM. */
int pid_set_add(struct pid_set *set, int64_t pid);

#endif /* FLEETPROF_TOOLS_PROFILE_READ_H */
