/* tools/summary-groups.c - the fleet's performance groups, for the summary. */
#include "tools/summary-groups.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "common/quantile.h"
#include "json/reader.h"
#include "json/writer.h"
#include "tools/summary-log.h"

double summary_percent(uint64_t part, uint64_t whole)
{
    double p = whole ? 100.0 * (double)part / (double)whole : 0.0;

    return (double)(int64_t)(p * 100.0 + 0.5) / 100.0; /* two decimals are plenty */
}

static struct group_sum *group_find(struct group_table *g, const char *name, size_t len)
{
    uint32_t id = pstack_func_intern(&g->names, name, len, NULL, 0);

    if (id == PSTACK_NONE) {
        g->oom = true;
        return NULL;
    }
    if (id < g->n)
        return &g->v[id];
    if (FLEETPROF_GROW(g->v, g->cap, g->n + 1) < 0) {
        g->oom = true;
        return NULL;
    }
    memset(&g->v[g->n], 0, sizeof(g->v[0]));
    g->v[g->n].name = name;
    g->v[g->n].name_len = len;
    return &g->v[g->n++];
}

/* A non-negative integer member of o, or 0. */
static uint64_t member_u64(const struct json_doc *d, const struct json_value *o, const char *key)
{
    int64_t v;

    if (json_value_int64(d, json_object_get(d, o, key), &v) < 0 || v < 0)
        return 0;
    return (uint64_t)v;
}

void summary_groups_add(struct group_table *gt, const struct json_doc *d,
                        const struct json_value *proc)
{
    const struct json_value *groups = json_object_get(
            d, json_object_get(d, json_object_get(d, proc, "meta"), "fleetprof"), "groups");
    const struct json_value *lower = json_object_get(d, groups, "bucketLowerUs");
    const struct json_value *totals = json_object_get(d, groups, "totals");

    if (!gt->buckets && json_value_type(lower) == JSON_ARRAY) {
        size_t n = json_value_len(lower);

        n = n < MAX_GROUP_BUCKETS ? n : MAX_GROUP_BUCKETS;
        for (size_t b = 0; b < n; b++) {
            int64_t v = 0;

            (void)json_value_int64(d, json_array_at(d, lower, b), &v);
            gt->lower_us[b] = v < 0 ? 0 : (uint64_t)v;
        }
        gt->buckets = n;
    }
    for (size_t i = 0; json_value_type(totals) == JSON_ARRAY && i < json_value_len(totals); i++) {
        const struct json_value *t = json_array_at(d, totals, i);
        const struct json_value *durations = json_object_get(d, t, "durations");
        size_t len;
        const char *name = json_value_string(d, json_object_get(d, t, "name"), &len);
        struct group_sum *g;
        uint64_t cpu, worst;

        if (!name)
            continue;
        g = group_find(gt, name, len);
        if (!g)
            return;
        cpu = member_u64(d, t, "cpuNs");
        g->cpu_ns += cpu;
        gt->cpu_ns += cpu;
        g->events += member_u64(d, t, "events");
        g->slow_events += member_u64(d, t, "slowEvents");
        g->discarded += member_u64(d, t, "discarded");
        g->migrated += member_u64(d, t, "migrated");
        g->stale += member_u64(d, t, "stale");
        worst = member_u64(d, t, "worstEventNs");
        if (worst > g->worst_event_ns)
            g->worst_event_ns = worst;
        for (size_t b = 0; b < json_value_len(durations) && b < MAX_GROUP_BUCKETS; b++) {
            int64_t v;

            if (json_value_int64(d, json_array_at(d, durations, b), &v) == 0 && v > 0)
                g->durations[b] += (uint64_t)v;
        }
        g->processes++;
    }
}

/* The q-quantile of a group's per-event CPU time from its summed histogram: the upper bound
 * of the bucket holding it (the next bucket's lower bound), never above the worst event; 0
 * without events or bucket bounds. */
static uint64_t group_quantile_ns(const struct group_table *t, const struct group_sum *g, double q)
{
    int b = histogram_quantile_bucket(g->durations, t->buckets, q);
    uint64_t upper;

    if (b < 0)
        return 0;
    upper = (size_t)b + 1 < t->buckets ? t->lower_us[b + 1] * 1000 : UINT64_MAX;
    return upper > g->worst_event_ns ? g->worst_event_ns : upper;
}

static int compare_group_cpu(const void *a, const void *b)
{
    const struct group_sum *ga = a, *gb = b;
    size_t n = ga->name_len < gb->name_len ? ga->name_len : gb->name_len;
    int c;

    if (ga->cpu_ns != gb->cpu_ns)
        return ga->cpu_ns < gb->cpu_ns ? 1 : -1;
    c = memcmp(ga->name, gb->name, n);
    return c ? c : (ga->name_len > gb->name_len) - (ga->name_len < gb->name_len);
}

/* A duration for a table cell: "850ns", "12.3us", "4.56ms", "2.10s". */
static const char *format_ns(char *buf, size_t size, uint64_t ns)
{
    if (ns < 1000)
        (void)snprintf(buf, size, "%lluns", (unsigned long long)ns);
    else if (ns < 1000000)
        (void)snprintf(buf, size, "%.1fus", (double)ns / 1e3);
    else if (ns < 1000000000)
        (void)snprintf(buf, size, "%.2fms", (double)ns / 1e6);
    else
        (void)snprintf(buf, size, "%.2fs", (double)ns / 1e9);
    return buf;
}

void summary_groups_sort(struct group_table *t)
{
    if (t->n > 1)
        qsort(t->v, t->n, sizeof(*t->v), compare_group_cpu);
}

void summary_groups_print(const struct group_table *t, uint64_t fleet)
{
    uint64_t dropped = 0;
    char worst[32], p50[32], p99[32];

    if (!t->n)
        return;
    (void)printf("\nPerformance groups of the fleet (charged CPU, summed over the processes):\n");
    (void)printf("  %-20s %10s %8s %7s %9s %6s %9s %9s %9s %5s\n", "GROUP", "CPU ms", "%GROUPS",
                 "%FLEET", "EVENTS", "SLOW", "WORST", "P50", "P99", "PROCS");
    for (size_t i = 0; i < t->n; i++) {
        const struct group_sum *g = &t->v[i];

        (void)printf("  ");
        summary_print_clean(g->name, g->name_len);
        (void)printf("%*s", g->name_len < 20 ? (int)(20 - g->name_len) : 0, "");
        (void)printf(" %10.1f %7.1f%%", (double)g->cpu_ns / 1e6,
                     summary_percent(g->cpu_ns, t->cpu_ns));
        if (fleet)
            (void)printf(" %6.1f%%", summary_percent(g->cpu_ns, fleet));
        else
            (void)printf(" %7s", "-");
        (void)printf(" %9llu %6llu %9s %9s %9s %5zu\n", (unsigned long long)g->events,
                     (unsigned long long)g->slow_events,
                     format_ns(worst, sizeof(worst), g->worst_event_ns),
                     format_ns(p50, sizeof(p50), group_quantile_ns(t, g, 0.5)),
                     format_ns(p99, sizeof(p99), group_quantile_ns(t, g, 0.99)), g->processes);
        dropped += g->discarded + g->migrated + g->stale;
    }
    (void)printf("  %%FLEET: of the CPU time the profile's samples recorded%s. P50/P99: per-event "
                 "CPU,\n  upper bound of its log2 histogram bucket.",
                 fleet ? "" : " (not known: no CPU deltas in ns)");
    if (dropped)
        (void)printf(" Measures dropped (share outside 0..100 %%,\n  CPU migration, stale "
                     "stopwatch): %llu.",
                     (unsigned long long)dropped);
    (void)putchar('\n');
}

void summary_groups_write(const struct group_table *t, struct json_writer *w, uint64_t fleet)
{
    if (!t->n)
        return;
    json_writer_object_begin(w, "groups");
    json_writer_uint(w, "cpuNs", t->cpu_ns);
    if (fleet)
        json_writer_uint(w, "fleetCpuNs", fleet);
    else
        json_writer_null(w, "fleetCpuNs");
    json_writer_array_begin(w, "list");
    for (size_t i = 0; i < t->n; i++) {
        const struct group_sum *g = &t->v[i];

        json_writer_object_begin(w, NULL);
        json_writer_string_len(w, "name", g->name, g->name_len);
        json_writer_uint(w, "cpuNs", g->cpu_ns);
        json_writer_double(w, "groupsPercent", summary_percent(g->cpu_ns, t->cpu_ns));
        if (fleet)
            json_writer_double(w, "fleetPercent", summary_percent(g->cpu_ns, fleet));
        else
            json_writer_null(w, "fleetPercent");
        json_writer_uint(w, "events", g->events);
        json_writer_uint(w, "slowEvents", g->slow_events);
        json_writer_uint(w, "worstEventNs", g->worst_event_ns);
        json_writer_uint(w, "p50Ns", group_quantile_ns(t, g, 0.5));
        json_writer_uint(w, "p99Ns", group_quantile_ns(t, g, 0.99));
        json_writer_uint(w, "discarded", g->discarded);
        json_writer_uint(w, "migrated", g->migrated);
        json_writer_uint(w, "stale", g->stale);
        json_writer_uint(w, "processes", g->processes);
        json_writer_object_end(w);
    }
    json_writer_array_end(w);
    json_writer_object_end(w);
}

void summary_groups_done(struct group_table *t)
{
    free(t->v);
    pstack_funcs_done(&t->names);
}
