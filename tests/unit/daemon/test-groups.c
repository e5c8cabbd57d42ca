/* Unit tests for daemon/groups: fleet sums equal the per-process totals (exited processes
 * included), the per-process breakdown, fleet CPU time, and every refusal of a hostile
 * GroupStats leaving no trace. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/groups.h"
#include "profile/groups.h"
#include "testlib.h"

/* A GroupStats under construction: up to 8 groups with their own storage. */
struct msg {
    Fleetprof__GroupStats m;
    Fleetprof__GroupTotals g[8];
    Fleetprof__GroupTotals *ptrs[8];
    uint64_t durations[8][PROF_GROUP_BUCKETS];
    char names[8][160];
};

static void msg_init(struct msg *x, uint64_t process_cpu_ns)
{
    memset(x, 0, sizeof(*x));
    fleetprof__group_stats__init(&x->m);
    x->m.id = 1;
    x->m.process_cpu_ns = process_cpu_ns;
    x->m.slow_event_ns = 16000000;
    x->m.groups = x->ptrs;
}

/* Adds a group whose every counter is v (worst v too; bucket 3 holds v events). */
static Fleetprof__GroupTotals *msg_add(struct msg *x, const char *name, uint64_t v)
{
    size_t i = x->m.n_groups++;
    Fleetprof__GroupTotals *g = &x->g[i];

    fleetprof__group_totals__init(g);
    (void)snprintf(x->names[i], sizeof(x->names[i]), "%s", name);
    g->name = x->names[i];
    g->cpu_ns = g->cycles = g->activations = g->events = g->worst_event_ns = v;
    g->slow_events = g->discarded = g->migrated = g->stale = v / 2;
    x->durations[i][3] = v;
    g->n_durations = PROF_GROUP_BUCKETS;
    g->durations = x->durations[i];
    x->ptrs[i] = g;
    return g;
}

static const Fleetprof__FleetGroup *find(const Fleetprof__GroupsReport *r, const char *name)
{
    for (size_t i = 0; i < r->n_groups; i++)
        if (!strcmp(r->groups[i]->totals->name, name))
            return r->groups[i];
    return NULL;
}

static uint64_t fake_cpu(int32_t pid, void *userdata)
{
    (void)userdata;
    return (uint64_t)pid * 1000;
}

static void test_sums_breakdown_and_exited(void **state)
{
    struct fleet_groups *fg;
    struct fleet_groups_proc *a, *b, *idle;
    struct fleet_groups_report r;
    struct fleet_groups_stats st;
    const Fleetprof__FleetGroup *g;
    struct msg x;
    const char *why = NULL;

    (void)state;
    assert_int_equal(fleet_groups_new(&fg), 0);
    a = fleet_groups_join(fg, 10, 0, "alpha");
    b = fleet_groups_join(fg, 20, 0, "beta");
    idle = fleet_groups_join(fg, 30, 0, "idle");

    msg_init(&x, 500);
    msg_add(&x, "tenant-a", 100);
    msg_add(&x, "tenant-b", 10);
    assert_int_equal(fleet_groups_apply(fg, a, &x.m, &why), 0);
    msg_init(&x, 700);
    msg_add(&x, "tenant-a", 40);
    assert_int_equal(fleet_groups_apply(fg, b, &x.m, &why), 0);
    /* Cumulative: a's second message replaces its first, the sums move by the difference. */
    msg_init(&x, 900);
    msg_add(&x, "tenant-b", 30); /* order changed, tenant-a absent: kept */
    assert_int_equal(fleet_groups_apply(fg, a, &x.m, &why), 0);

    assert_int_equal(fleet_groups_report(fg, "tenant-a", fake_cpu, NULL, &r), 0);
    assert_int_equal(r.msg.n_groups, 2);
    assert_int_equal(r.msg.processes, 3);
    /* 900 (a) + 700 (b) reported; idle never reported: 30 * 1000 from /proc. */
    assert_int_equal(r.msg.fleet_cpu_ns, 900 + 700 + 30000);
    assert_string_equal(r.msg.groups[0]->totals->name, "tenant-a"); /* most CPU first */
    g = find(&r.msg, "tenant-a");
    assert_int_equal(g->totals->cpu_ns, 140);
    assert_int_equal(g->totals->events, 140);
    assert_int_equal(g->totals->worst_event_ns, 100);
    assert_int_equal(g->totals->slow_events, 50 + 20);
    assert_int_equal(g->totals->n_durations, PROF_GROUP_BUCKETS);
    assert_int_equal(g->totals->durations[3], 140);
    assert_int_equal(g->processes, 2);
    assert_int_equal(g->live_processes, 2);
    assert_int_equal(g->n_per_process, 2);
    assert_int_equal(g->per_process[0]->pid + g->per_process[1]->pid, 30);
    assert_int_equal(g->per_process[0]->totals->cpu_ns + g->per_process[1]->totals->cpu_ns, 140);
    g = find(&r.msg, "tenant-b");
    assert_int_equal(g->totals->cpu_ns, 30);
    assert_int_equal(g->n_per_process, 0); /* only the asked group is broken down */
    fleet_groups_report_done(&r);

    /* b and idle exit: b's totals and last CPU stay, idle keeps its last known CPU. */
    fleet_groups_leave(fg, b);
    fleet_groups_leave(fg, idle);
    assert_int_equal(fleet_groups_report(fg, "tenant-a", fake_cpu, NULL, &r), 0);
    g = find(&r.msg, "tenant-a");
    assert_int_equal(g->totals->cpu_ns, 140);
    assert_int_equal(g->processes, 2);
    assert_int_equal(g->live_processes, 1);
    assert_int_equal(g->n_per_process, 2);
    for (size_t i = 0; i < 2; i++)
        assert_int_equal(g->per_process[i]->exited, g->per_process[i]->pid == 20);
    assert_int_equal(r.msg.fleet_cpu_ns, 900 + 700 + 30000);
    assert_int_equal(r.msg.processes, 3);
    fleet_groups_report_done(&r);

    fleet_groups_get_stats(fg, &st);
    assert_int_equal(st.accepted, 3);
    assert_int_equal(st.refused, 0);
    assert_int_equal(st.groups, 2);
    assert_int_equal(st.processes, 3);
    assert_int_equal(st.live, 1);
    fleet_groups_free(fg);
}

/* Every refusal leaves the report exactly as it was. */
static void test_refuses_hostile_stats(void **state)
{
    struct fleet_groups *fg;
    struct fleet_groups_proc *p;
    struct fleet_groups_report before, after;
    struct msg x;
    struct msg *big;
    const char *why = NULL;
    uint64_t long_buckets[PROF_GROUP_BUCKETS + 1] = {0};

    (void)state;
    assert_int_equal(fleet_groups_new(&fg), 0);
    p = fleet_groups_join(fg, 10, 0, "alpha");
    msg_init(&x, 500);
    msg_add(&x, "tenant-a", 100);
    assert_int_equal(fleet_groups_apply(fg, p, &x.m, &why), 0);
    assert_int_equal(fleet_groups_report(fg, "tenant-a", NULL, NULL, &before), 0);

#define REFUSED(fragment)                                                  \
    do {                                                                   \
        why = NULL;                                                        \
        assert_int_equal(fleet_groups_apply(fg, p, &x.m, &why), -EBADMSG); \
        assert_non_null(why);                                              \
        if (!strstr(why, fragment))                                        \
            fail_msg("reason '%s' lacks '%s'", why, fragment);             \
    } while (0)

    msg_init(&x, 600);
    msg_add(&x, "new-one", 5);
    msg_add(&x, "bad\xc3(", 5); /* invalid UTF-8 */
    REFUSED("UTF-8");
    msg_init(&x, 600);
    msg_add(&x, "esc\x1b[2J", 5); /* a terminal escape */
    REFUSED("control");
    msg_init(&x, 600);
    msg_add(&x, "", 5);
    REFUSED("name");
    msg_init(&x, 600);
    {
        char name[PROF_GROUP_NAME_MAX + 2];

        memset(name, 'x', sizeof(name) - 1);
        name[sizeof(name) - 1] = '\0';
        msg_add(&x, name, 5);
    }
    REFUSED("name");
    msg_init(&x, 600);
    msg_add(&x, "tenant-a", 200)->n_durations = PROF_GROUP_BUCKETS - 1;
    REFUSED("histogram buckets");
    msg_init(&x, 600);
    msg_add(&x, "tenant-a", 200);
    x.g[0].n_durations = PROF_GROUP_BUCKETS + 1;
    x.g[0].durations = long_buckets;
    REFUSED("histogram buckets");
    msg_init(&x, 600);
    msg_add(&x, "fresh", 1);
    msg_add(&x, "fresh", 1);
    REFUSED("twice");
    msg_init(&x, 600);
    msg_add(&x, "tenant-a", 200);
    msg_add(&x, "tenant-a", 200);
    REFUSED("twice");
    msg_init(&x, 600);
    msg_add(&x, "tenant-a", 99); /* every counter below the last one */
    REFUSED("cpu_ns went backwards");
    msg_init(&x, 600);
    msg_add(&x, "tenant-a", 200)->stale = 1; /* one counter below */
    REFUSED("stale went backwards");
    msg_init(&x, 600);
    msg_add(&x, "tenant-a", 200);
    x.durations[0][3] = 99;
    REFUSED("durations went backwards");
    msg_init(&x, 400);
    msg_add(&x, "tenant-a", 200);
    REFUSED("process CPU time went backwards");

    /* More groups than a process may have: checked before anything is read. */
    big = calloc(1, sizeof(*big));
    assert_non_null(big);
    msg_init(big, 600);
    big->m.n_groups = FLEET_GROUPS_PER_PROCESS_MAX + 1;
    why = NULL;
    assert_int_equal(fleet_groups_apply(fg, p, &big->m, &why), -EBADMSG);
    assert_non_null(strstr(why, "more than"));
    free(big);

    assert_int_equal(fleet_groups_report(fg, "tenant-a", NULL, NULL, &after), 0);
    assert_int_equal(after.msg.n_groups, before.msg.n_groups); /* "new-one", "fresh" unseen */
    assert_int_equal(after.msg.fleet_cpu_ns, before.msg.fleet_cpu_ns);
    assert_int_equal(after.msg.groups[0]->totals->cpu_ns, 100);
    assert_int_equal(after.msg.groups[0]->totals->stale, 50);
    assert_int_equal(after.msg.groups[0]->per_process[0]->totals->cpu_ns, 100);
    fleet_groups_report_done(&after);
    fleet_groups_report_done(&before);

    /* Still accepted afterwards; nothing after a final. */
    msg_init(&x, 600);
    msg_add(&x, "tenant-a", 200);
    x.m.final = true;
    assert_int_equal(fleet_groups_apply(fg, p, &x.m, &why), 0);
    msg_init(&x, 700);
    msg_add(&x, "tenant-a", 300);
    REFUSED("after the final");
    assert_int_equal(fleet_groups_apply(fg, NULL, &x.m, &why), -EBADMSG);
    fleet_groups_free(fg);
}

/* The per-process cap counts groups across messages too. */
static void test_group_cap_across_messages(void **state)
{
    struct fleet_groups *fg;
    struct fleet_groups_proc *p;
    Fleetprof__GroupStats m = FLEETPROF__GROUP_STATS__INIT;
    Fleetprof__GroupTotals *g = calloc(FLEET_GROUPS_PER_PROCESS_MAX, sizeof(*g));
    Fleetprof__GroupTotals **ptrs = calloc(FLEET_GROUPS_PER_PROCESS_MAX, sizeof(*ptrs));
    char(*names)[16] = calloc(FLEET_GROUPS_PER_PROCESS_MAX + 1, sizeof(*names));
    uint64_t durations[PROF_GROUP_BUCKETS] = {0};
    struct fleet_groups_report r;
    const char *why = NULL;

    (void)state;
    assert_true(g && ptrs && names);
    assert_int_equal(fleet_groups_new(&fg), 0);
    p = fleet_groups_join(fg, 10, 0, "alpha");
    for (size_t i = 0; i < FLEET_GROUPS_PER_PROCESS_MAX; i++) {
        fleetprof__group_totals__init(&g[i]);
        (void)snprintf(names[i], sizeof(names[i]), "g%zu", i);
        g[i].name = names[i];
        g[i].cpu_ns = 1;
        g[i].n_durations = PROF_GROUP_BUCKETS;
        g[i].durations = durations;
        ptrs[i] = &g[i];
    }
    m.groups = ptrs;
    m.n_groups = FLEET_GROUPS_PER_PROCESS_MAX;
    assert_int_equal(fleet_groups_apply(fg, p, &m, &why), 0);
    (void)snprintf(names[0], sizeof(names[0]), "one-more");
    m.n_groups = 1;
    assert_int_equal(fleet_groups_apply(fg, p, &m, &why), -EBADMSG);
    assert_non_null(strstr(why, "in all"));
    assert_int_equal(fleet_groups_report(fg, NULL, NULL, NULL, &r), 0);
    assert_int_equal(r.msg.n_groups, FLEET_GROUPS_PER_PROCESS_MAX);
    fleet_groups_report_done(&r);
    fleet_groups_free(fg);
    free(g);
    free(ptrs);
    free(names);
}

/* Random fleets: after any sequence of accepted messages, joins and exits, each group's sum
 * is the sum of the latest totals of every process that reported it. */
static void test_random_fleets_sum_up(void **state)
{
    enum { PROCS = 12, GROUPS = 6, ROUNDS = 400 };
    static const char *const names[GROUPS] = {"a", "b", "c", "d", "e", "f"};
    struct test_rng rng;
    struct fleet_groups *fg;
    struct fleet_groups_proc *p[PROCS];
    uint64_t latest[PROCS][GROUPS] = {{0}}, cpu[PROCS] = {0};
    bool gone[PROCS] = {false};
    struct msg x;
    const char *why;

    (void)state;
    test_rng_init(&rng, test_seed());
    assert_int_equal(fleet_groups_new(&fg), 0);
    for (int i = 0; i < PROCS; i++)
        p[i] = fleet_groups_join(fg, 100 + i, 0, "w");
    for (int round = 0; round < ROUNDS; round++) {
        int i = (int)test_rng_range(&rng, 0, PROCS - 1);
        struct fleet_groups_report r;
        uint64_t fleet_cpu = 0;

        if (gone[i])
            continue;
        if (test_rng_range(&rng, 0, 30) == 0) {
            fleet_groups_leave(fg, p[i]);
            gone[i] = true;
            continue;
        }
        cpu[i] += test_rng_range(&rng, 0, 1000);
        msg_init(&x, cpu[i]);
        for (int k = 0; k < GROUPS; k++) {
            if (test_rng_range(&rng, 0, 2) == 0)
                continue; /* absent: keeps its last totals */
            latest[i][k] += test_rng_range(&rng, 0, 50);
            msg_add(&x, names[k], latest[i][k]);
        }
        assert_int_equal(fleet_groups_apply(fg, p[i], &x.m, &why), 0);

        assert_int_equal(fleet_groups_report(fg, NULL, NULL, NULL, &r), 0);
        for (int k = 0; k < GROUPS; k++) {
            const Fleetprof__FleetGroup *g = find(&r.msg, names[k]);
            uint64_t want = 0;

            for (int j = 0; j < PROCS; j++)
                want += latest[j][k];
            assert_int_equal(g ? g->totals->cpu_ns : 0, want);
            if (g)
                assert_int_equal(g->totals->durations[3], want);
        }
        for (int j = 0; j < PROCS; j++)
            fleet_cpu += cpu[j];
        assert_int_equal(r.msg.fleet_cpu_ns, fleet_cpu);
        fleet_groups_report_done(&r);
    }
    fleet_groups_free(fg);
}

/* A process that gave up its connection and made a new one (same pid and start) keeps its
 * row: its cumulative totals are not counted twice. The same pid with another start (exec)
 * is a new process; so is a reconnection after the final GroupStats. */
static void test_reconnection_is_the_same_process(void **state)
{
    struct fleet_groups *fg;
    struct fleet_groups_proc *p, *again, *exec;
    struct fleet_groups_report r;
    struct msg x;
    const char *why = NULL;

    (void)state;
    assert_int_equal(fleet_groups_new(&fg), 0);
    p = fleet_groups_join(fg, 10, 777, "alpha");
    msg_init(&x, 500);
    msg_add(&x, "tenant-a", 100);
    assert_int_equal(fleet_groups_apply(fg, p, &x.m, &why), 0);
    fleet_groups_leave(fg, p);
    again = fleet_groups_join(fg, 10, 777, "alpha");
    msg_init(&x, 600);
    msg_add(&x, "tenant-a", 150);
    assert_int_equal(fleet_groups_apply(fg, again, &x.m, &why), 0);
    assert_int_equal(fleet_groups_report(fg, "tenant-a", NULL, NULL, &r), 0);
    assert_int_equal(r.msg.groups[0]->totals->cpu_ns, 150);
    assert_int_equal(r.msg.groups[0]->processes, 1);
    assert_int_equal(r.msg.groups[0]->live_processes, 1);
    assert_int_equal(r.msg.processes, 1);
    assert_int_equal(r.msg.fleet_cpu_ns, 600);
    fleet_groups_report_done(&r);

    /* exec: the same pid, a new runtime start, totals from zero. */
    fleet_groups_leave(fg, again);
    exec = fleet_groups_join(fg, 10, 888, "alpha");
    msg_init(&x, 50);
    msg_add(&x, "tenant-a", 20);
    assert_int_equal(fleet_groups_apply(fg, exec, &x.m, &why), 0);
    assert_int_equal(fleet_groups_report(fg, "tenant-a", NULL, NULL, &r), 0);
    assert_int_equal(r.msg.groups[0]->totals->cpu_ns, 170);
    assert_int_equal(r.msg.groups[0]->processes, 2);
    assert_int_equal(r.msg.groups[0]->live_processes, 1);
    assert_int_equal(r.msg.groups[0]->n_per_process, 2);
    assert_int_equal(r.msg.processes, 2);
    assert_int_equal(r.msg.fleet_cpu_ns, 650);
    fleet_groups_report_done(&r);
    fleet_groups_free(fg);
}

/* ---- settled totals ---------------------------------------------------------------------- */

#define MS 1000000ull

static uint64_t fake_now;

static uint64_t fake_clock(void *userdata)
{
    (void)userdata;
    return fake_now;
}

/* Process p reports, at its own time t, group "g" at cpu (events cpu/MS) and process CPU. */
static void report_at(struct fleet_groups *fg, struct fleet_groups_proc *p, uint64_t t,
                      uint64_t group_cpu, uint64_t process_cpu)
{
    struct msg x;
    Fleetprof__GroupTotals *g;
    const char *why = NULL;

    msg_init(&x, process_cpu);
    g = msg_add(&x, "g", 0);
    g->cpu_ns = group_cpu;
    g->events = group_cpu / MS;
    x.m.time_ns = t;
    assert_int_equal(fleet_groups_apply(fg, p, &x.m, &why), 0);
}

/* The totals at the time every process had reported up to, each process's between its own
 * reports: what `top` divides by the settled times' difference. */
static void test_settled_totals(void **state)
{
    struct fleet_groups *fg;
    struct fleet_groups_proc *a, *b;
    struct fleet_groups_report r;
    const Fleetprof__FleetGroup *g;

    (void)state;
    assert_int_equal(fleet_groups_new(&fg), 0);
    fleet_groups_set_clock(fg, fake_clock, NULL);
    fake_now = 10000 * MS;
    a = fleet_groups_join(fg, 10, 1, "a");
    b = fleet_groups_join(fg, 20, 2, "b");
    /* a burns 1 CPU (all in the group), b 0.5 CPU; a reports at 10.1, 10.35, 10.6 s; b
     * at 10.2 and 10.45 s. */
    fake_now = 10100 * MS;
    report_at(fg, a, 10100 * MS, 100 * MS, 100 * MS);
    fake_now = 10200 * MS;
    report_at(fg, b, 10200 * MS, 0, 100 * MS);
    fake_now = 10350 * MS;
    report_at(fg, a, 10350 * MS, 350 * MS, 350 * MS);
    fake_now = 10450 * MS;
    report_at(fg, b, 10450 * MS, 0, 225 * MS);
    fake_now = 10600 * MS;
    report_at(fg, a, 10600 * MS, 600 * MS, 600 * MS);
    fake_now = 10610 * MS;
    assert_int_equal(fleet_groups_report(fg, NULL, NULL, NULL, &r), 0);
    /* b reported last at 10.45 s: a's totals there are between 10.35 and 10.6 s. */
    assert_int_equal(r.msg.settled_ns, 10450 * MS);
    assert_int_equal(r.msg.settled_fleet_cpu_ns, 450 * MS + 225 * MS);
    assert_int_equal(r.msg.fleet_cpu_ns, 600 * MS + 225 * MS); /* the latest, as before */
    g = find(&r.msg, "g");
    assert_non_null(g);
    assert_int_equal(g->totals->cpu_ns, 600 * MS);
    assert_int_equal(g->settled->cpu_ns, 450 * MS);
    assert_int_equal(g->settled->events, 450);
    fleet_groups_report_done(&r);

    /* b goes quiet (an idle process sends nothing): after 1 s, it no longer holds the
     * settled time back, and its totals are held there. */
    fake_now = 11600 * MS;
    report_at(fg, a, 11600 * MS, 1600 * MS, 1600 * MS);
    fake_now = 11700 * MS;
    assert_int_equal(fleet_groups_report(fg, NULL, NULL, NULL, &r), 0);
    assert_int_equal(r.msg.settled_ns, 10700 * MS); /* a second ago */
    assert_int_equal(r.msg.settled_fleet_cpu_ns, 700 * MS + 225 * MS);
    fleet_groups_report_done(&r);
    /* b's next report moves on from there: what was settled at 10.7 s stays. */
    fake_now = 11800 * MS;
    report_at(fg, b, 11800 * MS, 0, 325 * MS);
    fake_now = 11810 * MS;
    assert_int_equal(fleet_groups_report(fg, NULL, NULL, NULL, &r), 0);
    assert_int_equal(r.msg.settled_ns, 11600 * MS); /* a's last report */
    /* b: 225 ms held at 10.7 s, then 100 ms more by 11.8 s, 500/1100 of it by 11.6 s. */
    assert_int_equal(r.msg.settled_fleet_cpu_ns, 1600 * MS + 225 * MS + 100 * MS * 900 / 1100);
    fleet_groups_report_done(&r);

    /* a ends with a final report at 12.0 s while b holds the settled time at 11.8 s: a's
     * CPU after 11.8 s is not counted until the settled time passes its end. */
    fake_now = 12000 * MS;
    report_at(fg, a, 12000 * MS, 2000 * MS, 2000 * MS);
    fleet_groups_leave(fg, a);
    fake_now = 12010 * MS;
    assert_int_equal(fleet_groups_report(fg, NULL, NULL, NULL, &r), 0);
    assert_int_equal(r.msg.settled_ns, 11800 * MS);
    assert_int_equal(r.msg.settled_fleet_cpu_ns, 1800 * MS + 325 * MS);
    g = find(&r.msg, "g");
    assert_int_equal(g->settled->cpu_ns, 1800 * MS);
    assert_int_equal(g->totals->cpu_ns, 2000 * MS);
    fleet_groups_report_done(&r);
    fake_now = 12900 * MS;
    report_at(fg, b, 12900 * MS, 0, 400 * MS);
    fake_now = 12910 * MS;
    assert_int_equal(fleet_groups_report(fg, NULL, NULL, NULL, &r), 0);
    assert_int_equal(r.msg.settled_ns, 12900 * MS);
    assert_int_equal(r.msg.settled_fleet_cpu_ns, 2000 * MS + 400 * MS);
    fleet_groups_report_done(&r);

    /* A report stamped before the process's last one, or after the daemon's clock, is
     * taken at the last one's time, or at its arrival. */
    fake_now = 13000 * MS;
    report_at(fg, b, 5000 * MS, 0, 410 * MS);
    fake_now = 13100 * MS;
    report_at(fg, b, 99999 * MS, 0, 420 * MS);
    fake_now = 13100 * MS;
    assert_int_equal(fleet_groups_report(fg, NULL, NULL, NULL, &r), 0);
    assert_int_equal(r.msg.settled_ns, 13100 * MS);
    assert_int_equal(r.msg.settled_fleet_cpu_ns, 2000 * MS + 420 * MS);
    fleet_groups_report_done(&r);
    fleet_groups_free(fg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_sums_breakdown_and_exited),
            cmocka_unit_test(test_refuses_hostile_stats),
            cmocka_unit_test(test_group_cap_across_messages),
            cmocka_unit_test(test_random_fleets_sum_up),
            cmocka_unit_test(test_reconnection_is_the_same_process),
            cmocka_unit_test(test_settled_totals),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
