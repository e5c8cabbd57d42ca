/* tools/top-model.c - snapshots, rates, ranking and output of `fleetprof top` (top-model.h). */
#include "tools/top-model.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/quantile.h"

/* ---- snapshots --------------------------------------------------------------------------- */

static int copy_totals(struct top_totals *dst, const Fleetprof__GroupTotals *src,
                       const Fleetprof__SettledTotals *settled)
{
    memset(dst, 0, sizeof(*dst));
    /* An empty message on the wire: all zero, named "" (names are never NULL here). */
    dst->name = strdup(src && src->name ? src->name : "");
    if (!dst->name)
        return -ENOMEM;
    if (!src)
        return 0;
    dst->cpu_ns = src->cpu_ns;
    dst->cycles = src->cycles;
    dst->activations = src->activations;
    dst->events = src->events;
    dst->worst_event_ns = src->worst_event_ns;
    dst->slow_events = src->slow_events;
    dst->discarded = src->discarded;
    dst->migrated = src->migrated;
    dst->stale = src->stale;
    /* A sender with more buckets: the extra ones are the open-ended top bucket's. */
    for (size_t b = 0; b < src->n_durations; b++)
        dst->durations[b < TOP_BUCKETS ? b : TOP_BUCKETS - 1] += src->durations[b];
    dst->settled_cpu_ns = settled ? settled->cpu_ns : src->cpu_ns;
    dst->settled_events = settled ? settled->events : src->events;
    dst->settled_slow_events = settled ? settled->slow_events : src->slow_events;
    return 0;
}

struct top_snapshot *top_snapshot_free(struct top_snapshot *snap)
{
    if (!snap)
        return NULL;
    for (size_t i = 0; i < snap->n_groups; i++) {
        struct top_group *g = &snap->groups[i];

        free(g->totals.name);
        for (size_t k = 0; k < g->n_per_process; k++) {
            free(g->per_process[k].name);
            free(g->per_process[k].totals.name);
        }
        free(g->per_process);
    }
    free(snap->groups);
    free(snap->breakdown);
    free(snap);
    return NULL;
}

int top_snapshot_from_report(const Fleetprof__GroupsReport *rep, const char *breakdown,
                             struct top_snapshot **ret_snap)
{
    struct top_snapshot *s = calloc(1, sizeof(*s));

    if (!s)
        return -ENOMEM;
    s->time_ns = rep->time_ns;
    s->fleet_cpu_ns = rep->fleet_cpu_ns;
    s->processes = rep->processes;
    /* A daemon that does not settle: its latest totals, at the time of the report. */
    s->settled_ns = rep->settled_ns ? rep->settled_ns : rep->time_ns;
    s->settled_fleet_cpu_ns = rep->settled_ns ? rep->settled_fleet_cpu_ns : rep->fleet_cpu_ns;
    if (breakdown && !(s->breakdown = strdup(breakdown)))
        goto err_free;
    if (rep->n_groups) {
        s->groups = calloc(rep->n_groups, sizeof(*s->groups));
        if (!s->groups)
            goto err_free;
    }
    for (size_t i = 0; i < rep->n_groups; i++) {
        const Fleetprof__FleetGroup *fg = rep->groups[i];
        struct top_group *g = &s->groups[i];

        s->n_groups = i + 1; /* freed from here on, even half-filled */
        if (copy_totals(&g->totals, fg->totals, rep->settled_ns ? fg->settled : NULL) < 0)
            goto err_free;
        g->processes = fg->processes;
        g->live_processes = fg->live_processes;
        if (!fg->n_per_process)
            continue;
        g->per_process = calloc(fg->n_per_process, sizeof(*g->per_process));
        if (!g->per_process)
            goto err_free;
        for (size_t k = 0; k < fg->n_per_process; k++) {
            const Fleetprof__GroupProcess *gp = fg->per_process[k];
            struct top_process *p = &g->per_process[k];

            g->n_per_process = k + 1;
            p->pid = gp->pid;
            p->exited = gp->exited;
            p->name = strdup(gp->name ? gp->name : "");
            if (!p->name ||
                copy_totals(&p->totals, gp->totals, rep->settled_ns ? gp->settled : NULL) < 0)
                goto err_free;
        }
    }
    *ret_snap = s;
    return 0;

err_free:
    top_snapshot_free(s);
    return -ENOMEM;
}

/* ---- rates ------------------------------------------------------------------------------- */

size_t top_history_pick(struct top_snapshot *const *hist, size_t n, uint64_t interval_ns)
{
    size_t best = 0;
    uint64_t best_miss = UINT64_MAX;

    for (size_t i = 0; i + 1 < n; i++) {
        uint64_t to = hist[n - 1]->settled_ns, from = hist[i]->settled_ns, span, miss;

        if (from >= to)
            continue;
        span = to - from;
        miss = span > interval_ns ? span - interval_ns : interval_ns - span;
        if (miss < best_miss) { /* oldest first: a tie keeps the longer span */
            best = i;
            best_miss = miss;
        }
    }
    return best;
}

uint64_t top_quantile_ns(const struct top_totals *t, double q)
{
    int b = histogram_quantile_bucket(t->durations, TOP_BUCKETS, q);
    uint64_t upper;

    if (b < 0)
        return 0;
    /* The last bucket has no upper bound, and no event took more than the worst. */
    upper = b + 1 < TOP_BUCKETS ? (UINT64_C(1) << b) * 1000 : UINT64_MAX;
    return upper > t->worst_event_ns ? t->worst_event_ns : upper;
}

/* A counter that went down (a process the daemon forgot) counts as no change, never as a
 * huge unsigned difference. */
static uint64_t delta(uint64_t now, uint64_t before)
{
    return now > before ? now - before : 0;
}

static double pct(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : NAN;
}

static void fill_row(struct top_row *r, const struct top_totals *cur, const struct top_totals *prev,
                     uint64_t interval_ns)
{
    r->totals = cur;
    r->p50_ns = top_quantile_ns(cur, 0.50);
    r->p99_ns = top_quantile_ns(cur, 0.99);
    r->cpu_per_s = NAN;
    r->share_pct = NAN;
    if (!interval_ns)
        return;
    /* A group or process new since the previous snapshot did all of its work in the
     * interval as far as we can tell: its whole totals are the interval's. */
    r->interval_cpu_ns = delta(cur->settled_cpu_ns, prev ? prev->settled_cpu_ns : 0);
    r->interval_events = delta(cur->settled_events, prev ? prev->settled_events : 0);
    r->interval_slow_events = delta(cur->settled_slow_events, prev ? prev->settled_slow_events : 0);
    r->cpu_per_s = (double)r->interval_cpu_ns / (double)interval_ns;
}

static const struct top_group *find_group(const struct top_snapshot *s, const char *name)
{
    for (size_t i = 0; s && name && i < s->n_groups; i++)
        if (s->groups[i].totals.name && !strcmp(s->groups[i].totals.name, name))
            return &s->groups[i];
    return NULL;
}

static const struct top_process *find_process(const struct top_group *g, int32_t pid)
{
    for (size_t i = 0; g && i < g->n_per_process; i++)
        if (g->per_process[i].pid == pid)
            return &g->per_process[i];
    return NULL;
}

static const char *row_name(const struct top_row *r)
{
    return r->totals->name ? r->totals->name : "";
}

/* by_rate (a bool *): CPU over the interval first; otherwise (first screen) cumulative CPU. */
static int compare_rows(const void *a, const void *b, void *by_rate)
{
    const struct top_row *x = a, *y = b;

    if (*(const bool *)by_rate && x->interval_cpu_ns != y->interval_cpu_ns)
        return x->interval_cpu_ns > y->interval_cpu_ns ? -1 : 1;
    if (x->totals->cpu_ns != y->totals->cpu_ns)
        return x->totals->cpu_ns > y->totals->cpu_ns ? -1 : 1;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return strcmp(row_name(x), row_name(y));
}

static void rank(struct top_row *rows, size_t n, bool by_rate)
{
    if (n)
        qsort_r(rows, n, sizeof(*rows), compare_rows, &by_rate);
}

int top_view_build(const struct top_snapshot *prev, const struct top_snapshot *cur,
                   const char *group, struct top_view *ret_view)
{
    struct top_view v = {0};
    const struct top_group *g, *pg;
    uint64_t fleet_delta = 0, group_delta = 0;
    bool procs_rated = false;

    v.time_ns = cur->time_ns;
    v.fleet_cpu_ns = cur->fleet_cpu_ns;
    v.processes = cur->processes;
    v.fleet_cpu_per_s = NAN;
    /* A daemon that restarted has smaller totals: no rates against its predecessor. */
    v.rated = prev && prev->settled_ns < cur->settled_ns &&
              prev->settled_fleet_cpu_ns <= cur->settled_fleet_cpu_ns &&
              prev->fleet_cpu_ns <= cur->fleet_cpu_ns;
    if (v.rated) {
        v.from_ns = prev->settled_ns;
        v.to_ns = cur->settled_ns;
        v.interval_ns = cur->settled_ns - prev->settled_ns;
        fleet_delta = cur->settled_fleet_cpu_ns - prev->settled_fleet_cpu_ns;
        v.fleet_cpu_per_s = (double)fleet_delta / (double)v.interval_ns;
    } else {
        prev = NULL;
    }

    if (cur->n_groups) {
        v.groups = calloc(cur->n_groups, sizeof(*v.groups));
        if (!v.groups)
            return -ENOMEM;
    }
    for (size_t i = 0; i < cur->n_groups; i++) {
        const struct top_group *cg = &cur->groups[i];
        struct top_row *r = &v.groups[v.n_groups++];

        pg = find_group(prev, cg->totals.name);
        fill_row(r, &cg->totals, pg ? &pg->totals : NULL, v.interval_ns);
        r->processes = cg->processes;
        r->live_processes = cg->live_processes;
        r->cumulative_share_pct = pct(cg->totals.cpu_ns, cur->fleet_cpu_ns);
        if (v.rated)
            r->share_pct = pct(r->interval_cpu_ns, fleet_delta);
    }
    rank(v.groups, v.n_groups, v.rated);

    v.group = group;
    g = find_group(cur, group);
    v.group_found = g != NULL;
    if (g && g->n_per_process) {
        v.procs = calloc(g->n_per_process, sizeof(*v.procs));
        if (!v.procs) {
            free(v.groups);
            return -ENOMEM;
        }
        /* Process rates only against a previous breakdown of the same group: without one,
         * a process's whole totals would pass for the interval's. */
        procs_rated = v.rated && prev->breakdown && !strcmp(prev->breakdown, group);
        pg = procs_rated ? find_group(prev, group) : NULL; /* NULL: the group is new */
        group_delta = procs_rated ? delta(g->totals.cpu_ns, pg ? pg->totals.cpu_ns : 0) : 0;
        for (size_t i = 0; i < g->n_per_process; i++) {
            const struct top_process *p = &g->per_process[i];
            const struct top_process *pp = find_process(pg, p->pid);
            struct top_row *r = &v.procs[v.n_procs++];

            fill_row(r, &p->totals, pp ? &pp->totals : NULL, procs_rated ? v.interval_ns : 0);
            r->pid = p->pid;
            r->process_name = p->name;
            r->exited = p->exited;
            r->cumulative_share_pct = pct(p->totals.cpu_ns, g->totals.cpu_ns);
            if (procs_rated)
                r->share_pct = pct(r->interval_cpu_ns, group_delta);
        }
        rank(v.procs, v.n_procs, procs_rated);
    }
    *ret_view = v;
    return 0;
}

void top_view_done(struct top_view *view)
{
    free(view->groups);
    free(view->procs);
    memset(view, 0, sizeof(*view));
}

/* ---- text -------------------------------------------------------------------------------- */

void top_format_ns(char *out, size_t size, uint64_t ns)
{
    if (ns == 0)
        (void)snprintf(out, size, "0");
    else if (ns < 1000)
        (void)snprintf(out, size, "%" PRIu64 "ns", ns);
    else if (ns < 1000000)
        (void)snprintf(out, size, "%.1fus", (double)ns / 1e3);
    else if (ns < 1000000000)
        (void)snprintf(out, size, "%.1fms", (double)ns / 1e6);
    else if (ns < UINT64_C(100000000000))
        (void)snprintf(out, size, "%.2fs", (double)ns / 1e9);
    else
        (void)snprintf(out, size, "%.0fs", (double)ns / 1e9);
}

/* Counts with at most 6 characters: 12345, 123.4k, 12.3M. */
static void format_count(char *out, size_t size, uint64_t n)
{
    if (n < 100000)
        (void)snprintf(out, size, "%" PRIu64, n);
    else if (n < 100000000)
        (void)snprintf(out, size, "%.1fk", (double)n / 1e3);
    else if (n < UINT64_C(100000000000))
        (void)snprintf(out, size, "%.1fM", (double)n / 1e6);
    else
        (void)snprintf(out, size, "%.1fG", (double)n / 1e9);
}

static void format_rate(char *out, size_t size, double v)
{
    if (isnan(v))
        (void)snprintf(out, size, "-");
    else
        (void)snprintf(out, size, "%.2f", v);
}

static void format_pct(char *out, size_t size, double v)
{
    if (isnan(v))
        (void)snprintf(out, size, "-");
    else
        (void)snprintf(out, size, "%.1f%%", v);
}

/* Code points of UTF-8 text (the daemon passes only valid UTF-8): its width on a terminal,
 * near enough for names. */
static size_t text_width(const char *s)
{
    size_t w = 0;

    for (; *s; s++)
        w += ((unsigned char)*s & 0xC0) != 0x80;
    return w;
}

/* Writes s in exactly width columns: padded with spaces, or cut at a character boundary and
 * ended with '~' when too long. */
static void put_name(FILE *out, const char *s, size_t width)
{
    size_t w = text_width(s);

    if (w <= width) {
        fputs(s, out);
        for (; w < width; w++)
            fputc(' ', out);
        return;
    }
    for (w = 0; *s; s++) {
        if (((unsigned char)*s & 0xC0) != 0x80 && ++w > width - 1)
            break;
        fputc(*s, out);
    }
    fputc('~', out);
}

#define COLS_FMT "  %7s %6s %9s %7s %11s %8s %8s %8s"

static void put_stats(FILE *out, const struct top_row *r, bool rated)
{
    char rate[16], share[16], cpu[16], events[16], slow[40], worst[16], p50[16], p99[16];
    char total[16];

    format_rate(rate, sizeof(rate), r->cpu_per_s);
    format_pct(share, sizeof(share), rated ? r->share_pct : r->cumulative_share_pct);
    top_format_ns(cpu, sizeof(cpu), r->totals->cpu_ns);
    format_count(events, sizeof(events), r->totals->events);
    format_count(total, sizeof(total), r->totals->slow_events);
    if (rated) {
        char recent[16];

        format_count(recent, sizeof(recent), r->interval_slow_events);
        (void)snprintf(slow, sizeof(slow), "%s/%s", recent, total);
    } else {
        (void)snprintf(slow, sizeof(slow), "-/%s", total);
    }
    top_format_ns(worst, sizeof(worst), r->totals->worst_event_ns);
    top_format_ns(p50, sizeof(p50), r->p50_ns);
    top_format_ns(p99, sizeof(p99), r->p99_ns);
    fprintf(out, COLS_FMT, rate, share, cpu, events, slow, worst, p50, p99);
}

static void put_cols_header(FILE *out)
{
    fprintf(out, COLS_FMT, "CPU/s", "SHARE", "CPU", "EVENTS", "SLOW", "WORST", "P50", "P99");
}

/* The name column: the longest name, at least min (the title), at most max (0: no limit). */
static size_t name_column(const struct top_row *rows, size_t n, bool procs, size_t max, size_t min)
{
    size_t w = min;

    for (size_t i = 0; i < n; i++) {
        size_t rw = text_width(procs ? rows[i].process_name : row_name(&rows[i]));

        w = rw > w ? rw : w;
    }
    return max && w > max ? (max > min ? max : min) : w;
}

long top_render(FILE *out, const struct top_view *v, const struct top_render_opts *o)
{
    char rate[16], cpu[16], iv[32];
    long line = 0, selected_line = -1;
    size_t shown, w, first;

    /* Header: what the whole fleet did. */
    fprintf(out, "fleetprof top%s%s  ", o->clock ? "  " : "", o->clock ? o->clock : "");
    if (v->rated) {
        format_rate(rate, sizeof(rate), v->fleet_cpu_per_s);
        top_format_ns(iv, sizeof(iv), v->interval_ns);
        fprintf(out, "fleet %s CPU/s over %s", rate, iv);
        /* Its end: the time every process had reported up to. */
        if (v->time_ns >= v->to_ns + 1000000) {
            top_format_ns(iv, sizeof(iv), v->time_ns - v->to_ns);
            fprintf(out, " to %s ago", iv);
        }
    } else {
        top_format_ns(cpu, sizeof(cpu), v->fleet_cpu_ns);
        fprintf(out, "fleet %s CPU in all (rates from the next refresh)", cpu);
    }
    fprintf(out, ", %" PRIu32 " process%s, %zu group%s\n", v->processes,
            v->processes == 1 ? "" : "es", v->n_groups, v->n_groups == 1 ? "" : "s");
    fputc('\n', out);
    line = 2;

    if (v->group) {
        const struct top_row *g = NULL;

        for (size_t i = 0; i < v->n_groups; i++)
            if (!strcmp(row_name(&v->groups[i]), v->group))
                g = &v->groups[i];
        if (!g) {
            fprintf(out, "group \"%s\": not measured by any process (yet)\n", v->group);
            line++;
        } else {
            format_rate(rate, sizeof(rate), g->cpu_per_s);
            fprintf(out, "group \"%s\": %s CPU/s", v->group, rate);
            if (!isnan(v->rated ? g->share_pct : g->cumulative_share_pct))
                fprintf(out, " (%.1f%% of the fleet%s)",
                        v->rated ? g->share_pct : g->cumulative_share_pct,
                        v->rated ? "" : ", all time");
            fprintf(out, ", %" PRIu32 " process%s (%" PRIu32 " live); SHARE is of the group\n",
                    g->processes, g->processes == 1 ? "" : "es", g->live_processes);
            line++;
        }
        fputc('\n', out);
        line++;
        w = name_column(v->procs, v->n_procs, true, o->name_width, 4);
        fprintf(out, "%8s  ", "PID");
        put_name(out, "NAME", w);
        fprintf(out, "  %-6s", "STATE");
        put_cols_header(out);
        fputc('\n', out);
        line++;
        shown = o->max_rows && o->max_rows < v->n_procs ? o->max_rows : v->n_procs;
        for (size_t i = 0; i < shown; i++) {
            const struct top_row *r = &v->procs[i];

            fprintf(out, "%8" PRId32 "  ", r->pid);
            put_name(out, r->process_name ? r->process_name : "", w);
            fprintf(out, "  %-6s", r->exited ? "exited" : "live");
            put_stats(out, r, v->rated && !isnan(r->cpu_per_s));
            fputc('\n', out);
            line++;
        }
        if (shown < v->n_procs) {
            fprintf(out, "(%zu more processes)\n", v->n_procs - shown);
            line++;
        }
        if (o->keys_help)
            fprintf(out, "\nq quit  Esc/Backspace back to the groups\n");
        return -1;
    }

    w = name_column(v->groups, v->n_groups, false, o->name_width, 5);
    put_name(out, "GROUP", w);
    put_cols_header(out);
    fprintf(out, " %9s\n", "PROCS");
    line++;
    if (!v->n_groups) {
        fprintf(out, "(no group measured yet: programs time groups with fleetprof_group_get "
                     "and FLEETPROF_GROUP)\n");
        line++;
    }
    shown = o->max_rows && o->max_rows < v->n_groups ? o->max_rows : v->n_groups;
    /* The rows shown follow the selected one down the table. */
    first = o->selected >= 0 && (size_t)o->selected >= shown ? (size_t)o->selected - shown + 1 : 0;
    if (first + shown > v->n_groups)
        first = v->n_groups - shown;
    for (size_t i = first; i < first + shown; i++) {
        const struct top_row *r = &v->groups[i];
        char procs[32];

        if ((long)i == o->selected)
            selected_line = line;
        put_name(out, row_name(r), w);
        put_stats(out, r, v->rated);
        (void)snprintf(procs, sizeof(procs), "%" PRIu32 "/%" PRIu32, r->live_processes,
                       r->processes);
        fprintf(out, " %9s\n", procs);
        line++;
    }
    if (shown < v->n_groups)
        fprintf(out, "(%zu more groups)\n", v->n_groups - shown);
    if (o->keys_help)
        fprintf(out, "\nq quit  Up/Down select  Enter per-process view  g top group\n");
    return selected_line;
}

/* ---- JSON -------------------------------------------------------------------------------- */

static void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;

        if (ch == '"' || ch == '\\')
            fprintf(out, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(out, "\\u%04x", ch);
        else
            fputc(ch, out);
    }
    fputc('"', out);
}

static void json_number(FILE *out, const char *key, double v)
{
    if (isnan(v) || isinf(v))
        fprintf(out, ",\"%s\":null", key);
    else
        fprintf(out, ",\"%s\":%.6g", key, v);
}

static void json_totals(FILE *out, const struct top_totals *t)
{
    fprintf(out,
            "\"cpu_ns\":%" PRIu64 ",\"cycles\":%" PRIu64 ",\"activations\":%" PRIu64
            ",\"events\":%" PRIu64 ",\"worst_event_ns\":%" PRIu64 ",\"slow_events\":%" PRIu64
            ",\"discarded\":%" PRIu64 ",\"migrated\":%" PRIu64 ",\"stale\":%" PRIu64
            ",\"durations\":[",
            t->cpu_ns, t->cycles, t->activations, t->events, t->worst_event_ns, t->slow_events,
            t->discarded, t->migrated, t->stale);
    for (unsigned b = 0; b < TOP_BUCKETS; b++)
        fprintf(out, "%s%" PRIu64, b ? "," : "", t->durations[b]);
    fputc(']', out);
}

static void json_row(FILE *out, const struct top_row *r, bool rated)
{
    json_totals(out, r->totals);
    fprintf(out, ",\"p50_ns\":%" PRIu64 ",\"p99_ns\":%" PRIu64, r->p50_ns, r->p99_ns);
    json_number(out, "cumulative_share_pct", r->cumulative_share_pct);
    json_number(out, "cpu_per_s", rated ? r->cpu_per_s : NAN);
    json_number(out, "share_pct", rated ? r->share_pct : NAN);
    if (rated)
        fprintf(out,
                ",\"interval_cpu_ns\":%" PRIu64 ",\"interval_events\":%" PRIu64
                ",\"interval_slow_events\":%" PRIu64,
                r->interval_cpu_ns, r->interval_events, r->interval_slow_events);
}

void top_write_json(FILE *out, const struct top_view *v)
{
    fprintf(out, "{\"time_ns\":%" PRIu64 ",\"rated\":%s,\"interval_ns\":%" PRIu64, v->time_ns,
            v->rated ? "true" : "false", v->interval_ns);
    if (v->rated)
        fprintf(out, ",\"rates_from_ns\":%" PRIu64 ",\"rates_to_ns\":%" PRIu64, v->from_ns,
                v->to_ns);
    fprintf(out, ",\"fleet_cpu_ns\":%" PRIu64, v->fleet_cpu_ns);
    json_number(out, "fleet_cpu_per_s", v->fleet_cpu_per_s);
    fprintf(out, ",\"processes\":%" PRIu32 ",\"groups\":[", v->processes);
    for (size_t i = 0; i < v->n_groups; i++) {
        const struct top_row *r = &v->groups[i];

        fprintf(out, "%s{\"name\":", i ? "," : "");
        json_string(out, row_name(r));
        fprintf(out, ",\"processes\":%" PRIu32 ",\"live_processes\":%" PRIu32 ",", r->processes,
                r->live_processes);
        json_row(out, r, v->rated);
        fputc('}', out);
    }
    fputc(']', out);
    if (v->group) {
        fprintf(out, ",\"group\":");
        json_string(out, v->group);
        fprintf(out, ",\"group_found\":%s,\"per_process\":[", v->group_found ? "true" : "false");
        for (size_t i = 0; i < v->n_procs; i++) {
            const struct top_row *r = &v->procs[i];

            fprintf(out, "%s{\"pid\":%" PRId32 ",\"name\":", i ? "," : "", r->pid);
            json_string(out, r->process_name);
            fprintf(out, ",\"exited\":%s,", r->exited ? "true" : "false");
            json_row(out, r, !isnan(r->cpu_per_s));
            fputc('}', out);
        }
        fputc(']', out);
    }
    fputs("}\n", out);
}
