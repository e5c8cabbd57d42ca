/* tests/integration/test-groups.c - performance groups in a real profiled process.
 *
 * Links libfleetprof and starts it with fleetprof_init() (sampling runs as in real use), then
 * drives the group API and reads the totals back with fleetprof_group_stats(). Work inside a
 * stopwatch spins on the thread's own CPU clock, so each group's true CPU time is known by
 * construction whatever else the machine runs; expected charges are checked against it
 * with tolerances for what the design measures (cycles, so time off the CPU inside a
 * stopwatch is charged at the event's CPU rate). A group that fills its event is charged
 * the event's CPU time however the thread was preempted; one that shares it gets its share
 * of cycles, which another process's load on the CPU moves around (the design's accepted
 * bias, docs/groups.md: a preemption adds a whole time slice to whichever group runs): such
 * a group is only checked to be charged, and less than the group around it.
 *
 * clock_gettime() is interposed here (the runtime's calls resolve to the executable's
 * definition first) to count the thread CPU-time reads each event makes.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fleetprof.h"
#include "tests/lib/testlib.h"

#define MS 1000000ull

static cpu_set_t all_cpus; /* the process's CPUs; the main thread runs pinned to one */
static __thread unsigned thread_cpu_reads; /* CLOCK_THREAD_CPUTIME_ID reads by this thread */
static __thread unsigned clock_reads;      /* reads of any clock by this thread */

int clock_gettime(clockid_t clock, struct timespec *ts)
{
    static int (*real)(clockid_t, struct timespec *);

    if (!real) {
        void *sym = dlsym(RTLD_NEXT, "clock_gettime");

        memcpy(&real, &sym, sizeof(real)); /* POSIX: dlsym's result converts to a function */
    }
    clock_reads++;
    if (clock == CLOCK_THREAD_CPUTIME_ID)
        thread_cpu_reads++;
    return real(clock, ts);
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Uses ns of this thread's CPU time. */
static void spin_cpu(uint64_t ns)
{
    uint64_t end = thread_cpu_ns() + ns;

    while (thread_cpu_ns() < end) {
    }
}

static struct fleetprof_group_stats stats_of(const fleetprof_group *g)
{
    struct fleetprof_group_stats s;

    assert_int_equal(fleetprof_group_stats(g, &s), 0);
    return s;
}

static void print_stats(const char *name, const struct fleetprof_group_stats *s)
{
    printf("# %-12s cpu %8.3f ms events %3llu activations %3llu discarded %llu migrated %llu "
           "stale %llu slow %llu worst %.3f ms\n",
           name, (double)s->cpu_ns / 1e6, (unsigned long long)s->events,
           (unsigned long long)s->activations, (unsigned long long)s->discarded,
           (unsigned long long)s->migrated, (unsigned long long)s->stale,
           (unsigned long long)s->slow_events, (double)s->worst_event_ns / 1e6);
}

/* |got - want| <= tolerance x want (and at least 0.3 ms: the event's own bookkeeping). */
static void assert_near_ns(uint64_t got, uint64_t want, double tolerance)
{
    double diff = (double)got - (double)want;
    double allowed = (double)want * tolerance;

    if (allowed < 0.3e6)
        allowed = 0.3e6;
    if (diff < -allowed || diff > allowed) {
        printf("# charged %.3f ms, expected %.3f ms +- %.3f\n", (double)got / 1e6,
               (double)want / 1e6, allowed / 1e6);
        fail_msg("charged %.3f ms, expected %.3f ms +- %.3f", (double)got / 1e6, (double)want / 1e6,
                 allowed / 1e6);
    }
}

/* Before fleetprof_init(): groups exist, stopwatches measure nothing, totals stay zero. */
static void test_off_before_init(void **state)
{
    fleetprof_group *g = fleetprof_group_get("off");
    struct fleetprof_group_stats s;
    fleetprof_stopwatch sw;

    (void)state;
    assert_non_null(g);
    assert_ptr_equal(fleetprof_group_get("off"), g);
    fleetprof_event_begin();
    sw = fleetprof_stopwatch_start(g);
    assert_null(sw.group);
    spin_cpu(MS);
    fleetprof_stopwatch_stop(&sw);
    fleetprof_event_end();
    s = stats_of(g);
    assert_int_equal(s.activations, 0);
    assert_int_equal(s.cpu_ns, 0);
    assert_int_equal(s.events, 0);
}

static void test_names(void **state)
{
    char long_name[200];

    (void)state;
    memset(long_name, 'x', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    assert_null(fleetprof_group_get(NULL));
    assert_null(fleetprof_group_get(""));
    assert_null(fleetprof_group_get(long_name));
    assert_null(fleetprof_group_get("bad\nname"));
    assert_null(fleetprof_group_get("\xff\xfe"));
    assert_non_null(fleetprof_group_get("tenant:\xc3\xa9t\xc3\xa9"));
    assert_ptr_equal(fleetprof_group_get("names"), fleetprof_group_get("names"));
    assert_ptr_not_equal(fleetprof_group_get("names"), fleetprof_group_get("names2"));
}

/* Semantic 1 and 2: a stopwatch reads no clock through the C library (the counter and the
 * CPU number come without a system call); an event reads the thread's CPU time twice. */
static void test_two_cpu_reads_per_event(void **state)
{
    fleetprof_group *a = fleetprof_group_get("reads-a"), *b = fleetprof_group_get("reads-b");
    unsigned before_cpu, before_any;

    (void)state;
    fleetprof_event_begin();
    before_cpu = thread_cpu_reads;
    before_any = clock_reads;
    for (int i = 0; i < 1000; i++) {
        FLEETPROF_GROUP(a);
        FLEETPROF_GROUP(b);
    }
    assert_int_equal(clock_reads - before_any, 0);
    fleetprof_event_end();
    assert_int_equal(thread_cpu_reads - before_cpu, 1); /* the end; the begin was before */

    before_cpu = thread_cpu_reads;
    for (int e = 0; e < 10; e++) {
        fleetprof_event_begin();
        for (int i = 0; i < 100; i++) {
            FLEETPROF_GROUP(a);
        }
        fleetprof_event_end();
    }
    assert_int_equal(thread_cpu_reads - before_cpu, 20);
    assert_int_equal(stats_of(a).events, 11);
    assert_int_equal(stats_of(a).activations, 2000);
}

/* One group filling its event is charged the event's CPU time. */
static void test_single_group_charged_its_cpu(void **state)
{
    fleetprof_group *g = fleetprof_group_get("single");
    uint64_t cpu0, cpu1;
    struct fleetprof_group_stats s;

    (void)state;
    cpu0 = thread_cpu_ns();
    for (int i = 0; i < 20; i++) {
        fleetprof_event_begin();
        {
            FLEETPROF_GROUP(g);
            spin_cpu(2 * MS);
        }
        fleetprof_event_end();
    }
    cpu1 = thread_cpu_ns();
    s = stats_of(g);
    print_stats("single", &s);
    assert_int_equal(s.events, 20);
    assert_int_equal(s.activations, 20);
    assert_true(s.cycles > 0);
    assert_true(s.cpu_ns <= cpu1 - cpu0);
    assert_near_ns(s.cpu_ns, 40 * MS, 0.05);
}

/* A stopwatch with no event open is an event of its own span: one CPU-time read at its
 * start, one at its stop. */
static void test_implicit_event(void **state)
{
    fleetprof_group *g = fleetprof_group_get("implicit");
    struct fleetprof_group_stats s;
    fleetprof_stopwatch sw;
    unsigned before;

    (void)state;
    before = thread_cpu_reads;
    sw = fleetprof_stopwatch_start(g);
    assert_int_equal(thread_cpu_reads - before, 1);
    spin_cpu(3 * MS);
    before = thread_cpu_reads;
    fleetprof_stopwatch_stop(&sw);
    assert_int_equal(thread_cpu_reads - before, 1);
    s = stats_of(g);
    assert_int_equal(s.events, 1);
    assert_near_ns(s.cpu_ns, 3 * MS, 0.05);
}

/* Semantic 4: A calls B: both are charged; A's stopwatch runs on while B's does. */
static void test_a_calls_b(void **state)
{
    fleetprof_group *a = fleetprof_group_get("calls-a"), *b = fleetprof_group_get("calls-b");
    struct fleetprof_group_stats sa, sb;

    (void)state;
    for (int i = 0; i < 10; i++) {
        fleetprof_event_begin();
        {
            FLEETPROF_GROUP(a);
            spin_cpu(2 * MS);
            {
                FLEETPROF_GROUP(b);
                spin_cpu(3 * MS);
            }
        }
        fleetprof_event_end();
    }
    sa = stats_of(a);
    sb = stats_of(b);
    print_stats("calls-a", &sa);
    print_stats("calls-b", &sb);
    assert_near_ns(sa.cpu_ns, 50 * MS, 0.05); /* fills the event */
    assert_int_equal(sb.events, 10);
    assert_true(sb.cpu_ns > 0 && sb.cpu_ns < sa.cpu_ns);
}

/* Semantic 5: A calls B calls A: the inner A starts no stopwatch, A is charged once. */
static void test_a_calls_b_calls_a(void **state)
{
    fleetprof_group *a = fleetprof_group_get("reent-a"), *b = fleetprof_group_get("reent-b");
    struct fleetprof_group_stats sa, sb;
    uint64_t cpu0, cpu1;

    (void)state;
    cpu0 = thread_cpu_ns();
    for (int i = 0; i < 10; i++) {
        fleetprof_event_begin();
        {
            FLEETPROF_GROUP(a);
            spin_cpu(2 * MS);
            {
                FLEETPROF_GROUP(b);
                spin_cpu(1 * MS);
                {
                    fleetprof_stopwatch inner = fleetprof_stopwatch_start(a);

                    assert_null(inner.group);
                    spin_cpu(1 * MS);
                    fleetprof_stopwatch_stop(&inner);
                }
            }
        }
        fleetprof_event_end();
    }
    cpu1 = thread_cpu_ns();
    sa = stats_of(a);
    sb = stats_of(b);
    print_stats("reent-a", &sa);
    print_stats("reent-b", &sb);
    assert_int_equal(sa.activations, 10);
    assert_int_equal(sa.events, 10);
    /* Counted twice, A would get 50 ms: more than the events' whole CPU time. */
    assert_true(sa.cpu_ns <= cpu1 - cpu0);
    assert_near_ns(sa.cpu_ns, 40 * MS, 0.05);
    assert_int_equal(sb.events, 10);
    assert_true(sb.cpu_ns > 0 && sb.cpu_ns < sa.cpu_ns);
}

/* Semantic 6: a nested event loop makes the outer stopwatch stale; it is dropped when it
 * stops, and what ran inside the nested loop is charged to its own event. */
static void test_nested_event_loop(void **state)
{
    fleetprof_group *a = fleetprof_group_get("nest-a"), *b = fleetprof_group_get("nest-b");
    struct fleetprof_group_stats sa, sb;

    (void)state;
    fleetprof_event_begin();
    {
        FLEETPROF_GROUP(a);
        spin_cpu(1 * MS);
        /* A blocking call implemented with a nested loop, like alert(): */
        for (int i = 0; i < 3; i++) {
            fleetprof_event_begin();
            {
                FLEETPROF_GROUP(b);
                spin_cpu(2 * MS);
            }
            fleetprof_event_end();
        }
        spin_cpu(1 * MS);
    }
    fleetprof_event_end();
    sa = stats_of(a);
    sb = stats_of(b);
    print_stats("nest-a", &sa);
    print_stats("nest-b", &sb);
    assert_int_equal(sa.stale, 1);
    assert_int_equal(sa.cpu_ns, 0);
    assert_int_equal(sa.events, 0);
    assert_int_equal(sb.events, 3);
    assert_int_equal(sb.stale, 0);
    assert_near_ns(sb.cpu_ns, 6 * MS, 0.05);

    /* The outer loop goes on afterwards: its next events are measured again. */
    fleetprof_event_begin();
    {
        FLEETPROF_GROUP(a);
        spin_cpu(1 * MS);
    }
    fleetprof_event_end();
    sa = stats_of(a);
    assert_int_equal(sa.events, 1);
    assert_near_ns(sa.cpu_ns, 1 * MS, 0.1);
}

/* Semantic 3: a stopwatch that stops on another CPU than it started on is dropped and
 * counted; the move is forced with sched_setaffinity inside the stopwatch. */
static void test_migration_is_discarded(void **state)
{
    fleetprof_group *g = fleetprof_group_get("migrate"), *other = fleetprof_group_get("stay");
    cpu_set_t allowed = all_cpus, pinned, one;
    int cpus[2], n = 0;
    struct fleetprof_group_stats s, so;

    (void)state;
    assert_int_equal(sched_getaffinity(0, sizeof(pinned), &pinned), 0);
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &allowed))
            cpus[n++] = c;
    if (n < 2)
        skip(); /* one CPU: nothing to migrate to */
    for (int i = 0; i < 5; i++) {
        CPU_ZERO(&one);
        CPU_SET(cpus[0], &one);
        assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
        fleetprof_event_begin();
        {
            FLEETPROF_GROUP(other);
            spin_cpu(MS / 2);
        }
        {
            FLEETPROF_GROUP(g);
            spin_cpu(MS / 2);
            CPU_ZERO(&one);
            CPU_SET(cpus[1], &one);
            assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
            assert_int_equal(sched_getcpu(), cpus[1]);
            spin_cpu(MS / 2);
        }
        fleetprof_event_end();
    }
    assert_int_equal(sched_setaffinity(0, sizeof(pinned), &pinned), 0);
    s = stats_of(g);
    so = stats_of(other);
    print_stats("migrate", &s);
    assert_int_equal(s.migrated, 5);
    assert_int_equal(s.activations, 5);
    assert_int_equal(s.events, 0);
    assert_int_equal(s.cpu_ns, 0);
    assert_int_equal(s.cycles, 0);
    assert_int_equal(so.events, 5); /* the event itself still charges who stayed */
    assert_int_equal(so.migrated, 0);
}

/* Semantic 7: events, worst event, the log2 histogram and slow events (the threshold is
 * FLEETPROF_SLOW_EVENT_MS=4 here). */
static void test_histogram_and_slow_events(void **state)
{
    fleetprof_group *g = fleetprof_group_get("durations");
    struct fleetprof_group_stats s;
    uint64_t total = 0;

    (void)state;
    for (int i = 0; i < 5; i++) {
        fleetprof_event_begin();
        {
            FLEETPROF_GROUP(g);
            spin_cpu(i < 3 ? 1500000 : 6 * MS); /* 1.5 ms: [1024, 2048) us; 6 ms: [4096, 8192) */
        }
        fleetprof_event_end();
    }
    s = stats_of(g);
    print_stats("durations", &s);
    for (int b = 0; b < FLEETPROF_GROUP_BUCKETS; b++) {
        if (s.durations[b])
            printf("#   bucket %2d: %llu\n", b, (unsigned long long)s.durations[b]);
        total += s.durations[b];
    }
    assert_int_equal(total, 5);
    assert_int_equal(s.durations[11], 3);
    assert_int_equal(s.durations[13], 2);
    assert_int_equal(s.events, 5);
    assert_int_equal(s.slow_events, 2);
    assert_near_ns(s.worst_event_ns, 6 * MS, 0.05);
}

/* The profile this process writes: its groups' totals, a counter per group and the slow
 * events' markers with their schema (test-groups-profile.py checks them field by field on
 * the demo fleet). A group named "processCPU" must not get the category that makes the
 * front-end draw its counter as the process's CPU percentage. */
static void test_profile_has_groups(void **state)
{
    fleetprof_group *g = fleetprof_group_get("processCPU");
    char *dir = test_tmpdir("groups"), path[512], *text;
    FILE *f;
    long len;

    (void)state;
    fleetprof_event_begin();
    {
        FLEETPROF_GROUP(g);
        spin_cpu(5 * MS); /* over the 4 ms threshold: a slow event */
    }
    fleetprof_event_end();
    (void)snprintf(path, sizeof(path), "%s/p.json", dir);
    /* The counter's rows are the sampler's (a counter without rows is not written): write
     * until its next tick has taken one, however long a busy machine makes that. */
    for (int tries = 0;; tries++) {
        assert_int_equal(fleetprof_write_profile(path), 0);
        f = fopen(path, "r");
        assert_non_null(f);
        assert_int_equal(fseek(f, 0, SEEK_END), 0);
        len = ftell(f);
        rewind(f);
        text = calloc(1, (size_t)len + 1);
        assert_non_null(text);
        assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
        (void)fclose(f);
        if (strstr(text, "{\"name\":\"processCPU\",\"category\":") || tries == 3000)
            break;
        free(text);
        usleep(10 * 1000);
    }
    assert_non_null(strstr(text, "\"groups\":{\"slowEventNs\":4000000,"));
    assert_non_null(strstr(text, "{\"name\":\"processCPU\",\"cpuNs\":"));
    assert_non_null(strstr(text, "{\"name\":\"processCPU\",\"category\":\"Group CPU\","));
    assert_null(strstr(text, "{\"name\":\"processCPU\",\"category\":\"CPU\","));
    assert_non_null(strstr(text, "{\"name\":\"GroupSlowEvent\","));
    assert_non_null(strstr(text, "{\"type\":\"GroupSlowEvent\",\"group\":\"processCPU\","));
    free(text);
    test_rmtree(dir);
    free(dir);
}

/* Semantic 8: a forked child starts from zero, keeps the group (same pointer, same name),
 * and drops the stopwatch that was running across fork(). */
static void test_fork(void **state)
{
    fleetprof_group *g = fleetprof_group_get("fork");
    struct fleetprof_group_stats before, after;
    int status;
    pid_t pid;

    (void)state;
    {
        FLEETPROF_GROUP(g);
        spin_cpu(2 * MS);
    }
    before = stats_of(g);
    assert_int_equal(before.events, 1);
    fleetprof_event_begin();
    fleetprof_stopwatch sw = fleetprof_stopwatch_start(g);
    assert_non_null(sw.group);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct fleetprof_group_stats c;
        int bad = 0;

        (void)fleetprof_group_stats(g, &c);
        bad |= (c.events != 0 || c.cpu_ns != 0 || c.activations != 0) << 0;
        bad |= (fleetprof_group_get("fork") != g) << 1;
        spin_cpu(MS);
        fleetprof_stopwatch_stop(&sw); /* opened in the parent: dropped */
        fleetprof_event_end();
        (void)fleetprof_group_stats(g, &c);
        bad |= (c.events != 0 || c.cpu_ns != 0 || c.stale != 1) << 2;
        {
            FLEETPROF_GROUP(g);
            spin_cpu(2 * MS);
        }
        (void)fleetprof_group_stats(g, &c);
        bad |= (c.events != 1 || c.activations != 1 || c.cpu_ns < MS) << 3;
        _exit(bad);
    }
    spin_cpu(MS);
    fleetprof_stopwatch_stop(&sw);
    fleetprof_event_end();
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status))
        fail_msg("child check failed, bits %#x: 1 totals not zero, 2 other group, 4 stale "
                 "stopwatch measured, 8 no new measure",
                 WEXITSTATUS(status));
    after = stats_of(g);
    assert_int_equal(after.events, 2);
    assert_int_equal(after.stale, 0);
    /* 2 ms, then 1 ms and the fork() itself inside the stopwatch. */
    assert_true(after.cpu_ns >= 3 * MS * 95 / 100);
    assert_true(after.cpu_ns <= before.cpu_ns + 1 * MS + 50 * MS);
}

/* One thread, three groups taking 50/30/20 % of each event's CPU in small interleaved
 * slices: all the event's CPU is charged, in about those shares. Not within 2 points here:
 * another process's load preempts the thread for whole time slices, and each preemption
 * lands in one group's cycles (two CPU hogs on two CPUs moved shares by up to 6 points;
 * quiet, under 0.1). The design accepts that bias (docs/groups.md); the benchmark measures
 * it, and test_accuracy_threads is the 2-point test. */
static void test_accuracy_interleaved(void **state)
{
    static const char *names[3] = {"acc-50", "acc-30", "acc-20"};
    static const uint64_t slice_ns[3] = {500000, 300000, 200000};
    fleetprof_group *g[3];
    struct fleetprof_group_stats s[3];
    uint64_t sum = 0, cpu0, cpu1;

    (void)state;
    for (int i = 0; i < 3; i++)
        g[i] = fleetprof_group_get(names[i]);
    cpu0 = thread_cpu_ns();
    for (int e = 0; e < 40; e++) {
        fleetprof_event_begin();
        for (int k = 0; k < 10; k++)
            for (int i = 0; i < 3; i++) {
                FLEETPROF_GROUP(g[i]);
                spin_cpu(slice_ns[i]);
            }
        fleetprof_event_end();
    }
    cpu1 = thread_cpu_ns();
    for (int i = 0; i < 3; i++) {
        s[i] = stats_of(g[i]);
        print_stats(names[i], &s[i]);
        sum += s[i].cpu_ns;
    }
    printf("# charged %.1f of %.1f ms of thread CPU\n", (double)sum / 1e6,
           (double)(cpu1 - cpu0) / 1e6);
    assert_true(sum <= cpu1 - cpu0);
    assert_true((double)sum >= 0.9 * (double)(cpu1 - cpu0));
    for (int i = 0; i < 3; i++) {
        double share = 100.0 * (double)s[i].cpu_ns / (double)sum;
        double truth = 100.0 * (double)slice_ns[i] / 1e6;

        printf("# %s: %.2f %% (truth %.0f %%)\n", names[i], share, truth);
        if (share < truth - 12 || share > truth + 12)
            fail_msg("%s charged %.2f %% of the groups' CPU, truth %.0f %%", names[i], share,
                     truth);
    }
}

struct worker {
    fleetprof_group *group;
    uint64_t per_event_ns;
};

/* 40 events of 10 slices: three threads on fewer CPUs migrate now and then, and a moved
 * measure is dropped (one slice, not a whole event). */
static void *accuracy_worker(void *arg)
{
    const struct worker *w = arg;

    (void)sched_setaffinity(0, sizeof(all_cpus), &all_cpus); /* not the main thread's pin */
    for (int e = 0; e < 40; e++) {
        fleetprof_event_begin();
        for (int k = 0; k < 10; k++) {
            FLEETPROF_GROUP(w->group);
            spin_cpu(w->per_event_ns / 10);
        }
        fleetprof_event_end();
    }
    return NULL;
}

/* Accuracy: three groups, each spinning on its own thread's CPU clock, split 50/30/20 by
 * construction; charged shares within 2 points of the truth, however busy the machine
 * (each group fills its events, so preemption moves no cycles between groups). */
static void test_accuracy_threads(void **state)
{
    static const char *names[3] = {"thr-50", "thr-30", "thr-20"};
    struct worker w[3];
    pthread_t th[3];
    uint64_t sum = 0;

    (void)state;
    for (int i = 0; i < 3; i++) {
        w[i].group = fleetprof_group_get(names[i]);
        w[i].per_event_ns = (uint64_t)(5 - 2 * i + (i == 2)) * MS / 2; /* 2.5, 1.5, 1 ms */
        assert_int_equal(pthread_create(&th[i], NULL, accuracy_worker, &w[i]), 0);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < 3; i++)
        sum += stats_of(w[i].group).cpu_ns;
    for (int i = 0; i < 3; i++) {
        struct fleetprof_group_stats s = stats_of(w[i].group);
        double share = 100.0 * (double)s.cpu_ns / (double)sum;
        double truth = 100.0 * (double)w[i].per_event_ns / (5.0 * MS);

        print_stats(names[i], &s);
        printf("# %s: %.2f %% (truth %.0f %%)\n", names[i], share, truth);
        assert_int_equal(s.activations, 400);
        assert_true(s.events * 10 + s.migrated >= 400); /* uncharged only if all 10 moved */
        if (share < truth - 2 || share > truth + 2)
            fail_msg("%s charged %.2f %%, truth %.0f %%", names[i], share, truth);
    }
}

static void test_start_profiler(void **state)
{
    (void)state;
    cpu_set_t one;

    assert_int_equal(fleetprof_init(), 0);
    assert_int_equal(fleetprof_is_active(), 1);
    /* A measure that moves between CPUs is dropped (test_migration_is_discarded): the
     * other tests are about other rules, so the scheduler must not move their thread. */
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
}

int main(void)
{
    /* In order: the first runs before the profiler starts, the others after. */
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_off_before_init),
            cmocka_unit_test(test_start_profiler),
            cmocka_unit_test(test_names),
            cmocka_unit_test(test_two_cpu_reads_per_event),
            cmocka_unit_test(test_single_group_charged_its_cpu),
            cmocka_unit_test(test_implicit_event),
            cmocka_unit_test(test_a_calls_b),
            cmocka_unit_test(test_a_calls_b_calls_a),
            cmocka_unit_test(test_nested_event_loop),
            cmocka_unit_test(test_migration_is_discarded),
            cmocka_unit_test(test_histogram_and_slow_events),
            cmocka_unit_test(test_profile_has_groups),
            cmocka_unit_test(test_fork),
            cmocka_unit_test(test_accuracy_interleaved),
            cmocka_unit_test(test_accuracy_threads),
    };
    int failed;

    if (sched_getaffinity(0, sizeof(all_cpus), &all_cpus) < 0)
        return 1;
    (void)unsetenv("FLEETPROF_SOCKET");
    (void)unsetenv("FLEETPROF_OUTPUT");
    (void)unsetenv("FLEETPROF_DIR");
    (void)setenv("FLEETPROF_SLOW_EVENT_MS", "4", 1);
    failed = cmocka_run_group_tests_name("groups", tests, NULL, NULL);
    fleetprof_shutdown();
    return failed ? 1 : 0;
}
