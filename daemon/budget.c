/* daemon/budget.c - the global limit's side of the daemon: the controller's actions (destroy
 * requests to the chunks' owners, evictions in their regions' header pages) and the exit
 * profiles the daemon keeps, which count against the limit as daemon-owned released chunks:
 * the controller evicts the oldest when the fleet needs room.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/map.h"
#include "daemon/controller.h"
#include "daemon/core.h"
#include "daemon/daemon-internal.h"

/* Exit profiles */

static uint64_t exit_pid_hash(int32_t pid)
{
    return fleetprof_map_mix64((uint32_t)pid);
}

static struct exit_profile *exit_newest_of(const struct daemon *d, int32_t pid)
{
    uint64_t v;

    return fleetprof_map_find(&d->exit_by_pid, exit_pid_hash(pid), NULL, NULL, NULL, &v)
                   ? (struct exit_profile *)(uintptr_t)v
                   : NULL;
}

void daemon__exit_index_add(struct daemon *d, struct exit_profile *e)
{
    e->older_same_pid = exit_newest_of(d, e->pid);
    if (fleetprof_map_set(&d->exit_by_pid, exit_pid_hash(e->pid), NULL, NULL, NULL, (uintptr_t)e) <
        0)
        d->exit_by_pid_lost = true; /* lookups walk the list from now on */
}

void daemon__exit_index_remove(struct daemon *d, struct exit_profile *e)
{
    struct exit_profile *p = exit_newest_of(d, e->pid);

    if (p == e) {
        if (e->older_same_pid)
            (void)fleetprof_map_set(&d->exit_by_pid, exit_pid_hash(e->pid), NULL, NULL, NULL,
                                    (uintptr_t)e->older_same_pid); /* the slot exists */
        else
            (void)fleetprof_map_remove(&d->exit_by_pid, exit_pid_hash(e->pid), NULL, NULL, NULL);
    } else {
        while (p && p->older_same_pid != e)
            p = p->older_same_pid;
        if (p)
            p->older_same_pid = e->older_same_pid;
    }
    e->older_same_pid = NULL;
    if (!d->exit_profiles && d->exit_by_pid_lost) {
        /* Empty again: the index is whole again. */
        fleetprof_map_free(&d->exit_by_pid);
        d->exit_by_pid_lost = false;
    }
}

const struct exit_profile *daemon__exit_profile_of(const struct daemon *d, int32_t pid)
{
    if (d->exit_by_pid_lost) {
        const struct exit_profile *newest = NULL;

        for (const struct exit_profile *e = d->exit_profiles; e; e = e->next)
            if (e->pid == pid)
                newest = e;
        return newest;
    }
    return exit_newest_of(d, pid);
}

bool daemon__exit_profile_reported(const struct daemon *d, int32_t pid)
{
    if (d->exit_by_pid_lost) {
        for (const struct exit_profile *e = d->exit_profiles; e; e = e->next)
            if (e->pid == pid && !e->before_exec)
                return true;
        return false;
    }
    for (const struct exit_profile *e = exit_newest_of(d, pid); e; e = e->older_same_pid)
        if (!e->before_exec)
            return true;
    return false;
}

void daemon__exit_profiles_evict(struct daemon *d, uint64_t done_ns, const char *why)
{
    while (d->exit_profiles && d->exit_profiles->receipt_ns <= done_ns) {
        struct exit_profile *e = d->exit_profiles;

        d->exit_profiles = e->next;
        if (!d->exit_profiles)
            d->exit_profiles_last = NULL;
        daemon__exit_index_remove(d, e);
        daemon__log(d, DAEMON_LOG_INFO, "exit profile of child %d (%s, %zu bytes) %s", (int)e->pid,
                    e->name, e->len, why);
        /* Said in the running capture's log, else in the next one's: a process is never
         * dropped unsaid. */
        if (!d->exit_profile_dropped || !d->exit_profile_dropped(d, e, why)) {
            struct departure *dep = daemon__departure_push(d, e->pid, e->name);

            if (dep)
                dep->dropped = why;
        }
        d->stats.exit_profiles--;
        d->stats.exit_profile_bytes -= e->len;
        ctl_remove_owned(d->ctl, e->receipt_ns);
        free(e->json);
        free(e);
    }
}

/* The controller's actions: destroy requests to the chunks' owners, and evictions of exit
 * profiles (the daemon's own chunks). */
static void send_destroys(struct daemon *d, const struct ctl_actions *a)
{
    for (size_t i = 0; i < a->destroy_count; i++) {
        if (a->destroy[i].owner == CTL_OWNER_DAEMON) {
            daemon__exit_profiles_evict(d, a->destroy[i].done_ns,
                                        "evicted by the global memory limit");
            continue;
        }
        Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
        Fleetprof__DestroyReleasedChunksAtOrBefore msg =
                FLEETPROF__DESTROY_RELEASED_CHUNKS_AT_OR_BEFORE__INIT;
        struct conn *owner;

        owner = daemon__child_by_pid(d, a->destroy[i].owner);
        if (!owner)
            continue; /* gone: its chunks already left the controller */
        if (daemon__region_evict(owner, a->destroy[i].done_ns))
            continue;
        msg.id = ++d->next_id;
        msg.done_ns = a->destroy[i].done_ns;
        env.msg_case = FLEETPROF__ENVELOPE__MSG_DESTROY_RELEASED_CHUNKS_AT_OR_BEFORE;
        env.destroy_released_chunks_at_or_before = &msg;
        if (daemon__send(owner, &env) == 0) {
            owner->destroy_requests++;
            d->stats.destroy_requests++;
        }
    }
}

void daemon__apply_actions(struct daemon *d, struct ctl_actions *a)
{
    for (;;) {
        send_destroys(d, a);
        if (!a->more)
            break;
        ctl_evict(d->ctl, daemon__now_ns(), a);
    }
}

bool daemon__update_apply(struct conn *c, const struct ctl_update *u)
{
    struct daemon *d = c->d;
    struct ctl_actions a;
    const char *why = NULL;
    int r = ctl_update(d->ctl, c->pid, u, daemon__now_ns(), &a, &why);

    if (r < 0) {
        daemon__drop(c, r == -EBADMSG ? why : strerror(-r));
        return false;
    }
    d->stats.updates++;
    daemon__apply_actions(d, &a);
    return true;
}

void daemon__exit_profiles_free(struct daemon *d)
{
    while (d->exit_profiles) {
        struct exit_profile *e = d->exit_profiles;

        d->exit_profiles = e->next;
        free(e->json);
        free(e);
    }
    d->exit_profiles_last = NULL;
    fleetprof_map_free(&d->exit_by_pid);
    d->exit_by_pid_lost = false;
}

void daemon__exit_profile_add(struct daemon *d, struct conn *c, char *json, size_t len,
                              const char *built, bool before_exec)
{
    struct exit_profile *e;
    struct ctl_actions a;
    uint64_t now = daemon__now_ns();

    if (len == 0 || json[0] != '{') {
        daemon__log(d, DAEMON_LOG_WARNING, "exit profile of child %d is not a JSON object",
                    (int)c->pid);
        free(json);
        return;
    }
    e = calloc(1, sizeof(*e));
    if (!e) {
        free(json);
        return;
    }
    e->pid = c->pid;
    e->before_exec = before_exec;
    (void)snprintf(e->name, sizeof(e->name), "%s", c->name);
    /* Receipt times name daemon-owned chunks: strictly increasing, so the list stays in
     * receipt order by appending (a storm of short-lived children must not walk it). */
    if (d->exit_profiles_last && d->exit_profiles_last->receipt_ns >= now)
        now = d->exit_profiles_last->receipt_ns + 1;
    e->receipt_ns = now;
    e->json = json;
    e->len = len;
    (void)snprintf(e->built, sizeof(e->built), "%s", built ? built : "");
    if (d->exit_profiles_last)
        d->exit_profiles_last->next = e;
    else
        d->exit_profiles = e;
    d->exit_profiles_last = e;
    daemon__exit_index_add(d, e);
    d->stats.exit_profiles++;
    d->stats.exit_profile_bytes += len;
    daemon__log(d, DAEMON_LOG_INFO, "kept the exit profile of child %d (%s, %zu bytes)",
                (int)c->pid, c->name, len);
    if (ctl_add_owned(d->ctl, e->receipt_ns, len, now, &a) == 0)
        daemon__apply_actions(d, &a);
}
