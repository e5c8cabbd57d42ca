/* Unit tests for daemon/workers.c: a job runs on a worker thread while the loop goes on
 * serving (the reason the pool exists: a killed fleet's recoveries held the loop for seconds),
 * its done callback runs on the loop thread, and closing the pool waits for what runs and
 * cancels what waits. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uv.h>

/* <uv.h> brings <sys/param.h>, whose MIN/MAX clash with common/macros.h (via testlib.h). */
#undef MIN
#undef MAX

#include "daemon/workers.h"
#include "testlib.h"

#define HANG_NS (30ull * 1000000000ull)

struct job {
    struct worker_job job;
    pthread_t loop_thread;
    _Atomic bool *release; /* the job waits for it (set by the loop), at most HANG_NS */
    bool released;         /* it was set before the wait ran out */
    _Atomic bool started;
    bool ran_on_loop;
    bool done_on_loop;
    bool done, ran;
    int *done_order;
    int index;
    int *next_done;
};

static uint64_t now_ns(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void job_run(struct worker_job *wj, struct worker_scratch *scratch)
{
    struct job *j = (struct job *)wj;
    uint64_t until = now_ns() + HANG_NS;

    (void)scratch;
    atomic_store(&j->started, true);
    j->ran_on_loop = pthread_equal(pthread_self(), j->loop_thread);
    while (j->release && !atomic_load(j->release) && now_ns() < until) {
        struct timespec ms = {0, 1000000};

        (void)nanosleep(&ms, NULL);
    }
    j->released = !j->release || atomic_load(j->release);
}

static void job_done(struct worker_job *wj, bool ran)
{
    struct job *j = (struct job *)wj;

    j->done_on_loop = pthread_equal(pthread_self(), j->loop_thread);
    j->done = true;
    j->ran = ran;
    if (j->done_order)
        j->done_order[(*j->next_done)++] = j->index;
}

struct releaser {
    uv_timer_t timer;
    _Atomic bool release;
    struct daemon_workers *pool;
    size_t busy_seen; /* workers_busy() when the loop's timer fired */
};

static void on_timer(uv_timer_t *t)
{
    struct releaser *r = t->data;

    r->busy_seen = workers_busy(r->pool);
    atomic_store(&r->release, true);
    uv_close((uv_handle_t *)t, NULL);
}

static void on_pool_closed(void *userdata)
{
    *(bool *)userdata = true;
}

/* The job waits for the loop's timer: it can be released only if the loop runs meanwhile. */
static void test_a_job_runs_while_the_loop_serves(void **state)
{
    uv_loop_t loop;
    struct daemon_workers *pool = NULL;
    struct releaser rel = {0};
    struct job j = {0};
    bool closed = false;

    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(workers_new(&loop, 2, 16u << 20, &pool), 0);
    j.job.run = job_run;
    j.job.done = job_done;
    j.loop_thread = pthread_self();
    j.release = &rel.release;
    rel.pool = pool;
    rel.timer.data = &rel;
    assert_int_equal(uv_timer_init(&loop, &rel.timer), 0);
    assert_int_equal(uv_timer_start(&rel.timer, on_timer, 10, 0), 0);
    workers_submit(pool, &j.job);
    assert_int_equal(workers_busy(pool), 1);
    /* A busy pool keeps the loop alive until its jobs are done. */
    (void)uv_run(&loop, UV_RUN_DEFAULT);
    assert_true(j.done);
    assert_true(j.ran);
    assert_true(j.released); /* the loop's timer fired while the job was running */
    assert_int_equal(rel.busy_seen, 1);
    assert_false(j.ran_on_loop); /* on a worker */
    assert_true(j.done_on_loop); /* finished on the loop */
    assert_int_equal(workers_busy(pool), 0);
    workers_close(pool, on_pool_closed, &closed);
    (void)uv_run(&loop, UV_RUN_DEFAULT);
    assert_true(closed);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* Closing finishes every job before it returns, each once, on the loop: the running one
 * waited for (ran), those still queued cancelled (not ran) or run, as the worker got them. */
static void test_close_finishes_every_job_once(void **state)
{
    uv_loop_t loop;
    struct daemon_workers *pool = NULL;
    _Atomic bool release = false;
    uint64_t until = now_ns() + HANG_NS;
    struct job jobs[4];
    int order[4], next = 0;

    memset(jobs, 0, sizeof(jobs));
    bool closed = false;

    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(workers_new(&loop, 1, 16u << 20, &pool), 0);
    for (int i = 0; i < 4; i++) {
        jobs[i].job.run = job_run;
        jobs[i].job.done = job_done;
        jobs[i].loop_thread = pthread_self();
        jobs[i].release = &release;
        jobs[i].done_order = order;
        jobs[i].next_done = &next;
        jobs[i].index = i;
        workers_submit(pool, &jobs[i].job);
    }
    assert_int_equal(workers_busy(pool), 4);
    /* One worker: job 0 runs first (waited for here), 1..3 queue behind it. The close waits
     * for it whatever it is doing. */
    while (!atomic_load(&jobs[0].started) && now_ns() < until) {
        struct timespec ms = {0, 1000000};

        (void)nanosleep(&ms, NULL);
    }
    assert_true(atomic_load(&jobs[0].started));
    atomic_store(&release, true);
    workers_close(pool, on_pool_closed, &closed);
    for (int i = 0; i < 4; i++) {
        assert_true(jobs[i].done);
        assert_true(jobs[i].done_on_loop);
        assert_false(jobs[i].ran_on_loop);
    }
    assert_true(jobs[0].ran);
    assert_int_equal(next, 4); /* each done once */
    for (int i = 0; i < 4; i++)
        for (int k = i + 1; k < 4; k++)
            assert_int_not_equal(order[i], order[k]);
    (void)uv_run(&loop, UV_RUN_DEFAULT);
    assert_true(closed);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_a_job_runs_while_the_loop_serves),
            cmocka_unit_test(test_close_finishes_every_job_once),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
