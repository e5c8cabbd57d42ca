/* Unit tests for tools/top-model (fleetprof top without I/O): reports copied into
 * snapshots, histogram quantiles, rates and shares between two snapshots, ranking (by the
 * interval, first screen cumulative), a restarted daemon, the per-process breakdown, the
 * text (no escape codes, columns, cut names, selected line) and the JSON (parsed back).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/reader.h"
#include "testlib.h"
#include "tools/top-model.h"

#define MS  1000000ull
#define SEC 1000000000ull

/* A made-up report: up to 4 groups, each with up to 4 processes. */
struct fake {
    Fleetprof__GroupsReport rep;
    Fleetprof__FleetGroup groups[4], *group_ptrs[4];
    Fleetprof__GroupTotals totals[4];
    uint64_t durations[4][TOP_BUCKETS + 2];
    Fleetprof__GroupProcess procs[4][4], *proc_ptrs[4][4];
    Fleetprof__GroupTotals proc_totals[4][4];
};

static void fake_init(struct fake *f, uint64_t time_ns, uint64_t fleet_cpu_ns)
{
    memset(f, 0, sizeof(*f));
    fleetprof__groups_report__init(&f->rep);
    f->rep.request_id = 1;
    f->rep.time_ns = time_ns;
    f->rep.fleet_cpu_ns = fleet_cpu_ns;
    f->rep.processes = 4;
    f->rep.groups = f->group_ptrs;
}

static Fleetprof__GroupTotals *fake_group(struct fake *f, const char *name, uint64_t cpu_ns,
                                          uint64_t events, uint64_t slow)
{
    size_t i = f->rep.n_groups++;
    Fleetprof__GroupTotals *t = &f->totals[i];

    fleetprof__fleet_group__init(&f->groups[i]);
    fleetprof__group_totals__init(t);
    t->name = (char *)name;
    t->cpu_ns = cpu_ns;
    t->events = events;
    t->slow_events = slow;
    t->durations = f->durations[i];
    t->n_durations = TOP_BUCKETS;
    f->groups[i].totals = t;
    f->groups[i].processes = 2;
    f->groups[i].live_processes = 1;
    f->groups[i].per_process = f->proc_ptrs[i];
    f->group_ptrs[i] = &f->groups[i];
    return t;
}

static void fake_process(struct fake *f, size_t group, int32_t pid, const char *name,
                         uint64_t cpu_ns, bool exited)
{
    size_t k = f->groups[group].n_per_process++;
    Fleetprof__GroupProcess *p = &f->procs[group][k];
    Fleetprof__GroupTotals *t = &f->proc_totals[group][k];

    fleetprof__group_process__init(p);
    fleetprof__group_totals__init(t);
    t->name = f->totals[group].name;
    t->cpu_ns = cpu_ns;
    p->pid = pid;
    p->name = (char *)name;
    p->exited = exited;
    p->totals = t;
    f->proc_ptrs[group][k] = p;
}

/* The report settled at settled_ns: the fleet's CPU then, and the first group's totals. */
static void fake_settled(struct fake *f, Fleetprof__SettledTotals *st, uint64_t settled_ns,
                         uint64_t fleet_cpu_ns, uint64_t cpu_ns, uint64_t events, uint64_t slow)
{
    fleetprof__settled_totals__init(st);
    st->cpu_ns = cpu_ns;
    st->events = events;
    st->slow_events = slow;
    f->groups[0].settled = st;
    f->rep.settled_ns = settled_ns;
    f->rep.settled_fleet_cpu_ns = fleet_cpu_ns;
}

static struct top_snapshot *snap_of(struct fake *f, const char *breakdown)
{
    struct top_snapshot *s = NULL;

    assert_int_equal(top_snapshot_from_report(&f->rep, breakdown, &s), 0);
    assert_non_null(s);
    return s;
}

static char *render(const struct top_view *v, const struct top_render_opts *o, long *ret_hl)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    long hl;

    assert_non_null(mem);
    hl = top_render(mem, v, o);
    assert_int_equal(fclose(mem), 0);
    if (ret_hl)
        *ret_hl = hl;
    return text;
}

static const char *nth_line(const char *text, long n, char *out, size_t size)
{
    const char *end;

    for (; n > 0 && text; n--) {
        text = strchr(text, '\n');
        text = text ? text + 1 : NULL;
    }
    assert_non_null(text);
    end = strchr(text, '\n');
    (void)snprintf(out, size, "%.*s", (int)(end ? end - text : (long)strlen(text)), text);
    return out;
}

static void assert_near(double got, double want, double tol)
{
    if (!(fabs(got - want) <= tol))
        fail_msg("got %.6f, want %.6f +- %g", got, want, tol);
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_quantiles(void **state)
{
    struct top_totals t = {0};

    (void)state;
    assert_int_equal(top_quantile_ns(&t, 0.5), 0); /* no event */
    t.durations[3] = 10;                           /* [4, 8) us */
    t.durations[9] = 1;                            /* [256, 512) us */
    t.worst_event_ns = 300 * 1000;
    assert_int_equal(top_quantile_ns(&t, 0.5), 8000); /* the bucket's upper bound */
    assert_int_equal(top_quantile_ns(&t, 10.0 / 11), 8000);
    assert_int_equal(top_quantile_ns(&t, 1.0), 300 * 1000); /* no event took more */
    t.durations[9] = 0;
    t.worst_event_ns = 5000;
    assert_int_equal(top_quantile_ns(&t, 0.5), 5000);
    /* 99 fast events and one in the open-ended top bucket: p50 fast, p99 still fast,
     * the 100th is the worst. */
    memset(&t, 0, sizeof(t));
    t.durations[0] = 99;
    t.durations[TOP_BUCKETS - 1] = 1;
    t.worst_event_ns = 3 * SEC;
    assert_int_equal(top_quantile_ns(&t, 0.5), 1000);
    assert_int_equal(top_quantile_ns(&t, 0.99), 1000);
    assert_int_equal(top_quantile_ns(&t, 1.0), 3 * SEC);
    assert_int_equal(top_quantile_ns(&t, 0), 0);
    /* 100 x 0.98 is 98.00000000000001 in doubles: still the 98th event, not the 99th. */
    memset(&t, 0, sizeof(t));
    t.durations[1] = 98;
    t.durations[5] = 2;
    t.worst_event_ns = 20 * 1000;
    assert_int_equal(top_quantile_ns(&t, 0.98), 2000);
    assert_int_equal(top_quantile_ns(&t, 0.99), 20 * 1000);
}

static void test_snapshot_copies_report(void **state)
{
    struct fake f;
    struct top_snapshot *s;
    Fleetprof__GroupTotals *t;

    (void)state;
    fake_init(&f, 5 * SEC, 9 * SEC);
    t = fake_group(&f, "alpha", 3 * SEC, 30, 2);
    t->worst_event_ns = 40 * MS;
    t->discarded = 1;
    t->migrated = 2;
    t->stale = 3;
    /* A longer histogram than ours: the extra buckets are the top bucket's. */
    t->n_durations = TOP_BUCKETS + 2;
    f.durations[0][TOP_BUCKETS - 1] = 1;
    f.durations[0][TOP_BUCKETS] = 2;
    f.durations[0][TOP_BUCKETS + 1] = 3;
    f.durations[0][4] = 24;
    fake_process(&f, 0, 100, "worker", 2 * SEC, false);
    fake_process(&f, 0, 101, "old", 1 * SEC, true);
    fake_group(&f, "beta", 1, 1, 0);
    fake_group(&f, "unset", 1, 1, 0);
    f.groups[2].totals = NULL; /* an empty message on the wire: zeros, named "" */
    s = snap_of(&f, "alpha");
    assert_int_equal(s->time_ns, 5 * SEC);
    assert_int_equal(s->fleet_cpu_ns, 9 * SEC);
    assert_int_equal(s->processes, 4);
    assert_string_equal(s->breakdown, "alpha");
    assert_int_equal(s->n_groups, 3);
    assert_string_equal(s->groups[2].totals.name, "");
    assert_int_equal(s->groups[2].totals.cpu_ns, 0);
    assert_string_equal(s->groups[0].totals.name, "alpha");
    assert_int_equal(s->groups[0].totals.worst_event_ns, 40 * MS);
    assert_int_equal(s->groups[0].totals.stale, 3);
    assert_int_equal(s->groups[0].totals.durations[4], 24);
    assert_int_equal(s->groups[0].totals.durations[TOP_BUCKETS - 1], 6);
    assert_int_equal(s->groups[0].processes, 2);
    assert_int_equal(s->groups[0].live_processes, 1);
    assert_int_equal(s->groups[0].n_per_process, 2);
    assert_int_equal(s->groups[0].per_process[1].pid, 101);
    assert_string_equal(s->groups[0].per_process[1].name, "old");
    assert_true(s->groups[0].per_process[1].exited);
    assert_int_equal(s->groups[0].per_process[0].totals.cpu_ns, 2 * SEC);
    assert_string_equal(s->groups[1].totals.name, "beta");
    top_snapshot_free(s);
    assert_null(top_snapshot_free(NULL));
}

/* First screen: no previous report, so no rates; ranked by cumulative CPU. */
static void test_first_view_is_cumulative(void **state)
{
    struct fake f;
    struct top_snapshot *s;
    struct top_view v;

    (void)state;
    fake_init(&f, 10 * SEC, 10 * SEC);
    fake_group(&f, "small", 1 * SEC, 10, 0);
    fake_group(&f, "big", 4 * SEC, 10, 0);
    fake_group(&f, "mid", 2 * SEC, 10, 0);
    s = snap_of(&f, NULL);
    assert_int_equal(top_view_build(NULL, s, NULL, &v), 0);
    assert_false(v.rated);
    assert_true(isnan(v.fleet_cpu_per_s));
    assert_int_equal(v.n_groups, 3);
    assert_string_equal(v.groups[0].totals->name, "big");
    assert_string_equal(v.groups[1].totals->name, "mid");
    assert_string_equal(v.groups[2].totals->name, "small");
    assert_true(isnan(v.groups[0].cpu_per_s));
    assert_true(isnan(v.groups[0].share_pct));
    assert_near(v.groups[0].cumulative_share_pct, 40.0, 1e-9);
    assert_null(v.procs);
    top_view_done(&v);
    top_snapshot_free(s);
}

/* Rates over the daemon's clock; ranked by the interval, not by the totals. */
static void test_rates_and_ranking(void **state)
{
    struct fake a, b;
    struct top_snapshot *s0, *s1;
    struct top_view v;

    (void)state;
    fake_init(&a, 100 * SEC, 50 * SEC);
    fake_group(&a, "old-heavy", 30 * SEC, 1000, 10);
    fake_group(&a, "busy-now", 1 * SEC, 100, 1);
    fake_init(&b, 102 * SEC, 54 * SEC); /* 2 s later, the fleet used 4 s: 2 cores */
    fake_group(&b, "old-heavy", 30 * SEC + 500 * MS, 1010, 10);
    fake_group(&b, "busy-now", 1 * SEC + 3 * SEC, 400, 4);
    fake_group(&b, "newcomer", 200 * MS, 7, 1); /* all of it in this interval */
    s0 = snap_of(&a, NULL);
    s1 = snap_of(&b, NULL);
    assert_int_equal(top_view_build(s0, s1, NULL, &v), 0);
    assert_true(v.rated);
    assert_int_equal(v.interval_ns, 2 * SEC);
    assert_near(v.fleet_cpu_per_s, 2.0, 1e-9);
    assert_string_equal(v.groups[0].totals->name, "busy-now");
    assert_string_equal(v.groups[1].totals->name, "old-heavy");
    assert_string_equal(v.groups[2].totals->name, "newcomer");
    assert_near(v.groups[0].cpu_per_s, 1.5, 1e-9);
    assert_near(v.groups[0].share_pct, 75.0, 1e-9);
    assert_int_equal(v.groups[0].interval_slow_events, 3);
    assert_int_equal(v.groups[0].interval_events, 300);
    assert_near(v.groups[1].cpu_per_s, 0.25, 1e-9);
    assert_near(v.groups[1].share_pct, 12.5, 1e-9);
    assert_int_equal(v.groups[1].interval_slow_events, 0);
    assert_near(v.groups[2].cpu_per_s, 0.1, 1e-9);
    assert_int_equal(v.groups[2].interval_slow_events, 1);
    assert_near(v.groups[1].cumulative_share_pct, 100.0 * 30.5 / 54, 1e-9);
    top_view_done(&v);

    /* A restarted daemon (its fleet CPU went down): no rates against the old one. */
    assert_int_equal(top_view_build(s1, s0, NULL, &v), 0);
    assert_false(v.rated);
    assert_true(isnan(v.groups[0].cpu_per_s));
    top_view_done(&v);
    /* The same report twice (no time passed): no rates either, no division by zero. */
    assert_int_equal(top_view_build(s1, s1, NULL, &v), 0);
    assert_false(v.rated);
    top_view_done(&v);
    top_snapshot_free(s0);
    top_snapshot_free(s1);
}

/* A counter that went down (the daemon dropped a process) is no change, not 2^64. */
static void test_counter_going_down_is_zero(void **state)
{
    struct fake a, b;
    struct top_snapshot *s0, *s1;
    struct top_view v;

    (void)state;
    fake_init(&a, 1 * SEC, 10 * SEC);
    fake_group(&a, "g", 5 * SEC, 100, 9);
    fake_init(&b, 2 * SEC, 11 * SEC);
    fake_group(&b, "g", 4 * SEC, 90, 8);
    s0 = snap_of(&a, NULL);
    s1 = snap_of(&b, NULL);
    assert_int_equal(top_view_build(s0, s1, NULL, &v), 0);
    assert_true(v.rated);
    assert_int_equal(v.groups[0].interval_cpu_ns, 0);
    assert_int_equal(v.groups[0].interval_slow_events, 0);
    assert_near(v.groups[0].cpu_per_s, 0, 1e-12);
    assert_near(v.groups[0].share_pct, 0, 1e-12);
    top_view_done(&v);
    top_snapshot_free(s0);
    top_snapshot_free(s1);
}

/* The breakdown: processes rated only against a breakdown of the same group; SHARE is of
 * the group's CPU. */
static void test_breakdown(void **state)
{
    struct fake a, b;
    struct top_snapshot *s0, *s1, *other;
    struct top_view v;

    (void)state;
    fake_init(&a, 10 * SEC, 20 * SEC);
    fake_group(&a, "tenant", 6 * SEC, 60, 0);
    fake_process(&a, 0, 11, "web", 4 * SEC, false);
    fake_process(&a, 0, 12, "batch", 2 * SEC, false);
    fake_init(&b, 11 * SEC, 22 * SEC);
    fake_group(&b, "tenant", 7 * SEC, 70, 0);
    fake_process(&b, 0, 11, "web", 4 * SEC + 200 * MS, false);
    fake_process(&b, 0, 12, "batch", 2 * SEC + 600 * MS, true);
    fake_process(&b, 0, 13, "fresh", 200 * MS, false); /* new: all of it is the interval's */
    s0 = snap_of(&a, "tenant");
    s1 = snap_of(&b, "tenant");
    assert_int_equal(top_view_build(s0, s1, "tenant", &v), 0);
    assert_true(v.group_found);
    assert_int_equal(v.n_procs, 3);
    assert_int_equal(v.procs[0].pid, 12); /* 0.6 s in the interval: first */
    assert_true(v.procs[0].exited);
    assert_near(v.procs[0].cpu_per_s, 0.6, 1e-9);
    assert_near(v.procs[0].share_pct, 60.0, 1e-9);
    assert_int_equal(v.procs[1].pid, 11); /* ties (0.2 s) by cumulative CPU */
    assert_int_equal(v.procs[2].pid, 13);
    assert_string_equal(v.procs[2].process_name, "fresh");
    assert_near(v.procs[2].share_pct, 20.0, 1e-9);
    assert_near(v.procs[1].cumulative_share_pct, 60.0, 1e-9);
    top_view_done(&v);

    /* The previous report broke down no group: totals only, ranked by them. */
    other = snap_of(&a, NULL);
    assert_int_equal(top_view_build(other, s1, "tenant", &v), 0);
    assert_true(v.rated); /* the groups still are */
    assert_true(isnan(v.procs[0].cpu_per_s));
    assert_true(isnan(v.procs[0].share_pct));
    assert_int_equal(v.procs[0].pid, 11);
    top_view_done(&v);

    /* An unknown group: nothing to break down. */
    assert_int_equal(top_view_build(s0, s1, "nobody", &v), 0);
    assert_false(v.group_found);
    assert_int_equal(v.n_procs, 0);
    top_view_done(&v);
    top_snapshot_free(other);
    top_snapshot_free(s0);
    top_snapshot_free(s1);
}

/* Rates are against the report settled nearest to an interval before the current one;
 * the longer span of two as near; reports settled at the current time give no span. */
static void test_history_pick(void **state)
{
    struct top_snapshot s[6] = {0};
    struct top_snapshot *h[6];

    (void)state;
    for (int i = 0; i < 6; i++) {
        s[i].settled_ns = 10 * SEC + (uint64_t)i * 300 * MS; /* 10.0, 10.3, ... 11.5 s */
        s[i].time_ns = s[i].settled_ns + SEC;                /* the reports' own: unused */
        h[i] = &s[i];
    }
    assert_int_equal(top_history_pick(h, 0, SEC), 0);
    assert_int_equal(top_history_pick(h, 1, SEC), 0);
    assert_int_equal(top_history_pick(h, 2, SEC), 0); /* too short: the oldest */
    assert_int_equal(top_history_pick(h, 4, SEC), 0); /* 0.9 s: 0.1 off */
    assert_int_equal(top_history_pick(h, 5, SEC), 1); /* 1.2 s or 0.9 s: 0.9 s is nearer */
    assert_int_equal(top_history_pick(h, 6, SEC), 2); /* 11.5 - 10.6 = 0.9 s */
    assert_int_equal(top_history_pick(h, 6, 300 * MS), 4);
    assert_int_equal(top_history_pick(h, 6, 0), 4);        /* the previous report */
    assert_int_equal(top_history_pick(h, 6, 450 * MS), 3); /* 0.6 s or 0.3 s: the longer */
    /* The newest settled where the current one is: it gives no span, 11.2 s does. */
    s[4].settled_ns = s[5].settled_ns;
    assert_int_equal(top_history_pick(h, 6, 300 * MS), 3);
    for (int i = 0; i < 6; i++)
        s[i].settled_ns = 10 * SEC;
    assert_int_equal(top_history_pick(h, 6, 300 * MS), 0); /* no span at all: not rated */
}

/* Rates are differences of the settled totals over the settled times' difference; the
 * latest totals are what the cumulative columns show. The header names the window and how
 * long before the report it ended. */
static void test_rates_are_of_settled_totals(void **state)
{
    struct fake f0, f1;
    Fleetprof__SettledTotals st0, st1;
    struct top_snapshot *s0, *s1;
    struct top_view v;
    struct top_render_opts o = {.selected = -1};
    char *text, line[256];

    (void)state;
    fake_init(&f0, 10 * SEC, 900 * MS);
    fake_group(&f0, "api", 500 * MS, 50, 5);
    fake_settled(&f0, &st0, 9 * SEC + 600 * MS, 700 * MS, 400 * MS, 40, 4);
    fake_init(&f1, 10 * SEC + 250 * MS, 1200 * MS);
    fake_group(&f1, "api", 900 * MS, 90, 9);
    fake_settled(&f1, &st1, 9 * SEC + 850 * MS, 950 * MS, 550 * MS, 55, 5);
    s0 = snap_of(&f0, NULL);
    s1 = snap_of(&f1, NULL);
    assert_int_equal(top_view_build(s0, s1, NULL, &v), 0);
    assert_true(v.rated);
    assert_int_equal(v.interval_ns, 250 * MS);
    assert_int_equal(v.from_ns, 9 * SEC + 600 * MS);
    assert_int_equal(v.to_ns, 9 * SEC + 850 * MS);
    assert_near(v.fleet_cpu_per_s, 1.0, 1e-9);         /* 250 ms of CPU in 250 ms */
    assert_near(v.groups[0].cpu_per_s, 0.6, 1e-9);     /* 150 ms, not 400 ms */
    assert_int_equal(v.groups[0].interval_events, 15); /* not 40 */
    assert_int_equal(v.groups[0].interval_slow_events, 1);
    assert_near(v.groups[0].share_pct, 60.0, 1e-9);
    assert_int_equal(v.groups[0].totals->cpu_ns, 900 * MS); /* cumulative: the latest */
    text = render(&v, &o, NULL);
    assert_string_equal(nth_line(text, 0, line, sizeof(line)),
                        "fleetprof top  fleet 1.00 CPU/s over 250.0ms to 400.0ms ago, 4 "
                        "processes, 1 group");
    free(text);
    top_view_done(&v);
    /* The same settled time again: no rates. */
    f1.rep.settled_ns = f0.rep.settled_ns;
    top_snapshot_free(s1);
    s1 = snap_of(&f1, NULL);
    assert_int_equal(top_view_build(s0, s1, NULL, &v), 0);
    assert_false(v.rated);
    top_view_done(&v);
    top_snapshot_free(s0);
    top_snapshot_free(s1);
}

static void test_format_ns(void **state)
{
    static const struct {
        uint64_t ns;
        const char *text;
    } cases[] = {
            {0, "0"},          {850, "850ns"},        {1000, "1.0us"},      {12345, "12.3us"},
            {4 * MS, "4.0ms"}, {999 * MS, "999.0ms"}, {1250 * MS, "1.25s"}, {100 * SEC, "100s"},
    };
    char out[32];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        top_format_ns(out, sizeof(out), cases[i].ns);
        assert_string_equal(out, cases[i].text);
    }
}

static void test_render_text(void **state)
{
    struct fake a, b;
    struct top_snapshot *s0, *s1;
    struct top_view v;
    struct top_render_opts o = {.clock = "12:34:56", .selected = -1};
    char *text, line[512];
    long hl;
    Fleetprof__GroupTotals *t;

    (void)state;
    fake_init(&a, 1 * SEC, 2 * SEC);
    fake_group(&a, "render-a", 1 * SEC, 10, 1);
    fake_group(&a, "render-b-with-a-long-name", 0, 0, 0);
    fake_init(&b, 2 * SEC, 4 * SEC);
    t = fake_group(&b, "render-a", 2 * SEC, 20, 3);
    t->worst_event_ns = 25 * MS;
    fake_group(&b, "render-b-with-a-long-name", 500 * MS, 5, 0);
    s0 = snap_of(&a, NULL);
    s1 = snap_of(&b, NULL);
    assert_int_equal(top_view_build(s0, s1, NULL, &v), 0);

    text = render(&v, &o, &hl);
    assert_int_equal(hl, -1);
    assert_null(strchr(text, '\033')); /* plain text: no escape codes */
    assert_non_null(strstr(text, "12:34:56"));
    assert_non_null(strstr(nth_line(text, 0, line, sizeof(line)), "fleet 2.00 CPU/s over 1.00s"));
    assert_non_null(strstr(line, "4 processes, 2 groups"));
    assert_non_null(strstr(nth_line(text, 2, line, sizeof(line)), "GROUP"));
    assert_non_null(strstr(line, "CPU/s"));
    assert_non_null(strstr(line, "P99"));
    nth_line(text, 3, line, sizeof(line));
    assert_true(!strncmp(line, "render-a ", 9));
    /* The row is the name column (the longest name, 25) and TOP_GROUP_ROW_FIXED more. */
    assert_int_equal(strlen(line), 25 + TOP_GROUP_ROW_FIXED);
    assert_non_null(strstr(line, " 1.00 ")); /* CPU/s */
    assert_non_null(strstr(line, "50.0%"));  /* share */
    assert_non_null(strstr(line, "2/3"));    /* slow: interval/total */
    assert_non_null(strstr(line, "25.0ms")); /* worst */
    assert_non_null(strstr(line, "1/2"));    /* processes live/all */
    assert_non_null(strstr(nth_line(text, 4, line, sizeof(line)), "render-b-with-a-long-name"));
    free(text);

    /* A terminal: name column cut, one row, the selected row reported, key help. */
    o.name_width = 10;
    o.max_rows = 1;
    o.selected = 0;
    o.keys_help = true;
    text = render(&v, &o, &hl);
    assert_int_equal(hl, 3);
    assert_non_null(strstr(text, "(1 more groups)"));
    assert_non_null(strstr(text, "q quit"));
    assert_null(strstr(text, "render-b"));
    free(text);
    /* The second row selected with room for one: the table scrolls to it. */
    o.selected = 1;
    text = render(&v, &o, &hl);
    assert_int_equal(hl, 3);
    assert_non_null(strstr(nth_line(text, 3, line, sizeof(line)), "render-b-~"));
    assert_null(strstr(text, "render-a"));
    free(text);
    o.max_rows = 0;
    text = render(&v, &o, &hl);
    assert_non_null(strstr(text, "render-b-~ ")); /* 9 characters and the cut mark */
    free(text);
    top_view_done(&v);

    /* The first screen says rates come later. */
    assert_int_equal(top_view_build(NULL, s1, NULL, &v), 0);
    o = (struct top_render_opts){.selected = -1};
    text = render(&v, &o, &hl);
    assert_non_null(strstr(text, "rates from the next refresh"));
    assert_non_null(strstr(nth_line(text, 3, line, sizeof(line)), "-/3")); /* no interval */
    free(text);
    top_view_done(&v);
    top_snapshot_free(s0);
    top_snapshot_free(s1);
}

static void test_render_breakdown(void **state)
{
    struct fake a;
    struct top_snapshot *s;
    struct top_view v;
    struct top_render_opts o = {.selected = -1};
    char *text, line[512];

    (void)state;
    fake_init(&a, 1 * SEC, 2 * SEC);
    fake_group(&a, "tenant", 1 * SEC, 10, 1);
    fake_process(&a, 0, 4242, "web-server", 750 * MS, false);
    fake_process(&a, 0, 4343, "gone", 250 * MS, true);
    s = snap_of(&a, "tenant");
    assert_int_equal(top_view_build(NULL, s, "tenant", &v), 0);
    text = render(&v, &o, NULL);
    assert_null(strchr(text, '\033'));
    assert_non_null(strstr(text, "group \"tenant\""));
    assert_non_null(strstr(text, "PID"));
    assert_non_null(strstr(text, "    4242  web-server  live"));
    assert_int_equal(strlen(nth_line(text, 5, line, sizeof(line))),
                     strlen("web-server") + TOP_PROCESS_ROW_FIXED);
    assert_non_null(strstr(text, "    4343  gone        exited"));
    assert_non_null(strstr(text, "75.0%"));
    free(text);
    top_view_done(&v);

    assert_int_equal(top_view_build(NULL, s, "missing", &v), 0);
    text = render(&v, &o, NULL);
    assert_non_null(strstr(text, "group \"missing\": not measured by any process"));
    free(text);
    top_view_done(&v);
    top_snapshot_free(s);
}

static const struct json_value *get(const struct json_doc *d, const struct json_value *v,
                                    const char *key)
{
    const struct json_value *r = json_object_get(d, v, key);

    if (!r)
        fail_msg("no member %s", key);
    return r;
}

static int64_t get_int(const struct json_doc *d, const struct json_value *v, const char *key)
{
    int64_t n = -1;

    assert_int_equal(json_value_int64(d, get(d, v, key), &n), 0);
    return n;
}

static double get_double(const struct json_doc *d, const struct json_value *v, const char *key)
{
    double x = NAN;

    assert_int_equal(json_value_double(d, get(d, v, key), &x), 0);
    return x;
}

static void test_json(void **state)
{
    struct fake a, b;
    struct top_snapshot *s0, *s1;
    struct top_view v;
    struct json_doc *doc = NULL;
    struct json_read_error err = {0};
    const struct json_value *root, *groups, *g, *procs, *p;
    char *text = NULL;
    size_t len = 0;
    FILE *mem;

    (void)state;
    fake_init(&a, 1 * SEC, 2 * SEC);
    fake_group(&a, "quote\"d\\name", 1 * SEC, 10, 1);
    fake_process(&a, 0, 7, "p7", 1 * SEC, false);
    fake_init(&b, 3 * SEC, 6 * SEC);
    fake_group(&b, "quote\"d\\name", 2 * SEC, 30, 4);
    fake_process(&b, 0, 7, "p7", 2 * SEC, false);
    b.durations[0][2] = 30; /* [2, 4) us */
    b.totals[0].worst_event_ns = 5000;
    s0 = snap_of(&a, "quote\"d\\name");
    s1 = snap_of(&b, "quote\"d\\name");
    assert_int_equal(top_view_build(s0, s1, "quote\"d\\name", &v), 0);
    mem = open_memstream(&text, &len);
    assert_non_null(mem);
    top_write_json(mem, &v);
    assert_int_equal(fclose(mem), 0);
    assert_true(len > 0 && text[len - 1] == '\n');
    if (json_doc_parse(text, len, 0, &doc, &err) != 0)
        fail_msg("invalid JSON at %lu:%lu: %s\n%s", err.line, err.column, err.message, text);
    root = json_doc_root(doc);
    assert_true(json_value_is_true(get(doc, root, "rated")));
    assert_int_equal(get_int(doc, root, "interval_ns"), 2 * SEC);
    assert_int_equal(get_int(doc, root, "fleet_cpu_ns"), 6 * SEC);
    assert_near(get_double(doc, root, "fleet_cpu_per_s"), 2.0, 1e-6);
    assert_int_equal(get_int(doc, root, "processes"), 4);
    groups = get(doc, root, "groups");
    assert_int_equal(json_value_len(groups), 1);
    g = json_array_at(doc, groups, 0);
    assert_string_equal(json_value_string(doc, get(doc, g, "name"), NULL), "quote\"d\\name");
    assert_int_equal(get_int(doc, g, "cpu_ns"), 2 * SEC);
    assert_int_equal(get_int(doc, g, "slow_events"), 4);
    assert_int_equal(get_int(doc, g, "interval_slow_events"), 3);
    assert_int_equal(get_int(doc, g, "p50_ns"), 4000);
    assert_int_equal(json_value_len(get(doc, g, "durations")), TOP_BUCKETS);
    assert_near(get_double(doc, g, "cpu_per_s"), 0.5, 1e-6);
    assert_near(get_double(doc, g, "share_pct"), 25.0, 1e-6);
    assert_near(get_double(doc, g, "cumulative_share_pct"), 100.0 / 3, 1e-3);
    assert_int_equal(get_int(doc, g, "live_processes"), 1);
    assert_true(json_value_is_true(get(doc, root, "group_found")));
    procs = get(doc, root, "per_process");
    assert_int_equal(json_value_len(procs), 1);
    p = json_array_at(doc, procs, 0);
    assert_int_equal(get_int(doc, p, "pid"), 7);
    assert_int_equal(get_int(doc, p, "cpu_ns"), 2 * SEC);
    assert_near(get_double(doc, p, "share_pct"), 100.0, 1e-6);
    json_doc_free(doc);
    free(text);
    top_view_done(&v);

    /* Not rated: the rates are null, not 0 or NaN. */
    assert_int_equal(top_view_build(NULL, s1, NULL, &v), 0);
    text = NULL;
    mem = open_memstream(&text, &len);
    assert_non_null(mem);
    top_write_json(mem, &v);
    assert_int_equal(fclose(mem), 0);
    assert_int_equal(json_doc_parse(text, len, 0, &doc, &err), 0);
    root = json_doc_root(doc);
    assert_int_equal(json_value_type(get(doc, root, "fleet_cpu_per_s")), JSON_NULL);
    g = json_array_at(doc, get(doc, root, "groups"), 0);
    assert_int_equal(json_value_type(get(doc, g, "cpu_per_s")), JSON_NULL);
    assert_int_equal(json_value_type(get(doc, g, "share_pct")), JSON_NULL);
    assert_null(json_object_get(doc, root, "per_process"));
    json_doc_free(doc);
    free(text);
    top_view_done(&v);
    top_snapshot_free(s0);
    top_snapshot_free(s1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_quantiles),
            cmocka_unit_test(test_snapshot_copies_report),
            cmocka_unit_test(test_first_view_is_cumulative),
            cmocka_unit_test(test_rates_and_ranking),
            cmocka_unit_test(test_counter_going_down_is_zero),
            cmocka_unit_test(test_breakdown),
            cmocka_unit_test(test_history_pick),
            cmocka_unit_test(test_rates_are_of_settled_totals),
            cmocka_unit_test(test_format_ns),
            cmocka_unit_test(test_render_text),
            cmocka_unit_test(test_render_breakdown),
            cmocka_unit_test(test_json),
    };

    return cmocka_run_group_tests_name("tools-top", tests, NULL, NULL);
}
