/* daemon/controller.c - see controller.h.
 *
 * Each owner keeps its released chunks in a deque, oldest first (done times strictly
 * increase per owner, which validation enforces). Owners are found by id in a hash map
 * (common/map.h), and the owners that hold released chunks sit in a binary min-heap keyed by
 * (front done_ns, owner): an update and each eviction cost O(log owners), not a scan of the
 * fleet (a thousand children made the scan the largest user-space cost per update).
 */
#include "daemon/controller.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "common/map.h"

struct owner {
    int32_t id;
    size_t index;    /* position in ctl.owners */
    size_t heap_pos; /* position in ctl.heap, NOT_IN_HEAP when it holds no chunk */
    uint64_t unreleased;
    uint64_t released;
    struct ctl_chunk *chunks; /* deque: chunks[head .. head + count) */
    size_t head, count, cap;
    uint64_t newest_done_ns;  /* every new chunk must be newer */
    uint64_t oldest_floor_ns; /* last oldest_done_ns reported; never decreases */
    uint64_t last_update_ns;
    uint64_t evicted;
};

#define NOT_IN_HEAP SIZE_MAX

struct ctl {
    uint64_t limit;
    struct owner **owners; /* owned, each allocated alone (its address is its identity) */
    size_t owner_count, owner_cap;
    struct fleetprof_map by_id; /* owners by id (id_hash): struct owner *, borrowed */
    struct owner **heap;        /* owners with released chunks, by (front done_ns, id) */
    size_t heap_count;
    uint64_t unreleased_total;
    uint64_t released_total;
    uint64_t released_chunks;
    uint64_t evicted_total;
    uint64_t rejected;
    struct ctl_log_entry *log;
    size_t log_count;
    uint64_t log_dropped;
};

int ctl_new(uint64_t global_limit_bytes, struct ctl **ret_ctl)
{
    struct ctl *c;

    if (global_limit_bytes == 0)
        return -EINVAL;
    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->log = malloc(CTL_LOG_MAX * sizeof(*c->log));
    if (!c->log) {
        free(c);
        return -ENOMEM;
    }
    c->limit = global_limit_bytes;
    *ret_ctl = c;
    return 0;
}

struct ctl *ctl_free(struct ctl *c)
{
    if (!c)
        return NULL;
    for (size_t i = 0; i < c->owner_count; i++) {
        free(c->owners[i]->chunks);
        free(c->owners[i]);
    }
    free(c->owners);
    fleetprof_map_free(&c->by_id);
    free(c->heap);
    free(c->log);
    free(c);
    return NULL;
}

static void log_event(struct ctl *c, int32_t owner, int8_t delta, uint64_t now_ns)
{
    if (c->log_count == CTL_LOG_MAX) {
        /* Keep the newest half: a long session's log stays bounded and recent. */
        size_t keep = CTL_LOG_MAX / 2;

        memmove(c->log, c->log + (CTL_LOG_MAX - keep), keep * sizeof(*c->log));
        c->log_dropped += CTL_LOG_MAX - keep;
        c->log_count = keep;
    }
    c->log[c->log_count++] = (struct ctl_log_entry){owner, delta, now_ns};
}

static uint64_t id_hash(int32_t id)
{
    return fleetprof_map_mix64((uint32_t)id);
}

static struct owner *find_owner(const struct ctl *c, int32_t id)
{
    uint64_t v;

    if (!fleetprof_map_find(&c->by_id, id_hash(id), NULL, NULL, NULL, &v))
        return NULL;
    return (struct owner *)(uintptr_t)v;
}

static struct owner *get_owner(struct ctl *c, int32_t id)
{
    struct owner *o = find_owner(c, id);

    if (o)
        return o;
    /* The heap has room for every owner (heap_update relies on it): it shares the capacity. */
    if (c->owner_count == c->owner_cap) {
        size_t cap = fleetprof_grown_capacity(c->owner_cap, c->owner_count + 1, sizeof(*c->owners));

        if (!cap || FLEETPROF_RESIZE(c->owners, cap) < 0 || FLEETPROF_RESIZE(c->heap, cap) < 0)
            return NULL;
        c->owner_cap = cap;
    }
    o = calloc(1, sizeof(*o));
    if (!o || fleetprof_map_set(&c->by_id, id_hash(id), NULL, NULL, NULL, (uintptr_t)o) < 0) {
        free(o);
        return NULL;
    }
    o->id = id;
    o->heap_pos = NOT_IN_HEAP;
    o->index = c->owner_count;
    c->owners[c->owner_count++] = o;
    return o;
}

static const struct ctl_chunk *front(const struct owner *o)
{
    return o->count ? &o->chunks[o->head] : NULL;
}

/* ---- the heap of owners by their oldest released chunk ---------------------------------- */

/* a's oldest chunk goes before b's: older, or as old and a smaller owner id. */
static bool heap_before(const struct owner *a, const struct owner *b)
{
    const struct ctl_chunk *fa = front(a), *fb = front(b);

    return fa->done_ns < fb->done_ns || (fa->done_ns == fb->done_ns && a->id < b->id);
}

static void heap_set(struct ctl *c, size_t pos, struct owner *o)
{
    c->heap[pos] = o;
    o->heap_pos = pos;
}

static void heap_up(struct ctl *c, size_t pos)
{
    struct owner *o = c->heap[pos];

    while (pos > 0) {
        size_t parent = (pos - 1) / 2;

        if (!heap_before(o, c->heap[parent]))
            break;
        heap_set(c, pos, c->heap[parent]);
        pos = parent;
    }
    heap_set(c, pos, o);
}

static void heap_down(struct ctl *c, size_t pos)
{
    struct owner *o = c->heap[pos];

    for (;;) {
        size_t child = 2 * pos + 1;

        if (child >= c->heap_count)
            break;
        if (child + 1 < c->heap_count && heap_before(c->heap[child + 1], c->heap[child]))
            child++;
        if (!heap_before(c->heap[child], o))
            break;
        heap_set(c, pos, c->heap[child]);
        pos = child;
    }
    heap_set(c, pos, o);
}

static void heap_remove(struct ctl *c, struct owner *o)
{
    size_t pos = o->heap_pos;
    struct owner *last;

    if (pos == NOT_IN_HEAP)
        return;
    o->heap_pos = NOT_IN_HEAP;
    last = c->heap[--c->heap_count];
    if (last == o)
        return;
    heap_set(c, pos, last);
    heap_up(c, pos);
    heap_down(c, last->heap_pos);
}

/* The owner's front chunk changed (or it has none now): its place in the heap follows. */
static void heap_update(struct ctl *c, struct owner *o)
{
    if (!o->count) {
        heap_remove(c, o);
        return;
    }
    if (o->heap_pos == NOT_IN_HEAP) {
        heap_set(c, c->heap_count++, o); /* the heap has room for every owner */
        heap_up(c, o->heap_pos);
        return;
    }
    heap_up(c, o->heap_pos);
    heap_down(c, o->heap_pos);
}

/* Takes the owner's oldest chunk off its deque; the caller updates the heap. */
static void pop_front(struct ctl *c, struct owner *o)
{
    const struct ctl_chunk *f = front(o);

    o->released -= f->bytes;
    c->released_total -= f->bytes;
    c->released_chunks--;
    o->head++;
    o->count--;
    if (o->count == 0)
        o->head = 0;
}

static int push_back(struct ctl *c, struct owner *o, const struct ctl_chunk *chunk)
{
    if (o->head + o->count == o->cap) {
        if (o->head > 0) {
            memmove(o->chunks, o->chunks + o->head, o->count * sizeof(*o->chunks));
            o->head = 0;
        }
        if (FLEETPROF_GROW(o->chunks, o->cap, o->count + 1) < 0)
            return -ENOMEM;
    }
    o->chunks[o->head + o->count++] = *chunk;
    o->released += chunk->bytes;
    c->released_total += chunk->bytes;
    c->released_chunks++;
    if (o->count == 1)
        heap_update(c, o); /* its first chunk: it joins the heap */
    return 0;
}

static void add_action(struct ctl_actions *a, int32_t owner, uint64_t done_ns)
{
    for (size_t i = 0; i < a->destroy_count; i++) {
        if (a->destroy[i].owner == owner) {
            if (done_ns > a->destroy[i].done_ns)
                a->destroy[i].done_ns = done_ns;
            return;
        }
    }
    a->destroy[a->destroy_count++] = (struct ctl_destroy){owner, done_ns};
}

void ctl_evict(struct ctl *c, uint64_t now_ns, struct ctl_actions *a)
{
    a->destroy_count = 0;
    a->more = false;
    while (c->unreleased_total + c->released_total > c->limit && c->released_chunks > 0) {
        struct owner *oldest = c->heap[0]; /* every released chunk is in an owner of the heap */
        const struct ctl_chunk *f;

        /* Room for a new owner's request, or the chunk's owner already has one. */
        if (a->destroy_count == sizeof(a->destroy) / sizeof(a->destroy[0])) {
            bool listed = false;

            for (size_t i = 0; i < a->destroy_count; i++)
                listed |= a->destroy[i].owner == oldest->id;
            if (!listed) {
                a->more = true;
                return;
            }
        }
        f = front(oldest);
        add_action(a, oldest->id, f->done_ns);
        pop_front(c, oldest);
        heap_update(c, oldest);
        oldest->evicted++;
        c->evicted_total++;
        log_event(c, oldest->id, -1, now_ns);
    }
}

static void forget_owner(struct ctl *c, struct owner *o)
{
    c->unreleased_total -= o->unreleased;
    c->released_total -= o->released;
    c->released_chunks -= o->count;
    heap_remove(c, o);
    (void)fleetprof_map_remove(&c->by_id, id_hash(o->id), NULL, NULL, NULL);
    c->owners[o->index] = c->owners[--c->owner_count];
    c->owners[o->index]->index = o->index;
    free(o->chunks);
    free(o);
}

void ctl_remove(struct ctl *c, int32_t owner, uint64_t now_ns)
{
    struct owner *o = find_owner(c, owner);

    (void)now_ns;
    if (o)
        forget_owner(c, o);
}

static int validate(const struct ctl *c, const struct owner *o, const struct ctl_update *u,
                    uint64_t now_ns, const char **ret_reason)
{
    uint64_t prev;

    (void)c;
    if (u->unreleased_bytes > CTL_MAX_BYTES || u->released_bytes > CTL_MAX_BYTES) {
        *ret_reason = "byte counts beyond any real buffer";
        return -EBADMSG;
    }
    if (u->newly_released_count > CTL_MAX_NEW_PER_UPDATE ||
        (u->newly_released_count && !u->newly_released)) {
        *ret_reason = "too many newly released chunks in one update";
        return -EBADMSG;
    }
    if (u->oldest_done_ns > now_ns + CTL_FUTURE_SLACK_NS) {
        *ret_reason = "oldest done time is in the future";
        return -EBADMSG;
    }
    if (o && u->oldest_done_ns && u->oldest_done_ns < o->oldest_floor_ns) {
        *ret_reason = "oldest done time went backwards";
        return -EBADMSG;
    }
    prev = o ? o->newest_done_ns : 0;
    for (size_t i = 0; i < u->newly_released_count; i++) {
        const struct ctl_chunk *k = &u->newly_released[i];

        if (k->bytes == 0 || k->bytes > CTL_MAX_BYTES) {
            *ret_reason = "a released chunk with an impossible size";
            return -EBADMSG;
        }
        if (k->done_ns == 0 || k->done_ns <= prev) {
            *ret_reason = "released chunks not in increasing done time";
            return -EBADMSG;
        }
        if (k->done_ns > now_ns + CTL_FUTURE_SLACK_NS) {
            *ret_reason = "a chunk done in the future";
            return -EBADMSG;
        }
        prev = k->done_ns;
    }
    return 0;
}

int ctl_update(struct ctl *c, int32_t owner, const struct ctl_update *u, uint64_t now_ns,
               struct ctl_actions *ret_actions, const char **ret_reason)
{
    struct owner *o;
    const char *reason = NULL;
    int r;

    ret_actions->destroy_count = 0;
    ret_actions->more = false;
    if (owner <= 0) {
        *ret_reason = "not a process id";
        c->rejected++;
        return -EBADMSG;
    }
    if (u->final) {
        ctl_remove(c, owner, now_ns);
        return 0;
    }
    o = find_owner(c, owner);
    r = validate(c, o, u, now_ns, &reason);
    if (r < 0) {
        *ret_reason = reason;
        c->rejected++;
        return r;
    }
    o = get_owner(c, owner);
    if (!o)
        return -ENOMEM;

    c->unreleased_total = c->unreleased_total - o->unreleased + u->unreleased_bytes;
    o->unreleased = u->unreleased_bytes;
    if (u->oldest_done_ns)
        o->oldest_floor_ns = u->oldest_done_ns;
    for (size_t i = 0; i < u->newly_released_count; i++) {
        r = push_back(c, o, &u->newly_released[i]);
        if (r < 0)
            return r;
        o->newest_done_ns = u->newly_released[i].done_ns;
        log_event(c, owner, +1, now_ns);
    }
    /* The owner destroyed everything older than its oldest (its own limit, or our earlier
     * requests): drop those here too. */
    if (front(o) && front(o)->done_ns < o->oldest_floor_ns) {
        while (front(o) && front(o)->done_ns < o->oldest_floor_ns)
            pop_front(c, o);
        heap_update(c, o);
    }
    if (u->newly_released_count == 0)
        log_event(c, owner, 0, now_ns);
    o->last_update_ns = now_ns;
    ctl_evict(c, now_ns, ret_actions);
    return 0;
}

int ctl_add_owned(struct ctl *c, uint64_t done_ns, uint64_t bytes, uint64_t now_ns,
                  struct ctl_actions *ret_actions)
{
    struct owner *o = get_owner(c, CTL_OWNER_DAEMON);
    struct ctl_chunk chunk = {done_ns, bytes};
    int r;

    ret_actions->destroy_count = 0;
    ret_actions->more = false;
    if (!o)
        return -ENOMEM;
    if (done_ns <= o->newest_done_ns || bytes == 0)
        return -EINVAL;
    r = push_back(c, o, &chunk);
    if (r < 0)
        return r;
    o->newest_done_ns = done_ns;
    o->last_update_ns = now_ns;
    log_event(c, CTL_OWNER_DAEMON, +1, now_ns);
    ctl_evict(c, now_ns, ret_actions);
    return 0;
}

void ctl_remove_owned(struct ctl *c, uint64_t done_ns)
{
    struct owner *o = find_owner(c, CTL_OWNER_DAEMON);

    /* Exit profiles are consumed oldest first, or all at once. */
    if (!o || !front(o) || front(o)->done_ns > done_ns)
        return;
    while (front(o) && front(o)->done_ns <= done_ns)
        pop_front(c, o);
    heap_update(c, o);
}

uint64_t ctl_oldest_child_done_ns(const struct ctl *c)
{
    uint64_t oldest = 0;

    for (size_t i = 0; i < c->owner_count; i++) {
        const struct ctl_chunk *f = front(c->owners[i]);

        if (c->owners[i]->id != CTL_OWNER_DAEMON && f && (!oldest || f->done_ns < oldest))
            oldest = f->done_ns;
    }
    return oldest;
}

void ctl_get_totals(const struct ctl *c, struct ctl_totals *ret)
{
    ret->global_limit = c->limit;
    ret->unreleased_bytes = c->unreleased_total;
    ret->released_bytes = c->released_total;
    ret->released_chunks = c->released_chunks;
    ret->owners = c->owner_count;
    ret->evicted_chunks = c->evicted_total;
    ret->rejected_updates = c->rejected;
}

static void fill_status(const struct owner *o, struct ctl_owner_status *s)
{
    s->owner = o->id;
    s->unreleased_bytes = o->unreleased;
    s->released_bytes = o->released;
    s->released_chunks = o->count;
    s->last_update_ns = o->last_update_ns;
    s->evicted_chunks = o->evicted;
}

size_t ctl_get_owners(const struct ctl *c, struct ctl_owner_status *out, size_t max)
{
    for (size_t i = 0; i < c->owner_count && i < max; i++)
        fill_status(c->owners[i], &out[i]);
    return c->owner_count;
}

bool ctl_get_owner(const struct ctl *c, int32_t owner, struct ctl_owner_status *ret)
{
    const struct owner *o = find_owner(c, owner);

    if (!o)
        return false;
    fill_status(o, ret);
    return true;
}

const struct ctl_log_entry *ctl_log(const struct ctl *c, size_t *ret_count, uint64_t *ret_dropped)
{
    *ret_count = c->log_count;
    *ret_dropped = c->log_dropped;
    return c->log;
}
