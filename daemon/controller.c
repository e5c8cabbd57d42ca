/* daemon/controller.c - see controller.h.
 *
 * Each owner keeps its released chunks in a deque, oldest first (done times strictly
 * increase per owner, which validation enforces). The globally oldest chunk is the
 * smallest (front done_ns, owner) over owners: a linear scan, cheap for hundreds of
 * owners and only needed when evicting.
 */
#include "daemon/controller.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct owner {
    int32_t id;
    uint64_t unreleased;
    uint64_t released;
    struct ctl_chunk *chunks; /* deque: chunks[head .. head + count) */
    size_t head, count, cap;
    uint64_t newest_done_ns;  /* every new chunk must be newer */
    uint64_t oldest_floor_ns; /* last oldest_done_ns reported; never decreases */
    uint64_t last_update_ns;
    uint64_t evicted;
};

struct ctl {
    uint64_t limit;
    struct owner *owners;
    size_t owner_count, owner_cap;
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
    for (size_t i = 0; i < c->owner_count; i++)
        free(c->owners[i].chunks);
    free(c->owners);
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

static struct owner *find_owner(struct ctl *c, int32_t id)
{
    for (size_t i = 0; i < c->owner_count; i++)
        if (c->owners[i].id == id)
            return &c->owners[i];
    return NULL;
}

static struct owner *get_owner(struct ctl *c, int32_t id)
{
    struct owner *o = find_owner(c, id);

    if (o)
        return o;
    if (c->owner_count == c->owner_cap) {
        size_t cap = c->owner_cap ? c->owner_cap * 2 : 16;
        struct owner *grown = realloc(c->owners, cap * sizeof(*grown));

        if (!grown)
            return NULL;
        c->owners = grown;
        c->owner_cap = cap;
    }
    o = &c->owners[c->owner_count++];
    memset(o, 0, sizeof(*o));
    o->id = id;
    return o;
}

static const struct ctl_chunk *front(const struct owner *o)
{
    return o->count ? &o->chunks[o->head] : NULL;
}

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
        if (o->count == o->cap) {
            size_t cap = o->cap ? o->cap * 2 : 16;
            struct ctl_chunk *grown = realloc(o->chunks, cap * sizeof(*grown));

            if (!grown)
                return -ENOMEM;
            o->chunks = grown;
            o->cap = cap;
        }
    }
    o->chunks[o->head + o->count++] = *chunk;
    o->released += chunk->bytes;
    c->released_total += chunk->bytes;
    c->released_chunks++;
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
        struct owner *oldest = NULL;
        const struct ctl_chunk *f;

        for (size_t i = 0; i < c->owner_count; i++) {
            const struct ctl_chunk *cf = front(&c->owners[i]);

            if (!cf)
                continue;
            if (!oldest || cf->done_ns < front(oldest)->done_ns ||
                (cf->done_ns == front(oldest)->done_ns && c->owners[i].id < oldest->id))
                oldest = &c->owners[i];
        }
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
        oldest->evicted++;
        c->evicted_total++;
        log_event(c, oldest->id, -1, now_ns);
    }
}

static void forget_owner(struct ctl *c, struct owner *o)
{
    size_t index = (size_t)(o - c->owners);

    c->unreleased_total -= o->unreleased;
    c->released_total -= o->released;
    c->released_chunks -= o->count;
    free(o->chunks);
    c->owners[index] = c->owners[--c->owner_count];
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
    while (front(o) && front(o)->done_ns < o->oldest_floor_ns)
        pop_front(c, o);
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
    while (o && front(o) && front(o)->done_ns <= done_ns)
        pop_front(c, o);
}

uint64_t ctl_oldest_child_done_ns(const struct ctl *c)
{
    uint64_t oldest = 0;

    for (size_t i = 0; i < c->owner_count; i++) {
        const struct ctl_chunk *f = front(&c->owners[i]);

        if (c->owners[i].id != CTL_OWNER_DAEMON && f && (!oldest || f->done_ns < oldest))
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
        fill_status(&c->owners[i], &out[i]);
    return c->owner_count;
}

bool ctl_get_owner(const struct ctl *c, int32_t owner, struct ctl_owner_status *ret)
{
    for (size_t i = 0; i < c->owner_count; i++) {
        if (c->owners[i].id == owner) {
            fill_status(&c->owners[i], ret);
            return true;
        }
    }
    return false;
}

const struct ctl_log_entry *ctl_log(const struct ctl *c, size_t *ret_count, uint64_t *ret_dropped)
{
    *ret_count = c->log_count;
    *ret_dropped = c->log_dropped;
    return c->log;
}
