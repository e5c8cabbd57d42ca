/* tools/summary-groups.h - performance groups in `fleetprof summary`: meta.fleetprof.groups
 * of every process, summed by name over the fleet (docs/groups.md). Totals are cumulative
 * per process (a forked child starts at zero), so the fleet's are plain sums.
 */
#ifndef FLEETPROF_TOOLS_SUMMARY_GROUPS_H
#define FLEETPROF_TOOLS_SUMMARY_GROUPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tools/profile-stacks.h"

struct json_doc;
struct json_value;
struct json_writer;

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
    struct pstack_funcs names; /* group names (no library), interned in order: ids are dense */
    uint64_t lower_us[MAX_GROUP_BUCKETS]; /* bucket lower bounds, from the first process */
    size_t buckets;                       /* 0 until a process gave its bounds */
    uint64_t cpu_ns;                      /* all groups */
    bool oom;
};

/* Adds the process profile proc's groups to t. */
void summary_groups_add(struct group_table *t, const struct json_doc *d,
                        const struct json_value *proc);
/* Sorts by CPU, most first. */
void summary_groups_sort(struct group_table *t);
/* The table, with shares of fleet_cpu_ns (0: not known). Nothing when no group was used. */
void summary_groups_print(const struct group_table *t, uint64_t fleet_cpu_ns);
/* The "groups" member of the object being written (none when no group was used). */
void summary_groups_write(const struct group_table *t, struct json_writer *w,
                          uint64_t fleet_cpu_ns);
void summary_groups_done(struct group_table *t);

/* part / whole in percent, rounded to two decimals; 0 when whole is 0. */
double summary_percent(uint64_t part, uint64_t whole);

#endif /* FLEETPROF_TOOLS_SUMMARY_GROUPS_H */
