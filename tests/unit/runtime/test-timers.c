/* Unit tests for each thread's CPU-time timer (child/core/cpu-timer.c), its signal's handler
 * (child/core/handler.c) and the record of where a thread waits (child/core/waits.c), on
 * real threads and real kernel timers, without a sampler: a busy thread's captures land in
 * its ring, each weighted by the CPU since the one before; a full ring drops captures, not
 * their CPU; a sleeping thread is never signalled (its sleep is not cut short); a thread
 * whose timer is stopped while it blocks the signal has nothing pending; a thread in a
 * blocking call has its caller's stack walked from a copy, and not once the call is over. */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "child/core/core.h"
#include "testlib.h"

static uint64_t thread_cpu_now(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static volatile uint64_t sink;

static void burn_cpu_ms(unsigned ms)
{
    uint64_t until = thread_cpu_now() + ms * 1000000ull;

    while (thread_cpu_now() < until)
        for (unsigned i = 0; i < 1000; i++)
            sink += i;
}

static int setup(void **state)
{
    (void)state;
    rt.pid = (int32_t)getpid();
    atomic_store(&rt.cfg.interval_ns, 1000000);
    rt.cfg.timer = RT_TIMER_THREAD_CPU;
    rt.cfg.stackwalk = RT_STACKWALK_FP;
    assert_int_equal(rt_stackwalk_init(RT_STACKWALK_FP), 0);
    assert_int_equal(rt_handler_install(), 0);
    return 0;
}

static uint32_t full_slots(const struct rt_thread *t)
{
    uint32_t n = 0;

    for (size_t i = 0; i < RT_CAPTURE_RING; i++)
        n += atomic_load(&t->ring[i].state) == RT_CAPTURE_FULL;
    return n;
}

struct busy {
    uint64_t before_cpu, armed_cpu, end_cpu;
    uint32_t full;
    uint64_t deltas, last_cpu;
    bool ordered;
    int kind;
};

static void *busy_main(void *arg)
{
    struct busy *b = arg;
    struct rt_thread *t;

    /* Armed with more than an interval used, as an exec'd image's first thread is. */
    burn_cpu_ms(2);
    b->before_cpu = thread_cpu_now();
    assert_int_equal(rt_threads_register("busy", false), 0);
    t = rt_self;
    b->kind = atomic_load(&t->timer_kind);
    b->armed_cpu = t->timer_cpu_ns;
    burn_cpu_ms(150);
    rt_cpu_timer_disarm(t);
    b->end_cpu = thread_cpu_now();
    b->full = full_slots(t);
    b->ordered = true;
    /* In ring order: each capture's weight is the CPU since the one before. */
    for (uint32_t i = 0; i < b->full; i++) {
        const struct rt_capture *c = &t->ring[i];
        uint64_t before = i == 0 ? b->armed_cpu : t->ring[i - 1].cpu_ns;

        b->ordered = b->ordered && c->cpu_ns >= before && c->cpu_delta_ns == c->cpu_ns - before &&
                     c->frame_count > 0 && c->time_ns > 0;
        b->deltas += c->cpu_delta_ns;
        b->last_cpu = c->cpu_ns;
    }
    rt_threads_unregister();
    return NULL;
}

static void test_a_busy_thread_fills_its_ring_with_weighted_captures(void **state)
{
    struct busy b = {0};
    pthread_t th;
    uint64_t dropped = atomic_load(&rt.captures_dropped);

    (void)state;
    assert_int_equal(pthread_create(&th, NULL, busy_main, &b), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(b.kind, RT_TIMER_THREAD_CPU);
    /* 150 ms of CPU at a 1 ms timer (at most one expiry per kernel tick): far more than the
     * ring holds, and nobody empties it here. */
    assert_int_equal(b.full, RT_CAPTURE_RING);
    assert_true(b.ordered);
    assert_int_equal(b.deltas, b.last_cpu - b.armed_cpu);
    /* The weights start at the CPU the thread had when armed, not an interval before its
     * random first expiry: no capture holds CPU the thread had not used by then. */
    assert_true(b.armed_cpu >= b.before_cpu);
    assert_true(b.last_cpu <= b.end_cpu);
    assert_true(atomic_load(&rt.captures_dropped) > dropped);
}

struct sleeper {
    int slept; /* nanosleep's result */
    int err;
    uint32_t full;
};

static void *sleeper_main(void *arg)
{
    struct sleeper *s = arg;
    struct timespec ts = {0, 200 * 1000 * 1000};

    assert_int_equal(rt_threads_register("sleeper", false), 0);
    burn_cpu_ms(1); /* it ran: its timer runs too */
    s->slept = nanosleep(&ts, NULL);
    s->err = errno;
    s->full = full_slots(rt_self);
    rt_threads_unregister();
    return NULL;
}

static void test_a_sleeping_thread_is_not_signalled(void **state)
{
    struct sleeper s = {0};
    pthread_t th;

    (void)state;
    assert_int_equal(pthread_create(&th, NULL, sleeper_main, &s), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(s.slept, 0); /* not cut short (EINTR) */
    assert_true(s.full <= 1);     /* at most one, in its millisecond of CPU */
}

struct blocker {
    bool pending;
    uint32_t full_blocked, full_after;
};

static void *blocker_main(void *arg)
{
    struct blocker *b = arg;
    sigset_t prof, pending;

    assert_int_equal(rt_threads_register("blocker", false), 0);
    (void)sigemptyset(&prof);
    (void)sigaddset(&prof, RT_SAMPLE_SIGNAL);
    /* As the interposed pthread_sigmask() does: the timer first, then the mask. */
    rt_cpu_timer_pause(rt_self, true);
    assert_int_equal(rt_sigmask_raw(SIG_BLOCK, &prof, NULL), 0);
    burn_cpu_ms(50);
    (void)sigpending(&pending);
    b->pending = sigismember(&pending, RT_SAMPLE_SIGNAL) == 1;
    b->full_blocked = full_slots(rt_self);
    assert_int_equal(rt_sigmask_raw(SIG_UNBLOCK, &prof, NULL), 0);
    rt_cpu_timer_pause(rt_self, false);
    burn_cpu_ms(50);
    b->full_after = full_slots(rt_self);
    rt_threads_unregister();
    return NULL;
}

static void test_a_thread_blocking_the_signal_has_none_pending(void **state)
{
    struct blocker b = {0};
    pthread_t th;

    (void)state;
    assert_int_equal(pthread_create(&th, NULL, blocker_main, &b), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_false(b.pending);
    assert_int_equal(b.full_blocked, 0);
    assert_true(b.full_after > 0); /* sampled again once it unblocked */
}

struct waiter {
    sem_t in_wait, release;
};

static __attribute__((noinline)) int fake_wait(sem_t *s)
{
    int r;

    /* What an interposer does (child/entry/preload-waits.c). */
    rt_wait_begin((uintptr_t)__builtin_frame_address(0), (uintptr_t)__builtin_return_address(0),
                  (uintptr_t)sem_wait);
    r = sem_wait(s);
    rt_wait_end();
    return r;
}

static __attribute__((noinline)) void wait_here(struct waiter *w)
{
    (void)sem_post(&w->in_wait);
    while (fake_wait(&w->release) < 0)
        ;
}

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;

    assert_int_equal(rt_threads_register("waiter", false), 0);
    wait_here(w);
    rt_threads_unregister();
    return NULL;
}

static void test_a_waiting_threads_stack_is_walked_from_a_copy(void **state)
{
    struct waiter w = {0};
    struct rt_capture *c = NULL;
    struct rt_thread *t = NULL;
    uint64_t since = 0;
    uint32_t seq = 0;
    pthread_t th;
    int r = -EAGAIN;

    (void)state;
    assert_int_equal(sem_init(&w.in_wait, 0, 0), 0);
    assert_int_equal(sem_init(&w.release, 0, 0), 0);
    assert_int_equal(pthread_create(&th, NULL, waiter_main, &w), 0);
    while (sem_wait(&w.in_wait) < 0)
        ;
    (void)pthread_mutex_lock(&rt.registry_lock);
    for (size_t i = 0; i < rt.thread_count; i++)
        if (rt.threads[i] && rt.threads[i]->live && !strcmp(rt.threads[i]->name, "waiter"))
            t = rt.threads[i];
    (void)pthread_mutex_unlock(&rt.registry_lock);
    assert_non_null(t);
    /* It posted, then entered its wait: asked until it is in it. */
    for (int i = 0; i < 1000 && r == -EAGAIN; i++) {
        r = rt_wait_stack(t, &seq, &since, &c);
        if (r == -EAGAIN)
            (void)usleep(1000);
    }
    assert_int_equal(r, 0);
    assert_true(seq & 1u);
    assert_true(since > 0);
    /* The function it calls, then the call inside wait_here() (just before the return
     * address fake_wait() was called with). */
    assert_true(c->frame_count >= 2);
    assert_int_equal(c->frames[0], (uint64_t)(uintptr_t)sem_wait);
    assert_true(c->frames[1] > (uint64_t)(uintptr_t)wait_here &&
                c->frames[1] < (uint64_t)(uintptr_t)wait_here + 256);
    (void)sem_post(&w.release);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(rt_wait_stack(t, &seq, &since, &c), -EAGAIN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_a_busy_thread_fills_its_ring_with_weighted_captures),
            cmocka_unit_test(test_a_sleeping_thread_is_not_signalled),
            cmocka_unit_test(test_a_thread_blocking_the_signal_has_none_pending),
            cmocka_unit_test(test_a_waiting_threads_stack_is_walked_from_a_copy),
    };

    return cmocka_run_group_tests(tests, setup, NULL);
}
