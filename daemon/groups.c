/* daemon/groups.c - the fleet's performance groups (see groups.h).
 *
 * Names are interned once in a hash map (a group id per name); each process keeps one slot
 * per group it reported, found through its own map of group ids.
 * A message is checked in a first pass that changes nothing a report could see, then
 * applied in a second pass that cannot fail, so a refused message leaves no trace.
 */
#include "daemon/groups.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "common/hash.h"
#include "common/map.h"
#include "profile/groups.h"

struct fg_group {
    char *name; /* owned, NUL-terminated */
    size_t len;
    struct prof_group_totals sum; /* over every process, exited ones included */
    uint32_t processes;           /* processes that reported the group */
    uint32_t live;                /* of those, not gone */
    uint64_t stamp;               /* message serial that last named it (duplicates) */
};

/* Settled totals: every process reports its cumulative totals when they changed, at most
 * every quarter of a second, so the latest ones move in steps at each process's own times
 * and a rate over a short interval of the daemon's clock is 0 or several times the truth.
 * A report also gives the totals at the settled time: the latest time up to which every
 * process's totals are known (its last report, or a time it was quiet up to), each
 * interpolated between the two of its own reports around it. Their differences over the
 * settled times' are right over any interval, as processes come and go. */
#define FG_POINTS   4 /* of each process's latest reports, kept to interpolate between */
/* A process reports within a quarter of a second of a change (its sampler's tick, every
 * 20 ms or 100 ms when idle, asks; its IPC thread sends): one quiet for longer than this,
 * with room for a loaded machine, had nothing to report. */
#define FG_QUIET_NS (1000ull * 1000 * 1000)

struct fg_point {
    uint64_t t_ns; /* the process's CLOCK_MONOTONIC when it read these */
    uint64_t cpu_ns, events, slow_events;
};

/* The latest points, oldest first. */
struct fg_points {
    struct fg_point v[FG_POINTS];
    uint32_t n;
};

struct fg_slot {
    uint32_t gid;
    struct prof_group_totals t; /* the process's latest totals; t.name unused */
    struct fg_points pts;
};

struct fleet_groups_proc {
    int32_t pid;
    uint64_t start_ns; /* Hello.start_ns: with pid, the process's identity */
    char name[64];
    bool live;
    bool reported;          /* sent a GroupStats that was accepted */
    bool final;             /* that one was its last */
    uint64_t cpu_reported;  /* process_cpu_ns of its latest GroupStats */
    uint64_t slow_event_ns; /* its latest GroupStats' threshold */
    uint64_t cpu_seen;      /* from cpu_fn, for a process that never reported */
    uint64_t known_ns;      /* its totals are known up to this time: its latest GroupStats',
                             * a settled time since, or when it joined */
    uint64_t left_ns;       /* when it left (exited list) */
    struct fg_points cpu;   /* its process CPU time: reported, or cpu_fn's */
    struct fg_slot *slots;  /* owned, n_slots used of cap_slots */
    uint32_t n_slots;
    size_t cap_slots;
    struct fleetprof_map index;            /* slot by group id (fleetprof_map_mix64) */
    struct fleet_groups_proc *prev, *next; /* in the live or the exited list */
};

struct fg_list {
    struct fleet_groups_proc *head, *tail;
    size_t count;
};

/* Pass one's verdict on one group of a message. */
struct fg_plan {
    uint32_t gid;  /* existing id, or UINT32_MAX for a name to intern */
    uint32_t slot; /* the process's slot, or UINT32_MAX for a new one */
};

struct fleet_groups {
    struct fg_group **groups; /* owned, by id; n_groups used of cap_groups */
    uint32_t n_groups, measured;
    size_t cap_groups;
    struct fleetprof_map by_name; /* group id by name (hash_name, same_name) */
    struct fg_list live, exited;
    uint64_t exited_cpu_ns; /* CPU of exited processes whose row was let go */
    uint64_t serial;
    struct fg_plan *plan; /* owned scratch, plan_cap entries: reused across messages */
    size_t plan_cap;
    struct fleet_groups_stats stats;
    char why[FLEET_GROUPS_WHY_BYTES];
    fleet_groups_clock_fn clock;
    void *clock_userdata;
    uint64_t settled_ns; /* of the latest report: reports never settle earlier */
};

/* A name looked up in fleet_groups.by_name. */
struct fg_name {
    const char *s;
    size_t len;
};

static uint64_t hash_name(const char *s, size_t len)
{
    return fleetprof_fnv1a64(s, len, FLEETPROF_FNV64_SEED);
}

static bool same_name(const void *ctx, const void *key, uint64_t gid)
{
    const struct fg_group *g = ((const struct fleet_groups *)ctx)->groups[gid];
    const struct fg_name *n = key;

    return g->len == n->len && memcmp(g->name, n->s, n->len) == 0;
}

static void list_append(struct fg_list *l, struct fleet_groups_proc *p)
{
    p->next = NULL;
    p->prev = l->tail;
    if (l->tail)
        l->tail->next = p;
    else
        l->head = p;
    l->tail = p;
    l->count++;
}

static void list_remove(struct fg_list *l, struct fleet_groups_proc *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        l->head = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        l->tail = p->prev;
    p->prev = p->next = NULL;
    l->count--;
}

static void proc_free(struct fleet_groups_proc *p)
{
    free(p->slots);
    fleetprof_map_free(&p->index);
    free(p);
}

int fleet_groups_new(struct fleet_groups **ret)
{
    struct fleet_groups *fg = calloc(1, sizeof(*fg));

    if (!fg)
        return -ENOMEM;
    *ret = fg;
    return 0;
}

void fleet_groups_set_clock(struct fleet_groups *fg, fleet_groups_clock_fn clock, void *userdata)
{
    fg->clock = clock;
    fg->clock_userdata = userdata;
}

/* The caller's clock; 0 without one (every time is then the same instant). */
static uint64_t now_of(const struct fleet_groups *fg)
{
    return fg->clock ? fg->clock(fg->clock_userdata) : 0;
}

/* ---- points ----------------------------------------------------------------------------- */

static void points_add(struct fg_points *pts, const struct fg_point *pt)
{
    if (pts->n == FG_POINTS) {
        memmove(pts->v, pts->v + 1, (FG_POINTS - 1) * sizeof(pts->v[0]));
        pts->n--;
    }
    pts->v[pts->n++] = *pt;
}

static uint64_t points_last_ns(const struct fg_points *pts)
{
    return pts->n ? pts->v[pts->n - 1].t_ns : 0;
}

/* From a towards b by num/den (num < den). Totals only grow; a process CPU time read from
 * /proc, then reported, may not: held at a. */
static uint64_t between(uint64_t a, uint64_t b, uint64_t num, uint64_t den)
{
    return b > a ? a + (uint64_t)((double)(b - a) * ((double)num / (double)den)) : a;
}

/* The totals at t: the latest before it, moved along the line to the next one. Before the
 * first point, the first (older ones are gone: a process reporting faster than settling). */
static struct fg_point points_at(const struct fg_points *pts, uint64_t t)
{
    struct fg_point r = {.t_ns = t};
    uint32_t i;

    if (pts->n == 0)
        return r;
    if (t >= pts->v[pts->n - 1].t_ns)
        return pts->v[pts->n - 1];
    if (t <= pts->v[0].t_ns)
        return pts->v[0];
    for (i = 1; pts->v[i].t_ns <= t; i++)
        ;
    {
        const struct fg_point *a = &pts->v[i - 1], *b = &pts->v[i];
        uint64_t num = t - a->t_ns, den = b->t_ns - a->t_ns;

        r.cpu_ns = between(a->cpu_ns, b->cpu_ns, num, den);
        r.events = between(a->events, b->events, num, den);
        r.slow_events = between(a->slow_events, b->slow_events, num, den);
    }
    return r;
}

struct fleet_groups *fleet_groups_free(struct fleet_groups *fg)
{
    struct fleet_groups_proc *p, *next;

    if (!fg)
        return NULL;
    for (p = fg->live.head; p; p = next) {
        next = p->next;
        proc_free(p);
    }
    for (p = fg->exited.head; p; p = next) {
        next = p->next;
        proc_free(p);
    }
    for (uint32_t i = 0; i < fg->n_groups; i++) {
        free(fg->groups[i]->name);
        free(fg->groups[i]);
    }
    free(fg->groups);
    fleetprof_map_free(&fg->by_name);
    free(fg->plan);
    free(fg);
    return NULL;
}

/* ---- names ------------------------------------------------------------------------------ */

static uint32_t find_group(const struct fleet_groups *fg, const char *name, size_t len,
                           uint64_t hash)
{
    struct fg_name key = {name, len};
    uint64_t gid;

    if (!fleetprof_map_find(&fg->by_name, hash, same_name, fg, &key, &gid))
        return UINT32_MAX;
    return (uint32_t)gid;
}

/* Interns a name (validated by the caller, not yet interned). Returns its id, or UINT32_MAX
 * when out of memory or the fleet has FLEET_GROUPS_MAX names. */
static uint32_t intern_group(struct fleet_groups *fg, const char *name, size_t len, uint64_t hash)
{
    struct fg_name key = {name, len};
    struct fg_group *g;

    if (fg->n_groups >= FLEET_GROUPS_MAX)
        return UINT32_MAX;
    /* Room first, so that adding the name below cannot fail once the group is made. */
    if (fleetprof_map_reserve(&fg->by_name, 1) < 0 ||
        FLEETPROF_GROW(fg->groups, fg->cap_groups, fg->n_groups + 1) < 0)
        return UINT32_MAX;
    g = calloc(1, sizeof(*g));
    if (!g)
        return UINT32_MAX;
    g->name = malloc(len + 1);
    if (!g->name) {
        free(g);
        return UINT32_MAX;
    }
    memcpy(g->name, name, len);
    g->name[len] = '\0';
    g->len = len;
    g->sum.name = g->name;
    fg->groups[fg->n_groups] = g;
    (void)fleetprof_map_set(&fg->by_name, hash, same_name, fg, &key, fg->n_groups); /* reserved */
    return fg->n_groups++;
}

/* ---- processes -------------------------------------------------------------------------- */

static uint32_t find_slot(const struct fleet_groups_proc *p, uint32_t gid)
{
    uint64_t slot;

    if (!fleetprof_map_find(&p->index, fleetprof_map_mix64(gid), NULL, NULL, NULL, &slot))
        return UINT32_MAX;
    return (uint32_t)slot;
}

/* Room for extra more slots, in the slot array and its index: pass two cannot fail. */
static int reserve_slots(struct fleet_groups_proc *p, uint32_t extra)
{
    if (FLEETPROF_GROW(p->slots, p->cap_slots, (size_t)p->n_slots + extra) < 0 ||
        fleetprof_map_reserve(&p->index, extra) < 0)
        return -ENOMEM;
    return 0;
}

/* Exited processes looked at for a reconnection: it follows its disconnection closely. */
#define REJOIN_WINDOW 64

struct fleet_groups_proc *fleet_groups_join(struct fleet_groups *fg, int32_t pid, uint64_t start_ns,
                                            const char *name)
{
    struct fleet_groups_proc *p = fg->exited.tail;

    for (int i = 0; start_ns && p && i < REJOIN_WINDOW; i++, p = p->prev) {
        if (p->pid != pid || p->start_ns != start_ns || p->final)
            continue;
        /* The same process on a new connection (it gave up its old one). */
        list_remove(&fg->exited, p);
        list_append(&fg->live, p);
        p->live = true;
        fg->stats.live++;
        for (uint32_t s = 0; s < p->n_slots; s++)
            fg->groups[p->slots[s].gid]->live++;
        return p;
    }
    p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->pid = pid;
    p->start_ns = start_ns;
    (void)snprintf(p->name, sizeof(p->name), "%s", name ? name : "?");
    p->live = true;
    p->known_ns = now_of(fg);
    points_add(&p->cpu, &(struct fg_point){.t_ns = p->known_ns});
    list_append(&fg->live, p);
    fg->stats.processes++;
    fg->stats.live++;
    return p;
}

void fleet_groups_leave(struct fleet_groups *fg, struct fleet_groups_proc *p)
{
    if (!p || !p->live)
        return;
    list_remove(&fg->live, p);
    p->live = false;
    p->left_ns = now_of(fg);
    fg->stats.live--;
    for (uint32_t s = 0; s < p->n_slots; s++)
        fg->groups[p->slots[s].gid]->live--;
    if (!p->reported) {
        /* Nothing to break down: only its CPU time stays. */
        fg->exited_cpu_ns += p->cpu_seen;
        proc_free(p);
        return;
    }
    /* Kept for reports, up to FLEET_GROUPS_EXITED_KEPT of them: no room to grow into. */
    if (FLEETPROF_RESIZE(p->slots, p->n_slots) == 0)
        p->cap_slots = p->n_slots;
    list_append(&fg->exited, p);
    if (fg->exited.count > FLEET_GROUPS_EXITED_KEPT) {
        struct fleet_groups_proc *old = fg->exited.head;

        list_remove(&fg->exited, old);
        fg->exited_cpu_ns += old->cpu_reported; /* its group totals stay in the sums */
        proc_free(old);
    }
}

/* ---- GroupStats ------------------------------------------------------------------------- */

static int refuse(struct fleet_groups *fg, const char **ret_why, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static int refuse(struct fleet_groups *fg, const char **ret_why, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(fg->why, sizeof(fg->why), fmt, ap);
    va_end(ap);
    fg->stats.refused++;
    if (ret_why)
        *ret_why = fg->why;
    return -EBADMSG;
}

static void from_wire(const Fleetprof__GroupTotals *w, struct prof_group_totals *t)
{
    t->cpu_ns = w->cpu_ns;
    t->cycles = w->cycles;
    t->activations = w->activations;
    t->events = w->events;
    t->worst_event_ns = w->worst_event_ns;
    t->slow_events = w->slow_events;
    t->discarded = w->discarded;
    t->migrated = w->migrated;
    t->stale = w->stale;
    memcpy(t->durations, w->durations, sizeof(t->durations));
}

/* The first counter of now that is below before's, or NULL. */
static const char *went_back(const struct prof_group_totals *before,
                             const struct prof_group_totals *now)
{
    static const char *const names[] = {"cpu_ns",    "cycles",         "activations",
                                        "events",    "worst_event_ns", "slow_events",
                                        "discarded", "migrated",       "stale"};
    const uint64_t b[] = {before->cpu_ns,    before->cycles,         before->activations,
                          before->events,    before->worst_event_ns, before->slow_events,
                          before->discarded, before->migrated,       before->stale};
    const uint64_t n[] = {now->cpu_ns,    now->cycles,         now->activations,
                          now->events,    now->worst_event_ns, now->slow_events,
                          now->discarded, now->migrated,       now->stale};

    for (size_t i = 0; i < sizeof(b) / sizeof(b[0]); i++)
        if (n[i] < b[i])
            return names[i];
    for (unsigned k = 0; k < PROF_GROUP_BUCKETS; k++)
        if (now->durations[k] < before->durations[k])
            return "durations";
    return NULL;
}

/* sum += now - before, counter by counter (now >= before: checked); worst is a maximum. */
static void add_increase(struct prof_group_totals *sum, const struct prof_group_totals *before,
                         const struct prof_group_totals *now)
{
    sum->cpu_ns += now->cpu_ns - before->cpu_ns;
    sum->cycles += now->cycles - before->cycles;
    sum->activations += now->activations - before->activations;
    sum->events += now->events - before->events;
    if (now->worst_event_ns > sum->worst_event_ns)
        sum->worst_event_ns = now->worst_event_ns;
    sum->slow_events += now->slow_events - before->slow_events;
    sum->discarded += now->discarded - before->discarded;
    sum->migrated += now->migrated - before->migrated;
    sum->stale += now->stale - before->stale;
    for (unsigned k = 0; k < PROF_GROUP_BUCKETS; k++)
        sum->durations[k] += now->durations[k] - before->durations[k];
}

int fleet_groups_apply(struct fleet_groups *fg, struct fleet_groups_proc *p,
                       const Fleetprof__GroupStats *m, const char **ret_why)
{
    uint32_t new_slots = 0;
    uint64_t serial, now, t, zero_ns;

    if (!p)
        return refuse(fg, ret_why, "the daemon had no memory for this process's groups");
    if (p->final)
        return refuse(fg, ret_why, "group stats after the final ones");
    if (m->n_groups > FLEET_GROUPS_PER_PROCESS_MAX)
        return refuse(fg, ret_why, "%zu groups, more than the %d a process may have", m->n_groups,
                      FLEET_GROUPS_PER_PROCESS_MAX);
    if (m->process_cpu_ns < p->cpu_reported)
        return refuse(fg, ret_why, "process CPU time went backwards (%llu ns, was %llu ns)",
                      (unsigned long long)m->process_cpu_ns, (unsigned long long)p->cpu_reported);
    if (FLEETPROF_GROW(fg->plan, fg->plan_cap, m->n_groups) < 0)
        return -ENOMEM;

    /* Pass one: judge every group; only interning a new name happens here, and a name
     * nobody reported is invisible in reports. */
    serial = ++fg->serial;
    for (size_t i = 0; i < m->n_groups; i++) {
        const Fleetprof__GroupTotals *w = m->groups[i];
        size_t len = strnlen(w->name, PROF_GROUP_NAME_MAX + 1);
        uint64_t hash;
        uint32_t gid, slot = UINT32_MAX;

        if (!prof_group_name_valid(w->name, len))
            return refuse(fg, ret_why,
                          "group %zu: name is not 1..%d bytes of UTF-8 without control "
                          "characters",
                          i, PROF_GROUP_NAME_MAX);
        if (w->n_durations != PROF_GROUP_BUCKETS)
            return refuse(fg, ret_why, "group '%s': %zu histogram buckets, expected %d", w->name,
                          w->n_durations, PROF_GROUP_BUCKETS);
        hash = hash_name(w->name, len);
        gid = find_group(fg, w->name, len, hash);
        if (gid != UINT32_MAX) {
            if (fg->groups[gid]->stamp == serial)
                return refuse(fg, ret_why, "group '%s' twice in one message", w->name);
            slot = find_slot(p, gid);
        } else {
            gid = intern_group(fg, w->name, len, hash);
            if (gid == UINT32_MAX)
                return fg->n_groups >= FLEET_GROUPS_MAX
                               ? refuse(fg, ret_why, "the fleet has %d group names already",
                                        FLEET_GROUPS_MAX)
                               : -ENOMEM;
        }
        fg->groups[gid]->stamp = serial;
        if (slot != UINT32_MAX) {
            struct prof_group_totals next;
            const char *field;

            from_wire(w, &next);
            field = went_back(&p->slots[slot].t, &next);
            if (field)
                return refuse(fg, ret_why, "group '%s': %s went backwards (cumulative totals)",
                              w->name, field);
        } else {
            new_slots++;
        }
        fg->plan[i] = (struct fg_plan){gid, slot};
    }
    if (p->n_slots + new_slots > FLEET_GROUPS_PER_PROCESS_MAX)
        return refuse(fg, ret_why, "more than %d groups in all", FLEET_GROUPS_PER_PROCESS_MAX);
    if (new_slots && reserve_slots(p, new_slots) < 0)
        return -ENOMEM;

    /* Pass two: cannot fail. The totals' time: the process's own, kept between its previous
     * report and now (not said, or a clock of its own: a time namespace's). */
    now = now_of(fg);
    t = m->time_ns && m->time_ns <= now ? m->time_ns : now;
    if (t < p->known_ns) /* a report late for a time settled without it */
        t = p->known_ns;
    if (t < points_last_ns(&p->cpu))
        t = points_last_ns(&p->cpu);
    zero_ns = p->known_ns; /* a group it reports first was at 0 as far as reports said */
    for (size_t i = 0; i < m->n_groups; i++) {
        struct fg_group *g = fg->groups[fg->plan[i].gid];
        struct fg_slot *s;
        struct prof_group_totals totals;

        if (fg->plan[i].slot == UINT32_MAX) {
            s = &p->slots[p->n_slots];
            memset(s, 0, sizeof(*s));
            s->gid = fg->plan[i].gid;
            (void)fleetprof_map_set(&p->index, fleetprof_map_mix64(s->gid), NULL, NULL, NULL,
                                    p->n_slots); /* reserved */
            p->n_slots++;
            if (g->processes++ == 0)
                fg->measured++;
            g->live++;
            points_add(&s->pts, &(struct fg_point){.t_ns = zero_ns});
        } else {
            s = &p->slots[fg->plan[i].slot];
        }
        from_wire(m->groups[i], &totals);
        add_increase(&g->sum, &s->t, &totals);
        s->t = totals;
        points_add(&s->pts,
                   &(struct fg_point){t, totals.cpu_ns, totals.events, totals.slow_events});
    }
    points_add(&p->cpu, &(struct fg_point){.t_ns = t, .cpu_ns = m->process_cpu_ns});
    p->known_ns = t;
    p->cpu_reported = m->process_cpu_ns;
    p->slow_event_ns = m->slow_event_ns;
    p->reported = true;
    p->final = m->final;
    fg->stats.accepted++;
    return 0;
}

/* ---- reports ---------------------------------------------------------------------------- */

static void to_wire(const struct prof_group_totals *t, const char *name, Fleetprof__GroupTotals *w)
{
    fleetprof__group_totals__init(w);
    w->name = (char *)name;
    w->cpu_ns = t->cpu_ns;
    w->cycles = t->cycles;
    w->activations = t->activations;
    w->events = t->events;
    w->worst_event_ns = t->worst_event_ns;
    w->slow_events = t->slow_events;
    w->discarded = t->discarded;
    w->migrated = t->migrated;
    w->stale = t->stale;
    w->n_durations = PROF_GROUP_BUCKETS;
    w->durations = (uint64_t *)t->durations;
}

static int by_cpu_desc(const void *a, const void *b)
{
    const Fleetprof__FleetGroup *x = *(Fleetprof__FleetGroup *const *)a;
    const Fleetprof__FleetGroup *y = *(Fleetprof__FleetGroup *const *)b;

    if (x->totals->cpu_ns != y->totals->cpu_ns)
        return x->totals->cpu_ns < y->totals->cpu_ns ? 1 : -1;
    return strcmp(x->totals->name, y->totals->name);
}

static void settled_to_wire(struct fg_point pt, Fleetprof__SettledTotals *w)
{
    fleetprof__settled_totals__init(w);
    w->cpu_ns = pt.cpu_ns;
    w->events = pt.events;
    w->slow_events = pt.slow_events;
}

/* A process's never-reported CPU time read for a report becomes a point this often at most:
 * the points then cover the settling delay. */
#define FG_READ_SPACING_NS (200ull * 1000 * 1000)

static void points_hold(struct fg_points *pts, uint64_t t)
{
    if (pts->n && points_last_ns(pts) < t) {
        struct fg_point pt = pts->v[pts->n - 1];

        pt.t_ns = t;
        points_add(pts, &pt);
    }
}

/* The settled time: every live process has reported up to it, or was quiet since. Never
 * earlier than the previous report's. A quiet process's totals are held at it: a report
 * that comes later moves them from there, never before (a settled total never changes). */
static uint64_t settle(struct fleet_groups *fg, uint64_t now)
{
    uint64_t t = now, quiet = now > FG_QUIET_NS ? now - FG_QUIET_NS : 0;

    for (const struct fleet_groups_proc *p = fg->live.head; p; p = p->next) {
        uint64_t known = p->known_ns > quiet ? p->known_ns : quiet;

        if (known < t)
            t = known;
    }
    if (t < fg->settled_ns)
        t = fg->settled_ns;
    fg->settled_ns = t;
    for (struct fleet_groups_proc *p = fg->live.head; p; p = p->next) {
        if (p->known_ns >= t)
            continue;
        p->known_ns = t;
        points_hold(&p->cpu, t);
        for (uint32_t i = 0; i < p->n_slots; i++)
            points_hold(&p->slots[i].pts, t);
    }
    return t;
}

/* What p's latest totals hold beyond the settled time t, added to *cpu and, by group id, to
 * later[]. */
static void add_unsettled(const struct fleet_groups_proc *p, uint64_t t, uint64_t *cpu,
                          struct fg_point *later)
{
    uint64_t latest = p->reported ? p->cpu_reported : p->cpu_seen;
    struct fg_point at = points_at(&p->cpu, t);

    if (latest > at.cpu_ns)
        *cpu += latest - at.cpu_ns;
    for (uint32_t i = 0; i < p->n_slots; i++) {
        const struct fg_slot *s = &p->slots[i];
        struct fg_point a = points_at(&s->pts, t);
        struct fg_point *l = &later[s->gid];

        l->cpu_ns += s->t.cpu_ns > a.cpu_ns ? s->t.cpu_ns - a.cpu_ns : 0;
        l->events += s->t.events > a.events ? s->t.events - a.events : 0;
        l->slow_events += s->t.slow_events > a.slow_events ? s->t.slow_events - a.slow_events : 0;
    }
}

static uint64_t minus(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

/* Rows of group gid by process, live ones first, into the report's breakdown. */
static int add_breakdown(struct fleet_groups *fg, uint32_t gid, Fleetprof__FleetGroup *out,
                         struct fleet_groups_report *r)
{
    const struct fg_group *g = fg->groups[gid];
    const struct fg_list *lists[] = {&fg->live, &fg->exited};
    size_t n = 0;

    if (g->processes == 0)
        return 0;
    r->procs = calloc(g->processes, sizeof(*r->procs));
    r->proc_ptrs = calloc(g->processes, sizeof(*r->proc_ptrs));
    r->proc_totals = calloc(g->processes, sizeof(*r->proc_totals));
    r->proc_settled = calloc(g->processes, sizeof(*r->proc_settled));
    if (!r->procs || !r->proc_ptrs || !r->proc_totals || !r->proc_settled)
        return -ENOMEM;
    for (size_t l = 0; l < 2; l++) {
        for (const struct fleet_groups_proc *p = lists[l]->head; p && n < g->processes;
             p = p->next) {
            uint32_t s = find_slot(p, gid);
            Fleetprof__GroupProcess *gp = &r->procs[n];

            if (s == UINT32_MAX)
                continue;
            fleetprof__group_process__init(gp);
            gp->pid = p->pid;
            gp->name = (char *)p->name;
            gp->exited = !p->live;
            to_wire(&p->slots[s].t, g->name, &r->proc_totals[n]);
            gp->totals = &r->proc_totals[n];
            settled_to_wire(points_at(&p->slots[s].pts, r->msg.settled_ns), &r->proc_settled[n]);
            gp->settled = &r->proc_settled[n];
            r->proc_ptrs[n++] = gp;
        }
    }
    out->n_per_process = n;
    out->per_process = r->proc_ptrs;
    return 0;
}

int fleet_groups_report(struct fleet_groups *fg, const char *per_process_group,
                        fleet_groups_cpu_fn cpu_fn, void *cpu_userdata,
                        struct fleet_groups_report *ret)
{
    struct fleet_groups_report r;
    uint32_t want = UINT32_MAX;
    uint64_t cpu = fg->exited_cpu_ns, unsettled_cpu = 0, now = now_of(fg);
    struct fg_point *later = NULL;
    size_t n = 0;

    memset(&r, 0, sizeof(r));
    fleetprof__groups_report__init(&r.msg);
    if (fg->measured) {
        r.groups = calloc(fg->measured, sizeof(*r.groups));
        r.group_ptrs = calloc(fg->measured, sizeof(*r.group_ptrs));
        r.totals = calloc(fg->measured, sizeof(*r.totals));
        r.settled = calloc(fg->measured, sizeof(*r.settled));
        later = calloc(fg->n_groups, sizeof(*later));
        if (!r.groups || !r.group_ptrs || !r.totals || !r.settled || !later)
            goto err;
    }
    /* The CPU of live processes that never reported, read now. */
    for (struct fleet_groups_proc *p = fg->live.head; cpu_fn && p; p = p->next) {
        uint64_t seen;

        if (p->reported)
            continue;
        seen = cpu_fn(p->pid, cpu_userdata);
        if (seen > p->cpu_seen)
            p->cpu_seen = seen;
        if (now >= points_last_ns(&p->cpu) + FG_READ_SPACING_NS)
            points_add(&p->cpu, &(struct fg_point){.t_ns = now, .cpu_ns = p->cpu_seen});
    }
    r.msg.settled_ns = settle(fg, now);
    for (const struct fleet_groups_proc *p = fg->live.head; later && p; p = p->next)
        add_unsettled(p, r.msg.settled_ns, &unsettled_cpu, later);
    /* Exited ones in the order they left: only those that left after it can hold more. */
    for (const struct fleet_groups_proc *p = fg->exited.tail; p && p->left_ns > r.msg.settled_ns;
         p = p->prev)
        add_unsettled(p, r.msg.settled_ns, &unsettled_cpu, later);
    if (per_process_group && *per_process_group) {
        size_t len = strlen(per_process_group);

        want = find_group(fg, per_process_group, len, hash_name(per_process_group, len));
    }
    for (uint32_t i = 0; i < fg->n_groups; i++) {
        const struct fg_group *g = fg->groups[i];
        Fleetprof__FleetGroup *out;

        if (g->processes == 0)
            continue; /* interned by a refused message */
        out = &r.groups[n];
        fleetprof__fleet_group__init(out);
        to_wire(&g->sum, g->name, &r.totals[n]);
        out->totals = &r.totals[n];
        settled_to_wire(
                (struct fg_point){.cpu_ns = minus(g->sum.cpu_ns, later[i].cpu_ns),
                                  .events = minus(g->sum.events, later[i].events),
                                  .slow_events = minus(g->sum.slow_events, later[i].slow_events)},
                &r.settled[n]);
        out->settled = &r.settled[n];
        out->processes = g->processes;
        out->live_processes = g->live;
        if (i == want && add_breakdown(fg, i, out, &r) < 0)
            goto err;
        r.group_ptrs[n++] = out;
    }
    if (n > 1) /* qsort's array may not be NULL, even empty */
        qsort(r.group_ptrs, n, sizeof(*r.group_ptrs), by_cpu_desc);
    for (const struct fleet_groups_proc *p = fg->live.head; p; p = p->next)
        cpu += p->reported ? p->cpu_reported : p->cpu_seen;
    for (const struct fleet_groups_proc *p = fg->exited.head; p; p = p->next)
        cpu += p->cpu_reported;
    r.msg.fleet_cpu_ns = cpu;
    r.msg.settled_fleet_cpu_ns = minus(cpu, unsettled_cpu);
    free(later);
    r.msg.processes = (uint32_t)fg->stats.processes;
    r.msg.n_groups = n;
    r.msg.groups = r.group_ptrs;
    *ret = r;
    return 0;

err:
    free(later);
    fleet_groups_report_done(&r);
    return -ENOMEM;
}

void fleet_groups_report_done(struct fleet_groups_report *r)
{
    free(r->groups);
    free(r->group_ptrs);
    free(r->totals);
    free(r->settled);
    free(r->procs);
    free(r->proc_ptrs);
    free(r->proc_totals);
    free(r->proc_settled);
    memset(r, 0, sizeof(*r));
}

int fleet_groups_proc_totals(const struct fleet_groups *fg, const struct fleet_groups_proc *p,
                             struct prof_group_totals **ret, uint64_t *ret_slow_event_ns)
{
    struct prof_group_totals *t;

    *ret = NULL;
    *ret_slow_event_ns = p ? p->slow_event_ns : 0;
    if (!p || !p->n_slots)
        return 0;
    t = calloc(p->n_slots, sizeof(*t));
    if (!t)
        return -ENOMEM;
    for (uint32_t i = 0; i < p->n_slots; i++) {
        t[i] = p->slots[i].t;
        t[i].name = strdup(fg->groups[p->slots[i].gid]->name);
        if (!t[i].name) {
            fleet_groups_totals_free(t, i);
            return -ENOMEM;
        }
    }
    *ret = t;
    return (int)p->n_slots;
}

void fleet_groups_totals_free(struct prof_group_totals *totals, size_t count)
{
    for (size_t i = 0; totals && i < count; i++)
        free((char *)totals[i].name);
    free(totals);
}

void fleet_groups_get_stats(const struct fleet_groups *fg, struct fleet_groups_stats *ret)
{
    *ret = fg->stats;
    ret->groups = fg->measured;
}
