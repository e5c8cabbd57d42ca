/* Unit tests for the runtime's descriptor registry and its threads (child/base/fds.c), on real
 * descriptors: protected ones are the runtime's and intact until a dup2() replaces them;
 * releasing closes only what still holds our file; the pipes captured to keep go on request;
 * relocating moves a descriptor into the runtime's band below the descriptor limit (or 1024)
 * and it still works; rt_fds_own_in() counts ours in a range; a forked child forgets all but
 * the kept ones; the program's descriptor calls wait for the runtime's setups; the runtime's
 * own threads block every signal. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "child/base/clock.h"
#include "child/base/fds.h"
#include "testlib.h"

#define BAND 64 /* RT_FDS_BAND in fds.c: the band is [top - BAND, top) */

static int new_memfd(const char *name)
{
    int fd = memfd_create(name, MFD_CLOEXEC);

    assert_true(fd >= 0);
    return fd;
}

static bool is_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

static bool same_file(int a, int b)
{
    struct stat sa, sb;

    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

static size_t own_count(void)
{
    unsigned int own[RT_MAX_OWN_FDS];

    return rt_fds_own_in(0, UINT_MAX, own);
}

/* The band's top as fds.c reads it: the soft descriptor limit, at most select()'s 1024. */
static int band_top(void)
{
    struct rlimit rl;

    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    return rl.rlim_cur < 1024 ? (int)rl.rlim_cur : 1024;
}

static bool in_band(int fd, int top)
{
    return fd >= top - BAND && fd < top;
}

/* Each test starts with no descriptor of the runtime's (a failed one may leave some). */
static int setup(void **state)
{
    unsigned int own[RT_MAX_OWN_FDS];
    size_t n;

    (void)state;
    (void)rt_fds_release_kept();
    n = rt_fds_own_in(0, UINT_MAX, own);
    for (size_t i = 0; i < n; i++)
        rt_fd_unprotect((int)own[i]);
    return 0;
}

static void test_a_protected_descriptor_is_ours_and_intact_until_unprotected(void **state)
{
    int fd = new_memfd("ours"), gone;

    (void)state;
    assert_false(rt_fd_is_own(fd));
    assert_false(rt_fd_intact(fd));
    rt_fd_protect(fd);
    assert_true(rt_fd_is_own(fd));
    assert_true(rt_fd_intact(fd));
    {
        int lost[RT_MAX_OWN_FDS];

        assert_int_equal(rt_fds_lost(lost, RT_MAX_OWN_FDS), 0);
    }
    /* Protecting it again takes no second place. */
    rt_fd_protect(fd);
    assert_int_equal(own_count(), 1);
    /* Unprotected: not ours any more, and still open. */
    rt_fd_unprotect(fd);
    assert_false(rt_fd_is_own(fd));
    assert_false(rt_fd_intact(fd));
    assert_true(is_open(fd));
    assert_int_equal(own_count(), 0);
    /* No descriptor, or a closed one: nothing is protected. */
    rt_fd_protect(-1);
    assert_false(rt_fd_is_own(-1));
    gone = new_memfd("gone");
    assert_int_equal(close(gone), 0);
    rt_fd_protect(gone);
    assert_false(rt_fd_is_own(gone));
    assert_int_equal(own_count(), 0);
    assert_int_equal(close(fd), 0);
}

static void test_a_descriptor_replaced_by_dup2_is_no_longer_intact(void **state)
{
    int ours = new_memfd("ours"), programs = new_memfd("program"), other = new_memfd("other");
    int lost[RT_MAX_OWN_FDS];

    (void)state;
    rt_fd_protect(ours);
    rt_fd_protect(other);
    assert_true(rt_fd_intact(ours));
    /* The program dup2()s its file onto our number (a route the runtime does not see). */
    assert_int_equal(dup2(programs, ours), ours);
    assert_true(rt_fd_is_own(ours));  /* the number is still listed... */
    assert_false(rt_fd_intact(ours)); /* ...but holds another file */
    assert_true(rt_fd_intact(other));
    assert_int_equal(rt_fds_lost(lost, RT_MAX_OWN_FDS), 1);
    assert_int_equal(lost[0], ours);
    /* Released, it is forgotten and the program's file stays open under that number. */
    rt_fd_release(ours);
    assert_false(rt_fd_is_own(ours));
    assert_true(is_open(ours));
    assert_true(same_file(ours, programs));
    assert_int_equal(rt_fds_lost(lost, RT_MAX_OWN_FDS), 0);
    /* An intact one released is closed. */
    rt_fd_release(other);
    assert_false(rt_fd_is_own(other));
    assert_false(is_open(other));
    assert_int_equal(errno, EBADF);
    /* Releasing a descriptor that is not ours leaves it alone. */
    rt_fd_release(programs);
    assert_true(is_open(programs));
    assert_int_equal(close(ours), 0);
    assert_int_equal(close(programs), 0);
}

/* A pipe made while capturing, as libunwind's and libuv's are (their pipe2() is interposed,
 * which hands the pair to rt_fds_captured()). */
static void captured_pipe(enum rt_fds_capture how, int p[2])
{
    rt_fds_capture(how);
    assert_true(rt_fds_capturing());
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    rt_fds_captured(p);
    rt_fds_capture(RT_FDS_CAPTURE_OFF);
    assert_false(rt_fds_capturing());
}

static void test_kept_descriptors_are_released_on_request(void **state)
{
    int kept[2], plain[2];
    char c = 0;

    (void)state;
    captured_pipe(RT_FDS_CAPTURE_KEEP, kept);
    captured_pipe(RT_FDS_CAPTURE, plain);
    for (int i = 0; i < 2; i++) {
        assert_true(rt_fd_is_own(kept[i]) && rt_fd_intact(kept[i]));
        assert_true(rt_fd_is_kept(kept[i]));
        assert_true(rt_fd_is_own(plain[i]) && rt_fd_intact(plain[i]));
        assert_false(rt_fd_is_kept(plain[i]));
    }
    assert_int_equal(own_count(), 4);
    /* The pairs moved still work. */
    assert_int_equal(write(kept[1], "k", 1), 1);
    assert_int_equal(read(kept[0], &c, 1), 1);
    assert_int_equal(c, 'k');

    /* The kept ones go (closed), the others stay ours. */
    assert_int_equal(rt_fds_release_kept(), 2);
    for (int i = 0; i < 2; i++) {
        assert_false(rt_fd_is_own(kept[i]));
        assert_false(rt_fd_is_kept(kept[i]));
        assert_false(is_open(kept[i]));
        assert_true(rt_fd_is_own(plain[i]));
        assert_true(is_open(plain[i]));
    }
    assert_int_equal(rt_fds_release_kept(), 0);
    rt_fd_release(plain[0]);
    rt_fd_release(plain[1]);
    assert_false(is_open(plain[0]) || is_open(plain[1]));
    assert_int_equal(own_count(), 0);
}

static void test_relocate_moves_a_descriptor_into_the_band_where_it_still_works(void **state)
{
    int top = band_top(), p[2], w, w2, again;
    char buf[8] = {0};

    (void)state;
    /* This process's limit leaves room for a band (the test's premise). */
    assert_true(top >= 4 * BAND);
    assert_int_equal(pipe(p), 0); /* not close-on-exec: the move makes it so */
    assert_false(in_band(p[1], top));
    w = rt_fd_relocate(p[1]);
    assert_true(in_band(w, top));
    assert_false(is_open(p[1])); /* the low number is free again for the program */
    assert_true(fcntl(w, F_GETFD) & FD_CLOEXEC);
    assert_int_equal(write(w, "moved", 5), 5);
    assert_int_equal(read(p[0], buf, sizeof(buf)), 5);
    assert_memory_equal(buf, "moved", 5);
    /* Already in the band: stays. No descriptor: none. */
    assert_int_equal(rt_fd_relocate(w), w);
    assert_int_equal(rt_fd_relocate(-1), -1);
    /* Another one takes another number of the band. */
    again = dup(p[0]);
    assert_true(again >= 0);
    w2 = rt_fd_relocate(again);
    assert_true(in_band(w2, top));
    assert_true(w2 != w);
    assert_true(same_file(w2, p[0]));
    assert_int_equal(close(p[0]), 0);
    assert_int_equal(close(w), 0);
    assert_int_equal(close(w2), 0);
}

static bool set_soft_limit(rlim_t soft)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || soft > rl.rlim_max)
        return false;
    rl.rlim_cur = soft;
    return setrlimit(RLIMIT_NOFILE, &rl) == 0;
}

/* In a forked child (the limits are its own): the band follows a lowered limit, stays when
 * it is raised again, is given up below 4 bands, and a full band leaves a descriptor where
 * it is. Exit status: 0, or the number of the check that failed. */
static int relocate_limits_child(void)
{
    int fd, moved, held[BAND];

    if (rt_fd_relocate(open("/dev/null", O_RDONLY | O_CLOEXEC)) < 1024 - BAND)
        return 1; /* the band read at 1024 */
    if (!set_soft_limit(512))
        return 2;
    moved = rt_fd_relocate(open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!in_band(moved, 512))
        return 3;
    if (!set_soft_limit(1024))
        return 4;
    moved = rt_fd_relocate(open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!in_band(moved, 512)) /* a raised limit leaves the band where it was */
        return 5;
    /* The band full at the limit: the descriptor stays low rather than fail. */
    if (!set_soft_limit(512))
        return 6;
    for (int i = 0; i < BAND; i++)
        held[i] = fcntl(0 <= moved ? moved : 0, F_DUPFD_CLOEXEC, 512 - BAND);
    fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fd >= 512 - BAND)
        return 7;
    if (rt_fd_relocate(fd) != fd || !is_open(fd))
        return 8;
    for (int i = 0; i < BAND; i++)
        if (held[i] >= 0)
            (void)close(held[i]);
    /* Too few numbers under the limit to keep apart: it stays. */
    if (!set_soft_limit(200))
        return 9;
    fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || rt_fd_relocate(fd) != fd || !is_open(fd))
        return 10;
    return 0;
}

static void test_the_band_follows_a_lowered_descriptor_limit(void **state)
{
    struct rlimit rl;
    int status;
    pid_t pid;

    (void)state;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_max < 1024) {
        print_message("# skipped: the hard descriptor limit is %lu\n", (unsigned long)rl.rlim_max);
        return;
    }
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(set_soft_limit(1024) ? relocate_limits_child() : 99);
    while (waitpid(pid, &status, 0) < 0)
        assert_int_equal(errno, EINTR);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_own_in_lists_our_descriptors_in_a_range_in_order(void **state)
{
    unsigned int own[RT_MAX_OWN_FDS];
    int base = new_memfd("base"), a, b, c, many[RT_MAX_OWN_FDS + 4];

    (void)state;
    a = fcntl(base, F_DUPFD_CLOEXEC, 300);
    b = fcntl(base, F_DUPFD_CLOEXEC, a + 5);
    c = fcntl(base, F_DUPFD_CLOEXEC, b + 5);
    assert_true(a >= 300 && b > a && c > b);
    /* Protected out of order, listed in order. */
    rt_fd_protect(c);
    rt_fd_protect(a);
    rt_fd_protect(b);
    assert_int_equal(rt_fds_own_in(0, UINT_MAX, own), 3);
    assert_int_equal(own[0], a);
    assert_int_equal(own[1], b);
    assert_int_equal(own[2], c);
    /* Both ends of the range count. */
    assert_int_equal(rt_fds_own_in((unsigned)a, (unsigned)a, own), 1);
    assert_int_equal(own[0], a);
    assert_int_equal(rt_fds_own_in((unsigned)a + 1, (unsigned)c, own), 2);
    assert_int_equal(own[0], b);
    assert_int_equal(own[1], c);
    assert_int_equal(rt_fds_own_in((unsigned)c + 1, UINT_MAX, own), 0);
    assert_int_equal(rt_fds_own_in(0, (unsigned)a - 1, own), 0);
    /* A descriptor no longer ours is not counted. */
    rt_fd_unprotect(b);
    assert_int_equal(rt_fds_own_in(0, UINT_MAX, own), 2);
    rt_fd_release(a);
    rt_fd_release(c);
    assert_int_equal(close(b), 0);

    /* The table holds RT_MAX_OWN_FDS: more are not protected. */
    for (int i = 0; i < RT_MAX_OWN_FDS + 4; i++) {
        many[i] = dup(base);
        assert_true(many[i] >= 0);
        rt_fd_protect(many[i]);
    }
    assert_int_equal(rt_fds_own_in(0, UINT_MAX, own), RT_MAX_OWN_FDS);
    for (int i = 0; i < RT_MAX_OWN_FDS + 4; i++)
        assert_true(rt_fd_is_own(many[i]) == (i < RT_MAX_OWN_FDS));
    /* A place freed is taken again. */
    rt_fd_release(many[0]);
    rt_fd_protect(many[RT_MAX_OWN_FDS]);
    assert_true(rt_fd_is_own(many[RT_MAX_OWN_FDS]));
    for (int i = 1; i < RT_MAX_OWN_FDS + 4; i++) {
        rt_fd_unprotect(many[i]);
        assert_int_equal(close(many[i]), 0);
    }
    assert_int_equal(own_count(), 0);
    assert_int_equal(close(base), 0);
}

/* In a forked child started with 0 and 2 closed (a daemon's, before it dup2()s /dev/null onto
 * them): the pipes made while capturing take no standard number, and the numbers are free
 * again after, unless the program took one meanwhile. Exit status: 0, or the failed check. */
static int standard_numbers_child(void)
{
    int p[2], q[2], devnull;

    (void)close(0);
    (void)close(2);
    rt_fds_capture(RT_FDS_CAPTURE);
    if (pipe2(p, O_CLOEXEC) != 0)
        return 1;
    if (p[0] <= 2 || p[1] <= 2)
        return 2;
    rt_fds_captured(p);
    rt_fds_capture(RT_FDS_CAPTURE_OFF);
    if (is_open(0) || is_open(2)) /* free for the program again */
        return 3;
    if (!rt_fd_is_own(p[0]) || !rt_fd_is_own(p[1]))
        return 4;
    /* The program dup2()s /dev/null onto 0 during a capture: its file stays. */
    rt_fds_capture(RT_FDS_CAPTURE);
    devnull = open("/dev/null", O_RDONLY);
    if (devnull < 0 || dup2(devnull, 0) != 0 || pipe2(q, O_CLOEXEC) != 0 || q[0] <= 2 || q[1] <= 2)
        return 5;
    rt_fds_capture(RT_FDS_CAPTURE_OFF);
    if (!is_open(0) || !same_file(0, devnull) || is_open(2))
        return 6;
    return 0;
}

static void test_a_capture_keeps_the_runtimes_pipes_off_the_standard_numbers(void **state)
{
    int status;
    pid_t pid;

    (void)state;
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(standard_numbers_child());
    while (waitpid(pid, &status, 0) < 0)
        assert_int_equal(errno, EINTR);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* A thread of the parent in the middle of a setup when the process forks. */
struct setup_holder {
    pthread_t thread;
    sem_t begun, end;
    _Atomic bool ended;
};

static void *hold_setup(void *arg)
{
    struct setup_holder *h = arg;

    rt_fds_setup_begin();
    (void)sem_post(&h->begun);
    while (sem_wait(&h->end) < 0)
        ;
    atomic_store(&h->ended, true);
    rt_fds_setup_end();
    return NULL;
}

static void holder_start(struct setup_holder *h)
{
    memset(h, 0, sizeof(*h));
    assert_int_equal(sem_init(&h->begun, 0, 0), 0);
    assert_int_equal(sem_init(&h->end, 0, 0), 0);
    assert_int_equal(pthread_create(&h->thread, NULL, hold_setup, h), 0);
    while (sem_wait(&h->begun) < 0)
        assert_int_equal(errno, EINTR);
}

static void holder_end(struct setup_holder *h)
{
    (void)sem_post(&h->end);
    assert_int_equal(pthread_join(h->thread, NULL), 0);
    (void)sem_destroy(&h->begun);
    (void)sem_destroy(&h->end);
}

/* Exit status: 0, or the number of the check that failed. */
static int fork_child_checks(int ours, const int kept[2])
{
    unsigned int own[RT_MAX_OWN_FDS];
    uint64_t t0;

    /* As the runtime's fork handler does: the parent's setups first, then the table. */
    rt_fds_fork_child();
    t0 = rt_now_ns();
    rt_fds_wait_setups(); /* the parent's thread in its setup did not come along */
    if (rt_now_ns() - t0 > 500 * 1000 * 1000ull)
        return 1;
    rt_fds_forget();
    if (rt_fd_is_own(ours) || !is_open(ours)) /* forgotten, not closed */
        return 2;
    for (int i = 0; i < 2; i++)
        if (!rt_fd_is_own(kept[i]) || !rt_fd_intact(kept[i]) || !rt_fd_is_kept(kept[i]))
            return 3;
    if (rt_fds_own_in(0, UINT_MAX, own) != 2)
        return 4;
    if (rt_fds_release_kept() != 2 || is_open(kept[0]) || is_open(kept[1]) || own_count() != 0)
        return 5;
    return 0;
}

static void test_a_forked_child_forgets_all_but_the_kept_descriptors(void **state)
{
    struct setup_holder h;
    int ours = new_memfd("ours"), kept[2], status;
    pid_t pid;

    (void)state;
    rt_fd_protect(ours);
    captured_pipe(RT_FDS_CAPTURE_KEEP, kept);
    holder_start(&h);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(fork_child_checks(ours, kept));
    while (waitpid(pid, &status, 0) < 0)
        assert_int_equal(errno, EINTR);
    holder_end(&h);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The parent's table is its own. */
    assert_true(rt_fd_is_own(ours) && rt_fd_intact(ours));
    assert_true(rt_fd_is_kept(kept[0]) && rt_fd_is_own(kept[1]));
    assert_int_equal(rt_fds_release_kept(), 2);
    rt_fd_release(ours);
    assert_int_equal(own_count(), 0);
}

static double seconds_since(uint64_t t0)
{
    return (double)(rt_now_ns() - t0) / 1e9;
}

static void *wait_setups_internal(void *arg)
{
    uint64_t t0 = rt_now_ns();

    rt_fds_wait_setups();
    *(double *)arg = seconds_since(t0);
    return NULL;
}

static void test_the_programs_calls_wait_for_a_setup_on_another_thread(void **state)
{
    struct setup_holder h;
    pthread_t internal;
    double internal_wait = -1;
    uint64_t t0;

    (void)state;
    t0 = rt_now_ns();
    rt_fds_wait_setups(); /* none under way */
    assert_true(seconds_since(t0) < 0.5);

    holder_start(&h);
    /* A thread in a setup of its own, and the runtime's threads, do not wait. */
    rt_fds_capture(RT_FDS_CAPTURE);
    t0 = rt_now_ns();
    rt_fds_wait_setups();
    assert_true(seconds_since(t0) < 0.5);
    rt_fds_capture(RT_FDS_CAPTURE_OFF);
    assert_int_equal(rt_create_internal_thread(&internal, wait_setups_internal, &internal_wait), 0);
    assert_int_equal(pthread_join(internal, NULL), 0);
    assert_true(internal_wait >= 0 && internal_wait < 0.5);
    /* A setup that never ends: the program waits a second, then goes on. */
    t0 = rt_now_ns();
    rt_fds_wait_setups();
    assert_true(seconds_since(t0) >= 0.95);
    assert_false(atomic_load(&h.ended));
    holder_end(&h);
    /* Begun and ended on this thread: nothing left to wait for. */
    rt_fds_setup_begin();
    rt_fds_setup_end();
    t0 = rt_now_ns();
    rt_fds_wait_setups();
    assert_true(seconds_since(t0) < 0.5);
}

/* A setup that ends while the program waits: the wait ends with it. */
static void *end_setup_later(void *arg)
{
    struct timespec ts = {0, 100 * 1000 * 1000};
    _Atomic bool *ended = arg;

    (void)nanosleep(&ts, NULL);
    atomic_store(ended, true);
    rt_fds_setup_end();
    return NULL;
}

static void test_the_wait_ends_when_the_setup_does(void **state)
{
    _Atomic bool ended = false;
    pthread_t t;

    (void)state;
    rt_fds_setup_begin(); /* ended by the other thread: the count is the process's */
    assert_int_equal(pthread_create(&t, NULL, end_setup_later, &ended), 0);
    rt_fds_wait_setups();
    assert_true(atomic_load(&ended)); /* not before the setup ended */
    assert_int_equal(pthread_join(t, NULL), 0);
}

struct internal_report {
    bool internal;
    bool creating;
    sigset_t mask;
};

static void *report_internal(void *arg)
{
    struct internal_report *r = arg;

    r->internal = rt_is_internal_thread();
    r->creating = rt_creating_internal_thread();
    (void)pthread_sigmask(SIG_BLOCK, NULL, &r->mask);
    return NULL;
}

static void test_the_runtimes_own_threads_block_every_signal(void **state)
{
    struct internal_report r;
    sigset_t before, after;
    pthread_t t;
    const int signals[] = {SIGPROF, SIGINT,  SIGTERM,  SIGUSR1, SIGUSR2,
                           SIGCHLD, SIGALRM, SIGRTMIN, SIGRTMAX};

    (void)state;
    memset(&r, 0, sizeof(r));
    assert_int_equal(pthread_sigmask(SIG_SETMASK, NULL, &before), 0);
    assert_false(sigismember(&before, SIGPROF));
    assert_int_equal(rt_create_internal_thread(&t, report_internal, &r), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(r.internal);
    assert_false(r.creating);
    for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++)
        assert_true(sigismember(&r.mask, signals[i]));
    /* The creating thread is not one, and its mask is as it was. */
    assert_false(rt_is_internal_thread());
    assert_false(rt_creating_internal_thread());
    assert_int_equal(pthread_sigmask(SIG_SETMASK, NULL, &after), 0);
    assert_false(sigismember(&after, SIGPROF));
    assert_false(sigismember(&after, SIGUSR1));
    /* A program's thread is not one either. */
    assert_int_equal(pthread_create(&t, NULL, report_internal, &r), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_false(r.internal);
    assert_false(sigismember(&r.mask, SIGPROF));
}

/* glibc's malloc arenas: the heaps malloc_info() lists. */
static int malloc_arenas(void)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    int n = 0;

    assert_non_null(f);
    assert_int_equal(malloc_info(0, f), 0);
    (void)fclose(f);
    for (const char *p = text; (p = strstr(p, "<heap nr=")); p++)
        n++;
    free(text);
    return n;
}

static void *do_nothing(void *arg)
{
    return arg;
}

static void test_the_runtimes_own_threads_make_no_malloc_arena(void **state)
{
    pthread_t t[12];

    (void)state;
    /* Run first: no thread has made an arena yet that a new one could reuse. */
    assert_int_equal(malloc_arenas(), 1);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(rt_create_internal_thread(&t[0], do_nothing, NULL), 0);
        assert_int_equal(pthread_join(t[0], NULL), 0);
    }
    /* A thread that starts without malloc or free: no tcache, no arena of its own (64 MiB
     * of address space and 0.07 ms of CPU each, for the sampler thread). */
    assert_int_equal(malloc_arenas(), 1);
    /* More at once than the start slots: they all start, whatever carries their start. */
    for (int i = 0; i < 12; i++)
        assert_int_equal(rt_create_internal_thread(&t[i], do_nothing, &t[i]), 0);
    for (int i = 0; i < 12; i++) {
        void *ret = NULL;

        assert_int_equal(pthread_join(t[i], &ret), 0);
        assert_ptr_equal(ret, &t[i]);
    }
}

static void on_usr2(int sig)
{
    (void)sig;
}

static void test_the_real_sigaction_sets_and_reads_the_action(void **state)
{
    struct sigaction sa, old, now;

    (void)state;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr2;
    (void)sigemptyset(&sa.sa_mask);
    assert_int_equal(rt_real_sigaction(SIGUSR2, &sa, &old), 0);
    assert_int_equal(sigaction(SIGUSR2, NULL, &now), 0);
    assert_ptr_equal(now.sa_handler, on_usr2);
    assert_int_equal(rt_libc_sigaction(SIGUSR2, &old, &now), 0);
    assert_ptr_equal(now.sa_handler, on_usr2);
    assert_int_equal(sigaction(SIGUSR2, NULL, &now), 0);
    assert_ptr_equal(now.sa_handler, old.sa_handler);
    assert_int_equal(rt_real_sigaction(0, &sa, NULL), -1);
    assert_int_equal(errno, EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_the_runtimes_own_threads_make_no_malloc_arena),
            cmocka_unit_test_setup(test_a_protected_descriptor_is_ours_and_intact_until_unprotected,
                                   setup),
            cmocka_unit_test_setup(test_a_descriptor_replaced_by_dup2_is_no_longer_intact, setup),
            cmocka_unit_test_setup(test_kept_descriptors_are_released_on_request, setup),
            cmocka_unit_test_setup(
                    test_relocate_moves_a_descriptor_into_the_band_where_it_still_works, setup),
            cmocka_unit_test_setup(test_the_band_follows_a_lowered_descriptor_limit, setup),
            cmocka_unit_test_setup(test_own_in_lists_our_descriptors_in_a_range_in_order, setup),
            cmocka_unit_test_setup(test_a_capture_keeps_the_runtimes_pipes_off_the_standard_numbers,
                                   setup),
            cmocka_unit_test_setup(test_a_forked_child_forgets_all_but_the_kept_descriptors, setup),
            cmocka_unit_test_setup(test_the_programs_calls_wait_for_a_setup_on_another_thread,
                                   setup),
            cmocka_unit_test_setup(test_the_wait_ends_when_the_setup_does, setup),
            cmocka_unit_test_setup(test_the_runtimes_own_threads_block_every_signal, setup),
            cmocka_unit_test_setup(test_the_real_sigaction_sets_and_reads_the_action, setup),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
