/* profile/groups.h - the totals of one performance group, as the runtime keeps them,
 * the wire carries them and the profile, the daemon and the tools show them.
 *
 * A performance group (fleetprof_group_get) is timed by a cycle-counter stopwatch; at the
 * end of each event its cycles become a share of the event's CPU time (docs/groups.md).
 * Totals are cumulative since the process started (a forked child starts from zero), so
 * a fleet's totals are plain sums over processes.
 */
#ifndef FLEETPROF_PROFILE_GROUPS_H
#define FLEETPROF_PROFILE_GROUPS_H

#include <stddef.h>
#include <stdint.h>

/* Histogram of the CPU time charged to a group per event, log2 from 1 µs: bucket 0 is
 * under 1 µs, bucket b in 1..20 is [2^(b-1), 2^b) µs, and bucket 21 is 2^20 µs (~1.05 s)
 * or more. */
#define PROF_GROUP_BUCKETS  22
#define PROF_GROUP_NAME_MAX 128 /* bytes, without the NUL; longer names are refused */

struct prof_group_totals {
    const char *name;
    uint64_t cpu_ns;         /* charged CPU time: event CPU time x group cycles / event cycles */
    uint64_t cycles;         /* counter cycles of the measures that were charged */
    uint64_t activations;    /* stopwatches started (a group already running in the event
                              * starts none) */
    uint64_t events;         /* events that charged the group */
    uint64_t worst_event_ns; /* most CPU time charged in one event */
    uint64_t slow_events;    /* events that charged at least the slow-event threshold */
    uint64_t discarded;      /* charges dropped: share < 0 or > 100 %, counter ran backwards */
    uint64_t migrated;       /* measures dropped: stopped on another CPU than started on */
    uint64_t stale;          /* stopwatches stopped after their event ended (nested loop) */
    uint64_t durations[PROF_GROUP_BUCKETS];
};

/* The histogram bucket of a per-event charge of ns. */
unsigned prof_group_bucket(uint64_t ns);
/* Bounds of bucket b in ns: [lower, upper); upper is UINT64_MAX for the last bucket. */
uint64_t prof_group_bucket_lower_ns(unsigned b);
uint64_t prof_group_bucket_upper_ns(unsigned b);
/* The q-quantile (0 < q <= 1) of per-event charged time from the histogram: the upper bound
 * of the bucket holding it (the worst event for the last bucket); 0 when there is no event. */
uint64_t prof_group_quantile_ns(const struct prof_group_totals *t, double q);
/* A group's charge for one event: event_cpu_ns x group_cycles / (event_end - event_start)
 * cycles, in *ret_ns. -ERANGE when the share is outside 0..100 % (the counter went back
 * between the event's begin and end, or the group counted more cycles than the event):
 * such a measure is discarded. */
int prof_group_charge(uint64_t event_cpu_ns, uint64_t event_start_cycles, uint64_t event_end_cycles,
                      uint64_t group_cycles, uint64_t *ret_ns);
/* Adds b's counts to a's (name kept; worst is the max). */
void prof_group_totals_add(struct prof_group_totals *a, const struct prof_group_totals *b);
/* Whether a group name is acceptable: 1..PROF_GROUP_NAME_MAX bytes of valid UTF-8 with no
 * control characters (names reach terminals, JSON and other processes). */
int prof_group_name_valid(const char *name, size_t len);

#endif /* FLEETPROF_PROFILE_GROUPS_H */
