/* Unit tests for the runtime's side of the global limit (child/core/updates.c) without a
 * daemon: the chunk manager's changes fold into the slot the IPC thread takes them from, a
 * destroy and a put-back show there, the daemon's eviction point in the region's header is
 * applied on the sampler's tick (and a point in the future is not), a change waits in the slot
 * while no daemon is connected, a forked child starts with an empty slot, and stopping sends
 * a Final. The buffer is the runtime's own kind: a local-limit manager whose chunks live in a
 * region (a memfd, as for a daemon's child: runtime.c's make_buffer()).
 *
 * Not reached without a daemon: publishing in the region's update ring and waking the IPC
 * module (both need the module loaded and connected). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buffer/chunk-manager.h"
#include "buffer/chunked-buffer.h"
#include "buffer/region.h"
#include "buffer/update.h"
#include "child/core/core.h"
#include "testlib.h"

#define CHUNK_BYTES BUF_CHUNK_MIN_BYTES
#define LIMIT_BYTES (64ull * CHUNK_BYTES) /* room enough that no chunk goes by the limit */

static int group_setup(void **state)
{
    (void)state;
    rt.pid = (int32_t)getpid();
    rt.cfg.chunk_bytes = CHUNK_BYTES;
    rt.cfg.buffer_bytes = LIMIT_BYTES;
    /* A daemon's child keeps its chunks in a memfd; no daemon needs to be there. */
    (void)snprintf(rt.cfg.socket, sizeof(rt.cfg.socket), "/nonexistent/fleetprof.sock");
    if (buf_chunk_manager_local_new(rt.cfg.buffer_bytes, rt.cfg.chunk_bytes, &rt.manager) < 0)
        return -1;
    if (rt_region_open(rt.manager) < 0 || !rt_region_active())
        return -1;
    if (buf_chunked_buffer_new(rt.manager, rt.pid, &rt.buffer) < 0)
        return -1;
    return rt_updates_start();
}

static int group_teardown(void **state)
{
    (void)state;
    rt_updates_stop();
    rt.buffer = buf_chunked_buffer_free(rt.buffer);
    rt.manager = buf_chunk_manager_free(rt.manager);
    return 0;
}

static struct buf_chunk_manager_stats stats(void)
{
    struct buf_chunk_manager_stats st;

    buf_chunk_manager_get_stats(rt.manager, &st);
    return st;
}

/* Writes blocks until n more chunks were released. */
static void release_chunks(uint64_t n)
{
    static uint8_t block[1000];
    uint64_t target = stats().released_chunks + n;

    while (stats().released_chunks < target) {
        memset(block, (int)(target & 0xff), sizeof(block));
        assert_int_equal(buf_chunked_buffer_put_bytes(rt.buffer, block, sizeof(block), NULL), 0);
    }
}

/* Empties the slot; returns what it held (the caller frees it with buf_update_done). */
static struct buf_update take(void)
{
    struct buf_update u;

    buf_update_init(&u);
    (void)rt_updates_take(&u);
    return u;
}

static void drain(void)
{
    struct buf_update u = take();

    buf_update_done(&u);
}

static void test_the_managers_changes_fold_into_the_slot(void **state)
{
    struct buf_update u;
    size_t released;
    uint64_t unreleased, sum = 0;

    (void)state;
    /* Started: the slot holds the manager's state as it is. */
    assert_int_equal(rt_updates_peek(&released, &unreleased), BUF_UPDATE_CHANGE);
    drain();
    assert_int_equal(rt_updates_peek(&released, &unreleased), BUF_UPDATE_NONE);
    assert_int_equal(rt_updates_take(&u), 0);

    /* Three chunks filled and released: one change, listing the three. */
    release_chunks(3);
    assert_int_equal(rt_updates_peek(&released, &unreleased), BUF_UPDATE_CHANGE);
    assert_int_equal(released, 3);
    assert_int_equal(unreleased, stats().unreleased_bytes);
    assert_true(unreleased > 0);
    u = take();
    assert_int_equal(u.kind, BUF_UPDATE_CHANGE);
    assert_int_equal(u.newly_released_count, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_true(u.newly_released[i].bytes > 0);
        assert_true(u.newly_released[i].done_ns <= rt_now_ns());
        if (i > 0)
            assert_true(u.newly_released[i].done_ns > u.newly_released[i - 1].done_ns);
        sum += u.newly_released[i].bytes;
    }
    assert_int_equal(u.released_bytes, stats().released_bytes);
    assert_int_equal(u.released_bytes, sum); /* none was released before */
    assert_int_equal(u.oldest_done_ns, u.newly_released[0].done_ns);
    buf_update_done(&u);
    assert_int_equal(rt_updates_peek(&released, &unreleased), BUF_UPDATE_NONE);
}

static void test_a_destroy_and_a_put_back_show_in_the_slot(void **state)
{
    struct buf_update u, again;
    uint64_t first, second, released_before, destroyed_before;
    size_t released;
    uint64_t unreleased;

    (void)state;
    drain();
    release_chunks(2);
    u = take();
    assert_true(u.newly_released_count >= 2);
    first = u.newly_released[u.newly_released_count - 2].done_ns;
    second = u.newly_released[u.newly_released_count - 1].done_ns;
    buf_update_done(&u);

    /* The daemon's destroy message: every released chunk done at or before the point. */
    released_before = stats().released_chunks;
    destroyed_before = stats().destroyed_chunks;
    rt_updates_destroy(first, false);
    assert_int_equal(stats().released_chunks, 1); /* only the last one is left */
    assert_int_equal(stats().destroyed_chunks - destroyed_before, released_before - 1);
    assert_int_equal(rt_updates_peek(&released, &unreleased), BUF_UPDATE_CHANGE);
    assert_int_equal(released, 0);
    u = take();
    assert_int_equal(u.oldest_done_ns, second);
    assert_int_equal(u.released_bytes, stats().released_bytes);

    /* What the IPC thread took and could not send goes back, as it was. */
    rt_updates_put_back(&u);
    again = take();
    assert_int_equal(again.kind, BUF_UPDATE_CHANGE);
    assert_int_equal(again.oldest_done_ns, u.oldest_done_ns);
    assert_int_equal(again.released_bytes, u.released_bytes);
    assert_int_equal(again.unreleased_bytes, u.unreleased_bytes);
    buf_update_done(&again);
    buf_update_done(&u);

    /* Quiet (the daemon asked for it): the change is in the slot all the same. */
    release_chunks(1);
    drain();
    rt_updates_destroy(rt_now_ns(), true);
    assert_int_equal(stats().released_chunks, 0);
    u = take();
    assert_int_equal(u.kind, BUF_UPDATE_CHANGE);
    assert_int_equal(u.released_bytes, 0);
    buf_update_done(&u);
}

static void test_the_daemons_eviction_point_is_applied_on_the_tick(void **state)
{
    struct buf_region_header *daemon_view;
    struct buf_update u;
    uint64_t done[3];
    size_t released;
    uint64_t unreleased;

    (void)state;
    drain();
    release_chunks(3);
    u = take();
    assert_int_equal(u.newly_released_count, 3);
    for (size_t i = 0; i < 3; i++)
        done[i] = u.newly_released[i].done_ns;
    buf_update_done(&u);

    /* The daemon maps the region's header page and stores its eviction point there. */
    daemon_view = mmap(NULL, BUF_REGION_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED,
                       rt_region_fd(), 0);
    assert_true(daemon_view != MAP_FAILED);
    buf_region_header_store_eviction(daemon_view, done[0]);
    assert_int_equal(rt_region_eviction_ns(), done[0]);

    /* Not told it may (Welcome's region_evictions): the tick leaves the chunks. */
    rt_updates_use_region(false, false);
    rt_updates_tick();
    assert_int_equal(stats().released_chunks, 3);

    /* Told: the tick destroys the chunks done at or before the point. */
    rt_updates_use_region(true, false);
    rt_updates_tick();
    assert_int_equal(stats().released_chunks, 2);
    assert_int_equal(rt_updates_peek(&released, &unreleased), BUF_UPDATE_CHANGE);
    u = take();
    assert_int_equal(u.oldest_done_ns, done[1]);
    buf_update_done(&u);

    /* A point in the future names no chunk of ours: ignored. */
    buf_region_header_store_eviction(daemon_view, rt_now_ns() + 3600ull * 1000000000ull);
    rt_updates_tick();
    assert_int_equal(stats().released_chunks, 2);
    assert_int_equal(rt_updates_peek(&released, &unreleased), BUF_UPDATE_NONE);

    /* The next point: the next chunk. */
    buf_region_header_store_eviction(daemon_view, done[1]);
    rt_updates_tick();
    assert_int_equal(stats().released_chunks, 1);
    u = take();
    assert_int_equal(u.oldest_done_ns, done[2]);
    buf_update_done(&u);

    rt_updates_use_region(false, false);
    rt_updates_destroy(done[2], false);
    drain();
    assert_int_equal(munmap(daemon_view, BUF_REGION_PAGE_BYTES), 0);
}

static void test_a_change_waits_in_the_slot_while_no_daemon_is_connected(void **state)
{
    size_t released;
    uint64_t unreleased;

    (void)state;
    drain();
    release_chunks(1);
    rt_updates_use_region(false, true); /* the ring: no module to publish through either */
    for (int i = 0; i < 3; i++) {
        rt_updates_tick();
        assert_int_equal(rt_updates_peek(&released, &unreleased), BUF_UPDATE_CHANGE);
        assert_int_equal(released, 1);
    }
    rt_updates_use_region(false, false);
}

/* Exit status: 0, or the number of the check that failed. */
static int forked_child_checks(void)
{
    struct buf_update u;
    size_t released = 99;
    uint64_t unreleased;

    rt_updates_forget_after_fork();
    if (rt_updates_peek(&released, &unreleased) != BUF_UPDATE_NONE || released != 0)
        return 1;
    buf_update_init(&u);
    if (rt_updates_take(&u) != 0)
        return 2;
    return 0;
}

static void test_a_forked_child_forgets_the_parents_changes(void **state)
{
    size_t released;
    uint64_t unreleased;
    int status;
    pid_t pid;

    (void)state;
    /* The slot holds a change (the previous test's). */
    assert_int_equal(rt_updates_peek(&released, &unreleased), BUF_UPDATE_CHANGE);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(forked_child_checks());
    while (waitpid(pid, &status, 0) < 0)
        assert_int_equal(errno, EINTR);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The parent's is still there. */
    assert_int_equal(rt_updates_peek(&released, &unreleased), BUF_UPDATE_CHANGE);
    assert_int_equal(released, 1);
}

static void test_stopping_sends_a_final_and_then_nothing(void **state)
{
    struct buf_update u;
    size_t released;
    uint64_t unreleased;

    (void)state;
    rt_updates_stop();
    assert_int_equal(rt_updates_peek(&released, &unreleased), BUF_UPDATE_FINAL);
    u = take();
    assert_int_equal(u.kind, BUF_UPDATE_FINAL);
    buf_update_done(&u);
    release_chunks(2); /* changes go nowhere now */
    assert_int_equal(rt_updates_peek(&released, &unreleased), BUF_UPDATE_NONE);
    /* Started again: the whole state, the released chunks listed. */
    assert_int_equal(rt_updates_start(), 0);
    assert_int_equal(rt_updates_peek(&released, &unreleased), BUF_UPDATE_CHANGE);
    assert_int_equal(released, stats().released_chunks);
    assert_true(released >= 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_the_managers_changes_fold_into_the_slot),
            cmocka_unit_test(test_a_destroy_and_a_put_back_show_in_the_slot),
            cmocka_unit_test(test_the_daemons_eviction_point_is_applied_on_the_tick),
            cmocka_unit_test(test_a_change_waits_in_the_slot_while_no_daemon_is_connected),
            cmocka_unit_test(test_a_forked_child_forgets_the_parents_changes),
            cmocka_unit_test(test_stopping_sends_a_final_and_then_nothing),
    };

    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
