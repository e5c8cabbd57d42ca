/* Unit tests for the runtime's thread registry (child/core/threads.c), on real threads: each
 * registers itself, ends (its entry stays, ended, for the profile's thread list), and the
 * generation moves each time; the snapshot names live and ended threads with their tids and
 * names; a full registry reuses the slot of the thread that ended first; forgetting all (a
 * forked child) leaves an empty registry. */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child/core/core.h"
#include "testlib.h"

/* A thread that registers itself, says so, and ends (after `release`, when it holds). */
struct worker {
    pthread_t thread;
    char comm[16];         /* its kernel name, set before registering ("": the default) */
    const char *reg_name;  /* the name it registers under (NULL: its current one) */
    bool hold;             /* waits for release before ending */
    bool unregister_early; /* unregisters itself (fleetprof_unregister_thread) at once */
    int32_t tid;           /* out: gettid() */
    int registered;        /* out: rt_threads_register()'s result */
    bool self_ok;          /* out: rt_self was its entry, with its tid, stack and CPU clock */
    bool self_still_set;   /* out: rt_self still set after unregister_early */
    sem_t ready, release;
};

static void sem_wait_intr(sem_t *s)
{
    while (sem_wait(s) < 0)
        assert_int_equal(errno, EINTR);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    const struct rt_thread *t;
    struct timespec ts;
    /* The frame, not a local's address: ASan may keep locals on a heap "fake stack". */
    uintptr_t frame = (uintptr_t)__builtin_frame_address(0);

    if (w->comm[0])
        (void)pthread_setname_np(pthread_self(), w->comm);
    w->tid = (int32_t)gettid();
    w->registered = rt_threads_register(w->reg_name, false);
    t = rt_self;
    /* What the sampler and the signal handler read of it: this thread's tid, a stack that
     * holds its frames (frame-pointer walks stop at its bounds), a CPU clock that reads. A
     * second registration is a no-op. */
    w->self_ok = t && t->tid == w->tid && t->live && !t->is_main && t->stack_lo <= frame &&
                 frame < t->stack_hi && clock_gettime(t->cpu_clock, &ts) == 0 &&
                 rt_threads_register(NULL, false) == 0 && rt_self == t;
    if (w->unregister_early) {
        rt_threads_unregister();
        w->self_still_set = rt_self != NULL;
    }
    (void)sem_post(&w->ready);
    if (w->hold)
        sem_wait_intr(&w->release);
    return NULL; /* the registry's thread-exit key unregisters it */
}

static void worker_start(struct worker *w, const char *comm, bool hold)
{
    memset(w, 0, sizeof(*w));
    if (comm)
        (void)snprintf(w->comm, sizeof(w->comm), "%s", comm);
    w->hold = hold;
    w->registered = 1;
    assert_int_equal(sem_init(&w->ready, 0, 0), 0);
    assert_int_equal(sem_init(&w->release, 0, 0), 0);
}

static void worker_run(struct worker *w)
{
    assert_int_equal(pthread_create(&w->thread, NULL, worker_main, w), 0);
    sem_wait_intr(&w->ready);
}

static void worker_end(struct worker *w)
{
    if (w->hold)
        (void)sem_post(&w->release);
    assert_int_equal(pthread_join(w->thread, NULL), 0);
    (void)sem_destroy(&w->ready);
    (void)sem_destroy(&w->release);
}

/* Starts a worker (holding or not) and waits until it registered. */
static void worker_go(struct worker *w, const char *comm, bool hold)
{
    worker_start(w, comm, hold);
    worker_run(w);
}

struct snapshot {
    struct prof_thread_info *threads;
    size_t count;
};

static void snap(struct snapshot *s)
{
    assert_int_equal(rt_threads_snapshot(&s->threads, &s->count), 0);
    assert_non_null(s->threads);
}

static void snap_free(struct snapshot *s)
{
    rt_threads_snapshot_free(s->threads, s->count);
    memset(s, 0, sizeof(*s));
}

/* The snapshot's entry for tid, the live one if there are several; NULL if none. */
static const struct prof_thread_info *find_tid(const struct snapshot *s, int32_t tid)
{
    const struct prof_thread_info *found = NULL;

    for (size_t i = 0; i < s->count; i++)
        if (s->threads[i].tid == tid && (!found || s->threads[i].unregister_ns == 0))
            found = &s->threads[i];
    return found;
}

static size_t count_live(const struct snapshot *s)
{
    size_t n = 0;

    for (size_t i = 0; i < s->count; i++)
        n += s->threads[i].unregister_ns == 0;
    return n;
}

static int setup(void **state)
{
    (void)state;
    rt.cfg.stackwalk = RT_STACKWALK_FP; /* no libunwind warm-up on registration */
    rt_threads_forget_all();            /* every thread of the last test was joined */
    return 0;
}

static void test_threads_register_themselves_and_stay_listed_when_they_end(void **state)
{
    struct worker w[3];
    struct snapshot s;
    uint64_t before = rt_now_ns(), after, ended;
    char comm[16];

    (void)state;
    for (int i = 0; i < 3; i++) {
        (void)snprintf(comm, sizeof(comm), "rt-worker-%d", i);
        worker_go(&w[i], comm, true);
        assert_int_equal(w[i].registered, 0);
        assert_true(w[i].self_ok);
    }
    after = rt_now_ns();
    snap(&s);
    assert_int_equal(s.count, 3);
    for (int i = 0; i < 3; i++) {
        const struct prof_thread_info *ti = find_tid(&s, w[i].tid);

        assert_non_null(ti);
        (void)snprintf(comm, sizeof(comm), "rt-worker-%d", i);
        assert_string_equal(ti->name, comm);
        assert_int_equal(ti->unregister_ns, 0); /* live */
        assert_true(ti->register_ns >= before && ti->register_ns <= after);
        assert_false(ti->is_main);
    }
    snap_free(&s);

    /* One ends: still listed, under its name, with the time it ended. */
    worker_end(&w[0]);
    ended = rt_now_ns();
    snap(&s);
    assert_int_equal(s.count, 3);
    assert_int_equal(count_live(&s), 2);
    {
        const struct prof_thread_info *ti = find_tid(&s, w[0].tid);

        assert_non_null(ti);
        assert_string_equal(ti->name, "rt-worker-0");
        assert_true(ti->unregister_ns >= ti->register_ns && ti->unregister_ns <= ended);
        assert_int_equal(find_tid(&s, w[1].tid)->unregister_ns, 0);
    }
    snap_free(&s);

    worker_end(&w[1]);
    worker_end(&w[2]);
    snap(&s);
    assert_int_equal(s.count, 3);
    assert_int_equal(count_live(&s), 0);
    for (int i = 0; i < 3; i++)
        assert_non_null(find_tid(&s, w[i].tid));
    snap_free(&s);
}

static void test_the_generation_moves_when_a_thread_registers_and_when_it_ends(void **state)
{
    struct worker w;
    struct snapshot s;
    uint64_t g0 = rt_threads_generation(), g1;
    /* The frame, not a local's address: ASan may keep locals on a heap "fake stack". */
    uintptr_t frame = (uintptr_t)__builtin_frame_address(0);

    (void)state;
    worker_go(&w, "rt-gen", true); /* registers twice: the second is a no-op */
    assert_int_equal(w.registered, 0);
    g1 = rt_threads_generation();
    assert_int_equal(g1, g0 + 1);
    snap(&s); /* looking moves nothing */
    snap_free(&s);
    assert_int_equal(rt_threads_generation(), g1);
    worker_end(&w);
    assert_int_equal(rt_threads_generation(), g1 + 1);

    /* Unregistering a thread that is not registered moves nothing. */
    rt_threads_unregister();
    assert_int_equal(rt_threads_generation(), g1 + 1);

    /* The main thread: its tid is the pid, its stack holds this frame. */
    assert_null(rt_self);
    assert_int_equal(rt_threads_register("main", true), 0);
    assert_int_equal(rt_threads_generation(), g1 + 2);
    assert_non_null(rt_self);
    assert_int_equal(rt_self->tid, getpid());
    assert_true(rt_self->stack_lo <= frame && frame < rt_self->stack_hi);
    snap(&s);
    assert_int_equal(s.count, 2);
    assert_true(find_tid(&s, getpid())->is_main);
    assert_int_equal(find_tid(&s, getpid())->unregister_ns, 0);
    snap_free(&s);

    /* Unregistered (fleetprof_unregister_thread()), then registered again: a new entry
     * beside the ended one. */
    rt_threads_unregister();
    assert_null(rt_self);
    assert_int_equal(rt_threads_generation(), g1 + 3);
    assert_int_equal(rt_threads_register(NULL, true), 0);
    assert_int_equal(rt_threads_generation(), g1 + 4);
    snap(&s);
    assert_int_equal(s.count, 3);
    {
        size_t mine = 0, live = 0;

        for (size_t i = 0; i < s.count; i++)
            if (s.threads[i].tid == getpid()) {
                mine++;
                live += s.threads[i].unregister_ns == 0;
            }
        assert_int_equal(mine, 2);
        assert_int_equal(live, 1);
    }
    snap_free(&s);
    rt_threads_unregister();
    assert_int_equal(rt_threads_generation(), g1 + 5);
}

static void test_the_snapshot_names_each_thread_as_it_is_named_now(void **state)
{
    struct worker w, early;
    struct snapshot s;
    uint64_t g;

    (void)state;
    worker_go(&w, "rt-before", true);
    snap(&s);
    assert_string_equal(find_tid(&s, w.tid)->name, "rt-before");
    snap_free(&s);
    /* The program renames a live thread: the next snapshot says so. */
    assert_int_equal(pthread_setname_np(w.thread, "rt-after"), 0);
    snap(&s);
    assert_string_equal(find_tid(&s, w.tid)->name, "rt-after");
    snap_free(&s);
    /* An ended thread keeps the name it had as it ended. */
    assert_int_equal(pthread_setname_np(w.thread, "rt-last"), 0);
    worker_end(&w);
    snap(&s);
    assert_string_equal(find_tid(&s, w.tid)->name, "rt-last");
    assert_true(find_tid(&s, w.tid)->unregister_ns != 0);
    snap_free(&s);

    /* A thread that unregisters itself is listed as ended while it still runs, and its
     * own end moves nothing more. */
    g = rt_threads_generation();
    worker_start(&early, "rt-early", true);
    early.unregister_early = true;
    worker_run(&early);
    assert_int_equal(early.registered, 0);
    assert_false(early.self_still_set);
    assert_int_equal(rt_threads_generation(), g + 2);
    snap(&s);
    assert_int_equal(s.count, 2);
    assert_true(find_tid(&s, early.tid)->unregister_ns != 0);
    assert_string_equal(find_tid(&s, early.tid)->name, "rt-early");
    snap_free(&s);
    worker_end(&early);
    assert_int_equal(rt_threads_generation(), g + 2);
}

/* The program's own name for a thread (fleetprof_register_thread) is what the profile shows:
 * given at the first registration or to a thread registered already (as the pthread_create
 * interposer registers every thread), and kept over the kernel's name, as it ends too. */
static void test_a_name_the_program_gives_is_kept(void **state)
{
    struct worker w, late;
    struct snapshot s;
    uint64_t g;

    (void)state;
    worker_start(&w, "kernel-name", true);
    w.reg_name = "given-name";
    worker_run(&w);
    assert_int_equal(w.registered, 0);
    snap(&s);
    assert_string_equal(find_tid(&s, w.tid)->name, "given-name");
    snap_free(&s);
    worker_end(&w);
    snap(&s);
    assert_string_equal(find_tid(&s, w.tid)->name, "given-name");
    snap_free(&s);

    /* Registered first without a name, then named by the program. */
    worker_go(&late, "kernel-late", true);
    g = rt_threads_generation();
    assert_int_equal(rt_threads_register("main-named", true), 0); /* this thread: first time */
    assert_int_equal(rt_threads_register("main-renamed", true), 0);
    assert_int_equal(rt_threads_generation(), g + 2);
    snap(&s);
    assert_string_equal(find_tid(&s, (int32_t)gettid())->name, "main-renamed");
    assert_string_equal(find_tid(&s, late.tid)->name, "kernel-late");
    snap_free(&s);
    worker_end(&late);
    rt_threads_unregister();
}

/* The unregister time of the ended entry of slot i. */
static uint64_t ended_at(size_t i)
{
    assert_non_null(rt.threads[i]);
    assert_false(rt.threads[i]->live);
    return rt.threads[i]->unregister_ns;
}

static bool snapshot_has_end(const struct snapshot *s, uint64_t unregister_ns)
{
    for (size_t i = 0; i < s->count; i++)
        if (s->threads[i].unregister_ns == unregister_ns)
            return true;
    return false;
}

static void set_capture_states(int state)
{
    (void)pthread_mutex_lock(&rt.registry_lock);
    for (size_t i = 0; i < rt.thread_count; i++)
        if (rt.threads[i] && !rt.threads[i]->live)
            atomic_store(&rt.threads[i]->capture.state, state);
    (void)pthread_mutex_unlock(&rt.registry_lock);
}

static void test_a_full_registry_reuses_the_slot_of_the_thread_that_ended_first(void **state)
{
    struct worker w, w2, refused;
    struct snapshot s;
    uint64_t first, second, third, g;

    (void)state;
    /* RT_MAX_THREADS threads, one after the other, each registered and ended: the table is
     * full of ended threads, in the order they ended. */
    for (size_t i = 0; i < RT_MAX_THREADS; i++) {
        worker_go(&w, NULL, false);
        assert_int_equal(w.registered, 0);
        worker_end(&w);
    }
    assert_int_equal(rt.thread_count, RT_MAX_THREADS);
    snap(&s);
    assert_int_equal(s.count, RT_MAX_THREADS);
    assert_int_equal(count_live(&s), 0);
    snap_free(&s);
    first = ended_at(0);
    second = ended_at(1);
    third = ended_at(2);
    assert_true(first < second && second < third);

    /* One more: it takes the place of the thread that ended first. */
    worker_go(&w, "rt-new", true);
    assert_int_equal(w.registered, 0);
    assert_int_equal(rt.thread_count, RT_MAX_THREADS);
    snap(&s);
    assert_int_equal(s.count, RT_MAX_THREADS);
    assert_int_equal(count_live(&s), 1);
    assert_int_equal(find_tid(&s, w.tid)->unregister_ns, 0);
    assert_false(snapshot_has_end(&s, first));
    assert_true(snapshot_has_end(&s, second));
    snap_free(&s);

    /* An ended thread whose capture the sampler has not harvested yet keeps its slot: the
     * next oldest goes instead. */
    (void)pthread_mutex_lock(&rt.registry_lock);
    atomic_store(&rt.threads[1]->capture.state, RT_CAPTURE_FULL);
    (void)pthread_mutex_unlock(&rt.registry_lock);
    worker_go(&w2, "rt-new2", true);
    assert_int_equal(w2.registered, 0);
    snap(&s);
    assert_int_equal(s.count, RT_MAX_THREADS);
    assert_true(snapshot_has_end(&s, second));
    assert_false(snapshot_has_end(&s, third));
    assert_int_equal(find_tid(&s, w2.tid)->unregister_ns, 0);
    snap_free(&s);

    /* Every ended thread's capture in flight, the rest live: no slot; the thread is not
     * registered, and nothing changed. */
    set_capture_states(RT_CAPTURE_FULL);
    g = rt_threads_generation();
    worker_go(&refused, "rt-refused", false);
    assert_int_equal(refused.registered, -EAGAIN);
    assert_false(refused.self_ok);
    worker_end(&refused);
    assert_int_equal(rt_threads_generation(), g);
    snap(&s);
    assert_int_equal(s.count, RT_MAX_THREADS);
    assert_null(find_tid(&s, refused.tid));
    assert_int_equal(count_live(&s), 2);
    snap_free(&s);
    set_capture_states(RT_CAPTURE_EMPTY);

    worker_end(&w);
    worker_end(&w2);
}

/* In a forked child, which has only the thread that forked: the registry forgotten is
 * empty, and works again. Exit status: 0, or the number of the check that failed. */
static int forked_child_checks(void)
{
    struct prof_thread_info *threads;
    size_t count;

    rt_threads_forget_all();
    if (rt_self != NULL)
        return 1;
    if (rt_threads_snapshot(&threads, &count) != 0)
        return 2;
    rt_threads_snapshot_free(threads, count);
    if (count != 0 || rt.thread_count != 0)
        return 3;
    if (rt_threads_register("child", true) != 0 || !rt_self || rt_self->tid != getpid())
        return 4;
    if (rt_threads_snapshot(&threads, &count) != 0)
        return 5;
    if (count != 1 || threads[0].tid != getpid() || threads[0].unregister_ns != 0 ||
        !threads[0].is_main) {
        rt_threads_snapshot_free(threads, count);
        return 6;
    }
    rt_threads_snapshot_free(threads, count);
    return 0;
}

static void test_forget_all_leaves_a_forked_child_an_empty_registry(void **state)
{
    struct worker w[2];
    struct snapshot s;
    int status;
    pid_t pid;

    (void)state;
    worker_go(&w[0], "rt-fork-a", true);
    worker_go(&w[1], "rt-fork-b", true);
    assert_int_equal(rt_threads_register("main", true), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(forked_child_checks());
    while (waitpid(pid, &status, 0) < 0)
        assert_int_equal(errno, EINTR);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The parent's registry is its own. */
    snap(&s);
    assert_int_equal(s.count, 3);
    assert_int_equal(count_live(&s), 3);
    snap_free(&s);
    rt_threads_unregister();
    worker_end(&w[0]);
    worker_end(&w[1]);

    /* In this process too, once no registered thread runs. */
    rt_threads_forget_all();
    assert_null(rt_self);
    assert_int_equal(rt.thread_count, 0);
    snap(&s);
    assert_int_equal(s.count, 0);
    snap_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup(test_threads_register_themselves_and_stay_listed_when_they_end,
                                   setup),
            cmocka_unit_test_setup(
                    test_the_generation_moves_when_a_thread_registers_and_when_it_ends, setup),
            cmocka_unit_test_setup(test_the_snapshot_names_each_thread_as_it_is_named_now, setup),
            cmocka_unit_test_setup(test_a_name_the_program_gives_is_kept, setup),
            cmocka_unit_test_setup(
                    test_a_full_registry_reuses_the_slot_of_the_thread_that_ended_first, setup),
            cmocka_unit_test_setup(test_forget_all_leaves_a_forked_child_an_empty_registry, setup),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
