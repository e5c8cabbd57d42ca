/* tests/workloads/wl-groups.c - a process that times performance groups, for the fleet view.
 *
 *   wl-groups EVENTS [GROUP...]
 *
 * Runs EVENTS events on the main thread; in each, every GROUP in turn spins ~20 us of CPU
 * under its stopwatch (with no GROUP, the event spins ~20 us and no group is ever used). Then
 * prints the process's own totals of each group as one JSON line
 * ({"pid": N, "groups": {"name": {"cpu_ns": ..., ...}}}), and waits until stdin closes
 * before it exits (normally: the runtime then sends its final group totals). Linked with
 * libfleetprof; FLEETPROF_STARTUP=1 and FLEETPROF_SOCKET connect it to a daemon.
 * WL_GROUPS_SPIN_US sets the spin (default 20); 0 makes a process that is almost all calls
 * of the group API, i.e. the runtime's own code.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "fleetprof.h"

#define MAX_GROUPS 16

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Spins ns of this thread's CPU time; 0 returns at once, without reading the clock. */
static void spin(uint64_t ns)
{
    uint64_t end;

    if (ns == 0)
        return;
    end = thread_cpu_ns() + ns;
    while (thread_cpu_ns() < end)
        ;
}

int main(int argc, char **argv)
{
    fleetprof_group *groups[MAX_GROUPS];
    int n = argc > 2 ? argc - 2 : 0;
    const char *spin_env = getenv("WL_GROUPS_SPIN_US");
    uint64_t spin_ns = spin_env ? strtoull(spin_env, NULL, 10) * 1000 : 20000;
    long events;
    char buf[256];

    if (argc < 2 || n > MAX_GROUPS || (events = strtol(argv[1], NULL, 10)) <= 0) {
        fprintf(stderr, "usage: wl-groups EVENTS [GROUP...]\n");
        return 2;
    }
    for (int g = 0; g < n; g++)
        groups[g] = fleetprof_group_get(argv[g + 2]);
    for (long e = 0; e < events; e++) {
        if (n == 0) {
            spin(spin_ns);
            continue;
        }
        fleetprof_event_begin();
        for (int g = 0; g < n; g++) {
            fleetprof_stopwatch sw = fleetprof_stopwatch_start(groups[g]);

            spin(spin_ns);
            fleetprof_stopwatch_stop(&sw);
        }
        fleetprof_event_end();
    }
    printf("{\"pid\": %d, \"groups\": {", (int)getpid());
    for (int g = 0; g < n; g++) {
        struct fleetprof_group_stats s = {0};

        (void)fleetprof_group_stats(groups[g], &s);
        printf("%s\"%s\": {\"cpu_ns\": %" PRIu64 ", \"cycles\": %" PRIu64
               ", \"activations\": %" PRIu64 ", \"events\": %" PRIu64
               ", \"worst_event_ns\": %" PRIu64 ", \"slow_events\": %" PRIu64
               ", \"discarded\": %" PRIu64 ", \"migrated\": %" PRIu64 ", \"stale\": %" PRIu64
               ", \"durations\": [",
               g ? ", " : "", argv[g + 2], s.cpu_ns, s.cycles, s.activations, s.events,
               s.worst_event_ns, s.slow_events, s.discarded, s.migrated, s.stale);
        for (int b = 0; b < FLEETPROF_GROUP_BUCKETS; b++)
            printf("%s%" PRIu64, b ? ", " : "", s.durations[b]);
        printf("]}");
    }
    printf("}}\n");
    (void)fflush(stdout);
    while (fgets(buf, sizeof(buf), stdin))
        ;
    return 0;
}
