/* Unit tests for daemon/budget.c: the exit profiles the daemon keeps (in receipt order, each
 * a daemon-owned chunk of the controller, evicted at or before a time and then named in a
 * capture's log or as a departure), and the controller's actions carried out (a destroy to an
 * owner that reads its evictions in its region goes there, otherwise as a message; a
 * contradictory update drops its child). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/region.h"
#include "daemon-fixture.h"
#include "testlib.h"

#define KIB 1024u

/* A JSON object of exactly len bytes (len >= 2), malloc'd: the store takes it. */
static char *json_of(size_t len)
{
    char *s = malloc(len + 1);

    assert_non_null(s);
    memset(s, ' ', len);
    s[0] = '{';
    s[len - 1] = '}';
    s[len] = '\0';
    return s;
}

static size_t kept(const struct daemon *d)
{
    size_t n = 0;

    for (const struct exit_profile *e = d->exit_profiles; e; e = e->next)
        n++;
    return n;
}

/* The daemon's own released bytes in the controller: its kept exit profiles. */
static uint64_t owned_bytes(const struct daemon *d)
{
    struct ctl_owner_status s;

    if (!ctl_get_owner(d->ctl, CTL_OWNER_DAEMON, &s))
        return 0;
    return s.released_bytes;
}

/* Distinct pids among the kept exit profiles. */
static size_t count_pids(const struct daemon *d)
{
    size_t n = 0;

    for (const struct exit_profile *e = d->exit_profiles; e; e = e->next) {
        const struct exit_profile *o = d->exit_profiles;

        while (o != e && o->pid != e->pid)
            o = o->next;
        n += o == e;
    }
    return n;
}

/* What every user of the store relies on: oldest first, receipts strictly increasing, the
 * last pointer right, the stats and the controller agreeing with the list. */
static void check_store(const struct daemon *d)
{
    const struct exit_profile *prev = NULL, *e;
    uint64_t bytes = 0, n = 0;

    for (e = d->exit_profiles; e; prev = e, e = e->next) {
        if (prev)
            assert_true(e->receipt_ns > prev->receipt_ns);
        bytes += e->len;
        n++;
    }
    assert_ptr_equal(d->exit_profiles_last, prev);
    /* The index by pid holds the list, no more: each profile is in its pid's chain, and
     * "reported" is whether the list has one of that pid that did not end by exec. */
    for (e = d->exit_profiles; e; e = e->next) {
        const struct exit_profile *k = daemon__exit_profile_of(d, e->pid);
        bool reported = false;
        size_t chain = 0, same = 0;

        for (const struct exit_profile *o = d->exit_profiles; o; o = o->next)
            if (o->pid == e->pid) {
                same++;
                reported = reported || !o->before_exec;
            }
        assert_non_null(k);
        for (; k; k = k->older_same_pid, chain++)
            assert_int_equal(k->pid, e->pid);
        assert_int_equal(chain, same);
        assert_int_equal(daemon__exit_profile_reported(d, e->pid), reported);
    }
    assert_int_equal(d->exit_by_pid.count, 0 + (size_t)count_pids(d));
    assert_int_equal(d->stats.exit_profiles, n);
    assert_int_equal(d->stats.exit_profile_bytes, bytes);
    assert_int_equal(owned_bytes(d), bytes);
}

static void test_exit_profiles_are_kept_in_receipt_order(void **state)
{
    enum { N = 300 };
    struct fx f;
    struct conn *c;
    const struct exit_profile *e;
    uint64_t before, after;
    int i = 0;

    (void)state;
    fx_setup(&f, NULL);
    c = fx_child(&f, 800, "short");
    before = daemon__now_ns();
    /* Quicker than the clock can tell apart: receipts still strictly increase. */
    for (int k = 0; k < N; k++) {
        c->pid = 800 + k;
        daemon__exit_profile_add(f.d, c, json_of(10 + (size_t)k), 10 + (size_t)k,
                                 k % 3 ? NULL : "built from its region", k % 5 == 0);
    }
    after = daemon__now_ns();
    check_store(f.d);
    assert_int_equal(kept(f.d), N);
    for (e = f.d->exit_profiles; e; e = e->next, i++) {
        assert_int_equal(e->pid, 800 + i);
        assert_string_equal(e->name, "short");
        assert_int_equal(e->len, 10 + (size_t)i);
        assert_int_equal(e->json[0], '{');
        assert_string_equal(e->built, i % 3 ? "" : "built from its region");
        assert_int_equal(e->before_exec, i % 5 == 0);
        assert_true(e->receipt_ns >= before);
    }
    assert_true(f.d->exit_profiles_last->receipt_ns < after + N);
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_INFO,
                                  "kept the exit profile of child 800 (short, 10 bytes)"),
                     1);
    c->pid = 800;
    fx_teardown(&f);
}

static void test_an_exit_profile_that_is_not_an_object_is_refused(void **state)
{
    struct fx f;
    struct conn *c;
    char *array = strdup("[1,2]"), *empty = strdup("");

    (void)state;
    assert_non_null(array);
    assert_non_null(empty);
    fx_setup(&f, NULL);
    c = fx_child(&f, 900, "liar");
    daemon__exit_profile_add(f.d, c, array, 5, NULL, false);
    daemon__exit_profile_add(f.d, c, empty, 0, NULL, false);
    assert_null(f.d->exit_profiles);
    check_store(f.d);
    assert_int_equal(f.d->stats.exit_profiles, 0);
    assert_int_equal(
            fx_logged_at(&f, DAEMON_LOG_WARNING, "exit profile of child 900 is not a JSON object"),
            2);
    /* The store goes on as before. */
    daemon__exit_profile_add(f.d, c, json_of(2), 2, NULL, false);
    assert_int_equal(kept(f.d), 1);
    check_store(f.d);
    fx_teardown(&f);
}

/* Eviction at or before a time: the oldest first, exactly those received by then, each said
 * in the log and, with no capture running (the daemon's hook is gather.c's), kept as a
 * departure with why. */
static void test_eviction_at_or_before_a_time(void **state)
{
    uint64_t receipt[5];
    struct fx f;
    struct conn *c;
    const struct exit_profile *e;
    int i = 0;

    (void)state;
    fx_setup(&f, NULL);
    assert_non_null(f.d->exit_profile_dropped); /* daemon_new's: a capture names it */
    c = fx_child(&f, 1000, "ev");
    for (int k = 0; k < 5; k++) {
        c->pid = 1000 + k;
        daemon__exit_profile_add(f.d, c, json_of(100), 100, NULL, false);
    }
    for (e = f.d->exit_profiles; e; e = e->next)
        receipt[i++] = e->receipt_ns;

    daemon__exit_profiles_evict(f.d, receipt[0] - 1, "expired"); /* none that old */
    assert_int_equal(kept(f.d), 5);
    daemon__exit_profiles_evict(f.d, receipt[1], "expired");
    assert_int_equal(kept(f.d), 3);
    assert_int_equal(f.d->exit_profiles->pid, 1002);
    check_store(f.d);
    assert_int_equal(f.d->departure_count, 2);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(f.d->departures[k].pid, 1000 + k);
        assert_string_equal(f.d->departures[k].name, "ev");
        assert_string_equal(f.d->departures[k].dropped, "expired");
        assert_null(f.d->departures[k].never);
    }
    assert_int_equal(
            fx_logged_at(&f, DAEMON_LOG_INFO, "exit profile of child 1001 (ev, 100 bytes) expired"),
            1);
    daemon__exit_profiles_evict(f.d, receipt[1], "expired"); /* nothing more */
    assert_int_equal(kept(f.d), 3);
    assert_int_equal(f.d->departure_count, 2);

    /* Between two receipts: the older only. */
    daemon__exit_profiles_evict(f.d, receipt[3] - 1, "evicted");
    assert_int_equal(kept(f.d), 2);
    assert_int_equal(f.d->exit_profiles->pid, 1003);
    check_store(f.d);

    /* All of them: the store is empty, and appends again from nothing. */
    daemon__exit_profiles_evict(f.d, UINT64_MAX, "evicted");
    assert_null(f.d->exit_profiles);
    assert_null(f.d->exit_profiles_last);
    check_store(f.d);
    assert_int_equal(f.d->departure_count, 5);
    c->pid = 1009;
    daemon__exit_profile_add(f.d, c, json_of(7), 7, NULL, false);
    assert_ptr_equal(f.d->exit_profiles, f.d->exit_profiles_last);
    assert_int_equal(f.d->exit_profiles->pid, 1009);
    assert_true(f.d->exit_profiles->receipt_ns > receipt[4]);
    check_store(f.d);
    c->pid = 1000;
    fx_teardown(&f);
}

/* A capture that names the dropped profile in its own log takes it: no departure. Without a
 * hook at all, a departure. */
struct named {
    int calls;
    int32_t pid;
    size_t len;
    const char *why;
};
static struct named named;

static bool capture_names_it(struct daemon *d, const struct exit_profile *e, const char *why)
{
    (void)d;
    named.calls++;
    named.pid = e->pid;
    named.len = e->len;
    named.why = why;
    return true;
}

static void test_an_evicted_profile_is_named_once(void **state)
{
    struct fx f;
    struct conn *c;

    (void)state;
    fx_setup(&f, NULL);
    c = fx_child(&f, 1100, "named");
    daemon__exit_profile_add(f.d, c, json_of(64), 64, NULL, false);
    c->pid = 1101;
    daemon__exit_profile_add(f.d, c, json_of(65), 65, NULL, false);

    named = (struct named){0};
    f.d->exit_profile_dropped = capture_names_it;
    daemon__exit_profiles_evict(f.d, f.d->exit_profiles->receipt_ns, "evicted");
    assert_int_equal(named.calls, 1);
    assert_int_equal(named.pid, 1100);
    assert_int_equal(named.len, 64);
    assert_string_equal(named.why, "evicted");
    assert_int_equal(f.d->departure_count, 0);

    f.d->exit_profile_dropped = NULL;
    daemon__exit_profiles_evict(f.d, UINT64_MAX, "expired");
    assert_int_equal(named.calls, 1);
    assert_int_equal(f.d->departure_count, 1);
    assert_int_equal(f.d->departures[0].pid, 1101);
    assert_string_equal(f.d->departures[0].dropped, "expired");
    check_store(f.d);
    c->pid = 1100;
    fx_teardown(&f);
}

/* Random adds and evictions keep the store, its stats and the controller in agreement. */
static void test_the_store_stays_consistent(void **state)
{
    struct test_rng rng;
    struct fx f;
    struct conn *c;
    size_t departures = 0;

    (void)state;
    test_rng_init(&rng, test_seed());
    fx_setup(&f, NULL);
    c = fx_child(&f, 1200, "rnd");
    for (int step = 0; step < 2000; step++) {
        if (test_rng_range(&rng, 0, 3) != 0 || !f.d->exit_profiles) {
            size_t len = (size_t)test_rng_range(&rng, 2, 5000);

            /* A few pids, each with images that ended by exec and by exit. */
            c->pid = 1200 + (int32_t)test_rng_range(&rng, 0, 7);
            daemon__exit_profile_add(f.d, c, json_of(len), len, NULL,
                                     test_rng_range(&rng, 0, 2) == 0);
        } else {
            /* At or before a receipt in the list, or just before one. */
            size_t pick = (size_t)test_rng_range(&rng, 0, kept(f.d) - 1), n = 0;
            const struct exit_profile *e = f.d->exit_profiles;
            uint64_t t;

            while (n < pick) {
                e = e->next;
                n++;
            }
            t = e->receipt_ns - test_rng_range(&rng, 0, 1);
            departures += pick + (t == e->receipt_ns); /* e is freed when it goes */
            daemon__exit_profiles_evict(f.d, t, "expired");
            assert_true(!f.d->exit_profiles || f.d->exit_profiles->receipt_ns > t);
        }
        check_store(f.d);
    }
    assert_int_equal(f.d->departure_count + f.d->departures_dropped, departures);
    c->pid = 1200; /* as the fixture made it */
    fx_teardown(&f);
}

/* The global limit counts kept exit profiles: past it, the oldest go ("evicted by the global
 * memory limit"), and the fleet's total stays under it. */
static void test_the_global_limit_evicts_the_oldest_exit_profiles(void **state)
{
    struct daemon_options o = {.chunk_bytes = 64 * KIB, .process_limit_bytes = 1024 * KIB};
    struct ctl_totals t;
    struct fx f;
    struct conn *c;

    (void)state;
    o.global_limit_bytes = DAEMON_GLOBAL_LIMIT_MIN(o.chunk_bytes); /* 128 KiB */
    fx_setup(&f, &o);
    c = fx_child(&f, 1300, "big");
    for (int k = 0; k < 6; k++) {
        c->pid = 1300 + k;
        daemon__exit_profile_add(f.d, c, json_of(50 * KIB), 50 * KIB, NULL, false);
        ctl_get_totals(f.d->ctl, &t);
        assert_true(t.unreleased_bytes + t.released_bytes <= o.global_limit_bytes);
        check_store(f.d);
    }
    /* Two fit in 128 KiB: the newest two stay. */
    assert_int_equal(kept(f.d), 2);
    assert_int_equal(f.d->exit_profiles->pid, 1304);
    assert_int_equal(f.d->exit_profiles_last->pid, 1305);
    assert_int_equal(f.d->departure_count, 4);
    for (int k = 0; k < 4; k++) {
        assert_int_equal(f.d->departures[k].pid, 1300 + k);
        assert_string_equal(f.d->departures[k].dropped, "evicted by the global memory limit");
    }
    assert_int_equal(fx_logged(&f, "evicted by the global memory limit"), 4);
    c->pid = 1300;
    fx_teardown(&f);
}

/* ---- the controller's actions ---------------------------------------------------- */

static struct conn *child_with_region(struct fx *f, int32_t pid, struct buf_region **ret)
{
    struct conn *c = fx_child(f, pid, "reader");

    *ret = fx_region_new(64 * KIB);
    daemon__region_accept(c, fx_region_dup(*ret), true);
    assert_non_null(c->evict_page);
    return c;
}

/* An update that takes the fleet past the limit: the controller evicts the oldest released
 * chunk, and its owner, which reads its evictions in its region, finds the point there. */
static void test_a_destroy_goes_through_the_region_of_an_owner_that_reads_it(void **state)
{
    struct daemon_options o = {.chunk_bytes = 64 * KIB,
                               .process_limit_bytes = 1024 * KIB,
                               .global_limit_bytes = 128 * KIB};
    struct buf_region *region;
    struct ctl_chunk chunks[2];
    struct ctl_update u = {0};
    struct daemon_stats s;
    struct fx f;
    struct conn *c;
    uint64_t now = daemon__now_ns();

    (void)state;
    fx_setup(&f, &o);
    c = child_with_region(&f, 1400, &region);
    chunks[0] = (struct ctl_chunk){now - 2000, 64 * KIB};
    chunks[1] = (struct ctl_chunk){now - 1000, 64 * KIB};
    u.unreleased_bytes = 64 * KIB;
    u.released_bytes = 128 * KIB;
    u.newly_released = chunks;
    u.newly_released_count = 2;
    assert_true(daemon__update_apply(c, &u));
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.updates, 1);
    assert_int_equal(s.region_evictions, 1);
    assert_int_equal(s.destroy_requests, 0);
    assert_int_equal(c->region_evictions, 1);
    assert_int_equal(c->destroy_requests, 0);
    /* What the child reads on its next tick. */
    assert_true(buf_region_eviction_ns(region) == now - 2000);
    assert_true(s.unreleased_bytes + s.released_bytes <= o.global_limit_bytes);
    fx_child_free(&f, c);
    buf_region_free(region);
    fx_teardown(&f);
}

static bool got_destroy(void *arg)
{
    return fx_client_got(arg, FLEETPROF__ENVELOPE__MSG_DESTROY_RELEASED_CHUNKS_AT_OR_BEFORE, 0) !=
           NULL;
}

/* The same for an owner without a region: a DestroyReleasedChunksAtOrBefore on its
 * connection. */
static void test_a_destroy_goes_by_message_to_an_owner_without_a_region(void **state)
{
    struct daemon_options o = {.chunk_bytes = 64 * KIB,
                               .process_limit_bytes = 1024 * KIB,
                               .global_limit_bytes = 128 * KIB};
    const Fleetprof__Envelope *env;
    struct ctl_chunk chunks[2];
    struct ctl_update u = {0};
    struct fx_client cl;
    struct daemon_stats s;
    struct fx f;
    struct conn *c;
    uint64_t now = daemon__now_ns();

    (void)state;
    fx_setup(&f, &o);
    c = fx_connect(&f, &cl, "by-message");
    assert_non_null(c);
    assert_null(c->evict_page);
    chunks[0] = (struct ctl_chunk){now - 2000, 64 * KIB};
    chunks[1] = (struct ctl_chunk){now - 1000, 64 * KIB};
    u.unreleased_bytes = 64 * KIB;
    u.released_bytes = 128 * KIB;
    u.newly_released = chunks;
    u.newly_released_count = 2;
    assert_true(daemon__update_apply(c, &u));
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.destroy_requests, 1);
    assert_int_equal(s.region_evictions, 0);
    assert_int_equal(c->destroy_requests, 1);
    assert_true(fx_run_until(&f, got_destroy, &cl));
    env = fx_client_got(&cl, FLEETPROF__ENVELOPE__MSG_DESTROY_RELEASED_CHUNKS_AT_OR_BEFORE, 0);
    assert_true(env->destroy_released_chunks_at_or_before->done_ns == now - 2000);
    assert_true(env->destroy_released_chunks_at_or_before->id != 0);
    assert_int_equal(
            fx_client_count(&cl, FLEETPROF__ENVELOPE__MSG_DESTROY_RELEASED_CHUNKS_AT_OR_BEFORE), 1);
    fx_client_close(&f, &cl);
    fx_teardown(&f);
}

/* Actions as the controller hands them: an owner gone meanwhile is skipped; the daemon's own
 * chunks are its exit profiles. */
static void test_actions_for_the_daemon_and_for_an_owner_gone(void **state)
{
    struct ctl_actions a = {0};
    struct daemon_stats s;
    struct fx f;
    struct conn *c;
    uint64_t first;

    (void)state;
    fx_setup(&f, NULL);
    c = fx_child(&f, 1500, "gone-soon");
    daemon__exit_profile_add(f.d, c, json_of(10), 10, NULL, false);
    first = f.d->exit_profiles->receipt_ns;
    c->pid = 1501;
    daemon__exit_profile_add(f.d, c, json_of(10), 10, NULL, false);
    c->pid = 1500;
    a.destroy[0] = (struct ctl_destroy){.owner = 4242, .done_ns = 1}; /* nobody */
    a.destroy[1] = (struct ctl_destroy){.owner = CTL_OWNER_DAEMON, .done_ns = first};
    a.destroy_count = 2;
    daemon__apply_actions(f.d, &a);
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.destroy_requests, 0);
    assert_int_equal(s.region_evictions, 0);
    assert_int_equal(kept(f.d), 1);
    assert_int_equal(f.d->exit_profiles->pid, 1501);
    assert_string_equal(f.d->departures[0].dropped, "evicted by the global memory limit");
    check_store(f.d);
    fx_teardown(&f);
}

/* More owners to ask than one set of actions holds (64): the rest come from the controller
 * again, and every owner is asked. */
static void test_more_owners_than_one_set_of_actions_holds(void **state)
{
    enum { OWNERS = 70 };
    struct daemon_options o = {.chunk_bytes = 64 * KIB,
                               .process_limit_bytes = 1024 * KIB,
                               .global_limit_bytes = 5 * 1024 * KIB};
    struct buf_region *regions[OWNERS];
    struct conn *owners[OWNERS], *big;
    struct ctl_update u = {0};
    struct daemon_stats s;
    struct fx f;
    uint64_t now = daemon__now_ns() - 1000000;

    (void)state;
    fx_setup(&f, &o);
    for (int i = 0; i < OWNERS; i++) {
        struct ctl_chunk chunk = {now + (uint64_t)i, 64 * KIB};

        owners[i] = child_with_region(&f, 2000 + i, &regions[i]);
        u = (struct ctl_update){
                .released_bytes = 64 * KIB, .newly_released = &chunk, .newly_released_count = 1};
        assert_true(daemon__update_apply(owners[i], &u));
    }
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.region_evictions, 0); /* 70 x 64 KiB fit in 5 MiB */

    /* One process takes the whole limit: every released chunk must go. */
    big = fx_child(&f, 3000, "big");
    u = (struct ctl_update){.unreleased_bytes = 5 * 1024 * KIB};
    assert_true(daemon__update_apply(big, &u));
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.region_evictions, OWNERS);
    assert_int_equal(s.released_bytes, 0);
    for (int i = 0; i < OWNERS; i++) {
        assert_true(buf_region_eviction_ns(regions[i]) == now + (uint64_t)i);
        assert_int_equal(owners[i]->region_evictions, 1);
        fx_child_free(&f, owners[i]);
        buf_region_free(regions[i]);
    }
    fx_teardown(&f);
}

/* An update that cannot be true is refused whole: its child is dropped with the reason, the
 * controller unchanged. */
static void test_a_contradictory_update_drops_its_child(void **state)
{
    struct ctl_owner_status os;
    struct ctl_chunk chunks[2];
    struct ctl_update u = {0};
    struct daemon_stats s;
    struct fx f;
    struct conn *good, *bad;
    uint64_t now = daemon__now_ns();

    (void)state;
    fx_setup(&f, NULL);
    good = fx_child(&f, 1600, "good");
    bad = fx_child(&f, 1601, "bad");
    chunks[0] = (struct ctl_chunk){now - 1000, 64 * KIB};
    chunks[1] = (struct ctl_chunk){now - 2000, 64 * KIB}; /* older than the first */
    u.unreleased_bytes = 100;
    u.released_bytes = 128 * KIB;
    u.newly_released = chunks;
    u.newly_released_count = 2;
    assert_false(daemon__update_apply(bad, &u));
    assert_int_equal(bad->kind, CONN_DEAD);
    assert_false(ctl_get_owner(f.d->ctl, 1601, &os));
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.updates, 0);
    assert_int_equal(s.dropped_children, 1);
    assert_int_equal(s.unreleased_bytes + s.released_bytes, 0);
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_WARNING,
                                  "dropping child 1601 (bad): released chunks not in increasing "
                                  "done time"),
                     1);

    /* The same chunks in order, from another child: applied. */
    chunks[0].done_ns = now - 2000;
    chunks[1].done_ns = now - 1000;
    assert_true(daemon__update_apply(good, &u));
    assert_true(ctl_get_owner(f.d->ctl, 1600, &os));
    assert_int_equal(os.unreleased_bytes, 100);
    assert_int_equal(os.released_bytes, 128 * KIB);
    assert_int_equal(os.released_chunks, 2);
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.updates, 1);
    assert_int_equal(good->kind, CONN_CHILD);
    fx_teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_exit_profiles_are_kept_in_receipt_order),
            cmocka_unit_test(test_an_exit_profile_that_is_not_an_object_is_refused),
            cmocka_unit_test(test_eviction_at_or_before_a_time),
            cmocka_unit_test(test_an_evicted_profile_is_named_once),
            cmocka_unit_test(test_the_store_stays_consistent),
            cmocka_unit_test(test_the_global_limit_evicts_the_oldest_exit_profiles),
            cmocka_unit_test(test_a_destroy_goes_through_the_region_of_an_owner_that_reads_it),
            cmocka_unit_test(test_a_destroy_goes_by_message_to_an_owner_without_a_region),
            cmocka_unit_test(test_actions_for_the_daemon_and_for_an_owner_gone),
            cmocka_unit_test(test_more_owners_than_one_set_of_actions_holds),
            cmocka_unit_test(test_a_contradictory_update_drops_its_child),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
