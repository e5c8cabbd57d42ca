/* tests/workloads/wl-groups-split.c - a process whose three performance groups split its CPU
 * 50/30/20 by construction, for `fleetprof top` (tests/integration/test-top.py).
 *
 *   wl-groups-split ROUNDS [IDLE_MS]    ROUNDS 0: until SIGTERM/SIGINT
 *
 * Linked with libfleetprof; fleetprof_init() joins the daemon of FLEETPROF_SOCKET. Three
 * threads, one group each ("top-50", "top-30", "top-20"); in each round every thread runs
 * one event of 10 stopwatch slices spinning on its own thread-CPU clock, 2.5, 1.5 and 1 ms
 * in all, so each group fills its events and preemption moves no cycles between groups (the
 * 2-point accuracy design of test-groups' test_accuracy_threads). A barrier starts each
 * round, so the split holds over any interval of many rounds, not only in the end; IDLE_MS
 * of sleep after each round keeps a fleet from saturating a small machine. At the end the
 * process prints its own totals (fleetprof_group_stats) as one JSON line on stdout, then
 * returns from main (the runtime sends its final group stats at exit).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "fleetprof.h"

#define GROUPS 3
#define SLICES 10

static const char *const names[GROUPS] = {"top-50", "top-30", "top-20"};
static const uint64_t event_ns[GROUPS] = {2500000, 1500000, 1000000};

static pthread_barrier_t round_start;
static atomic_int stop;       /* set by SIGTERM/SIGINT */
static atomic_int round_stop; /* the stop decision of the current round, for all threads */
static long rounds, idle_ms;
static fleetprof_group *groups[GROUPS];

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void spin_cpu(uint64_t ns)
{
    uint64_t end = thread_cpu_ns() + ns;

    while (thread_cpu_ns() < end) {
    }
}

/* Sleeps ms whatever interrupts it: the sampler's signal ends a plain nanosleep early
 * (it signals a thread that ran since its last tick), and the idle time with it. */
static void idle(long ms)
{
    struct timespec until;

    (void)clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR && !stop) {
    }
}

static void on_stop(int sig)
{
    (void)sig;
    atomic_store(&stop, 1);
}

static void *worker(void *arg)
{
    int g = (int)(intptr_t)arg;

    for (long r = 0; rounds == 0 || r < rounds; r++) {
        /* Everyone sees the same stop decision: one thread reads it for all. */
        if (pthread_barrier_wait(&round_start) == PTHREAD_BARRIER_SERIAL_THREAD)
            atomic_store(&round_stop, atomic_load(&stop));
        (void)pthread_barrier_wait(&round_start);
        if (atomic_load(&round_stop))
            break;
        fleetprof_event_begin();
        for (int s = 0; s < SLICES; s++) {
            FLEETPROF_GROUP(groups[g]);
            spin_cpu(event_ns[g] / SLICES);
        }
        fleetprof_event_end();
        if (idle_ms > 0 && g == 0)
            idle(idle_ms);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t th[GROUPS];
    struct sigaction sa = {.sa_handler = on_stop};

    if (argc < 2) {
        fprintf(stderr, "usage: wl-groups-split ROUNDS [IDLE_MS]\n");
        return 2;
    }
    rounds = strtol(argv[1], NULL, 10);
    idle_ms = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
    (void)sigaction(SIGTERM, &sa, NULL);
    (void)sigaction(SIGINT, &sa, NULL);
    if (fleetprof_init() < 0) {
        fprintf(stderr, "wl-groups-split: fleetprof_init failed\n");
        return 1;
    }
    for (int g = 0; g < GROUPS; g++)
        groups[g] = fleetprof_group_get(names[g]);
    if (pthread_barrier_init(&round_start, NULL, GROUPS) != 0)
        return 1;
    for (int g = 0; g < GROUPS; g++)
        if (pthread_create(&th[g], NULL, worker, (void *)(intptr_t)g) != 0)
            return 1;
    for (int g = 0; g < GROUPS; g++)
        (void)pthread_join(th[g], NULL);

    printf("{\"pid\":%d,\"groups\":{", (int)getpid());
    for (int g = 0; g < GROUPS; g++) {
        struct fleetprof_group_stats s;

        if (fleetprof_group_stats(groups[g], &s) < 0)
            return 1;
        printf("%s\"%s\":{\"cpu_ns\":%llu,\"events\":%llu,\"activations\":%llu,"
               "\"slow_events\":%llu,\"migrated\":%llu}",
               g ? "," : "", names[g], (unsigned long long)s.cpu_ns, (unsigned long long)s.events,
               (unsigned long long)s.activations, (unsigned long long)s.slow_events,
               (unsigned long long)s.migrated);
    }
    printf("}}\n");
    (void)fflush(stdout);
    return 0;
}
