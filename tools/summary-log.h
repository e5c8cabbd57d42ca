/* tools/summary-log.h - the logs a gathered profile carries, for `fleetprof summary`: the
 * daemon's profileGatheringLog (what it asked for, who answered, who was given up on or
 * dropped, and why) and the non-zero problem counters of profilingLog.
 *
 * The event conventions these rely on are described at the top of summary-log.c.
 */
#ifndef FLEETPROF_TOOLS_SUMMARY_LOG_H
#define FLEETPROF_TOOLS_SUMMARY_LOG_H

#include <stddef.h>
#include <stdint.h>

struct json_doc;
struct json_writer;

/* The name of a process the profile describes, or NULL. */
struct summary_names {
    const char *(*name)(int64_t pid, void *userdata);
    void *userdata;
};

/* Writes len bytes of s for a terminal: control characters (which could move the cursor or
 * change colours: the profile is the user's file, not ours) become '?'. */
void summary_print_clean(const char *s, size_t len);
void summary_print_cleans(const char *s);

/* Every gathering log as a timeline with a digest per process, then the profilingLog
 * problems (`summary --log`). Returns 0 or -ENOMEM. */
int summary_log_print(const struct json_doc *doc, const struct summary_names *names);

/* A few lines for the default summary: per daemon, the events counted by kind, then only the
 * events a user must read (no progress, give-ups, timeouts, drops, refusals, errors), each
 * message once with how many times and for which processes; then the problem counters. */
int summary_log_print_digest(const struct json_doc *doc, const struct summary_names *names);

/* The same as JSON members "gatheringLogs" and "profilingLog" of the object being written. */
int summary_log_write_json(const struct json_doc *doc, struct json_writer *w);

#endif /* FLEETPROF_TOOLS_SUMMARY_LOG_H */
