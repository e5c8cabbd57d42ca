/* Unit tests for daemon/pace: a quiet loop is never slowed; a busy one reads what arrived
 * meanwhile in one wake-up, at most two rounds per pace, and loses nothing. */
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "daemon/pace.h"
#include "testlib.h"

#define PACE_NS (20ull * 1000 * 1000)

struct quiet {
    uv_timer_t timer;
    int fired;
};

static void on_quiet_timer(uv_timer_t *t)
{
    struct quiet *q = t->data;

    if (++q->fired == 5)
        uv_timer_stop(t);
}

static void test_quiet_loop_never_sleeps(void **state)
{
    uv_loop_t loop;
    struct loop_pace *p;
    struct quiet q = {0};
    struct loop_pace_stats st;

    (void)state;
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(loop_pace_new(&loop, PACE_NS, &p), 0);
    /* Events further apart than the pace: each is handled as it comes. */
    assert_int_equal(uv_timer_init(&loop, &q.timer), 0);
    q.timer.data = &q;
    assert_int_equal(uv_timer_start(&q.timer, on_quiet_timer, 50, 50), 0);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    st = loop_pace_stats(p);
    assert_int_equal(q.fired, 5);
    assert_true(st.rounds >= 5);
    assert_int_equal(st.sleeps, 0);
    uv_close((uv_handle_t *)&q.timer, NULL);
    loop_pace_close(p);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

#define BYTES 2000

struct busy {
    uv_pipe_t pipe;
    int writer_fd;
    size_t received;
    uint64_t first_ns, last_ns;
};

static void *writer_main(void *arg)
{
    struct busy *b = arg;
    const struct timespec gap = {0, 100 * 1000};

    for (int i = 0; i < BYTES; i++) {
        char c = (char)i;

        if (write(b->writer_fd, &c, 1) != 1)
            break;
        (void)nanosleep(&gap, NULL);
    }
    return NULL;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    static char mem[4096];

    (void)h;
    (void)suggested;
    *buf = uv_buf_init(mem, sizeof(mem));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct busy *b = s->data;

    (void)buf;
    if (n < 0) {
        uv_read_stop(s);
        return;
    }
    if (!b->first_ns)
        b->first_ns = uv_hrtime();
    b->received += (size_t)n;
    b->last_ns = uv_hrtime();
    if (b->received >= BYTES)
        uv_read_stop(s);
}

static void test_busy_loop_reads_in_batches(void **state)
{
    uv_loop_t loop;
    struct loop_pace *p;
    struct busy b = {0};
    struct loop_pace_stats st;
    pthread_t writer;
    int sv[2];
    double paces;

    (void)state;
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    b.writer_fd = sv[1];
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(loop_pace_new(&loop, PACE_NS, &p), 0);
    assert_int_equal(uv_pipe_init(&loop, &b.pipe, 0), 0);
    assert_int_equal(uv_pipe_open(&b.pipe, sv[0]), 0);
    b.pipe.data = &b;
    assert_int_equal(uv_read_start((uv_stream_t *)&b.pipe, on_alloc, on_read), 0);
    assert_int_equal(pthread_create(&writer, NULL, writer_main, &b), 0);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(pthread_join(writer, NULL), 0);
    st = loop_pace_stats(p);

    /* Nothing lost, and the loop went round at most twice a pace while bytes kept coming
     * (a paced round, then one for what came during its reading), where unpaced it would
     * wake for nearly every byte. */
    assert_int_equal(b.received, BYTES);
    assert_true(st.sleeps >= 1);
    paces = (double)(b.last_ns - b.first_ns) / (double)PACE_NS;
    if ((double)st.rounds > 2 * paces + 4)
        fail_msg("%llu rounds over %.1f paces", (unsigned long long)st.rounds, paces);

    uv_close((uv_handle_t *)&b.pipe, NULL);
    loop_pace_close(p);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
    (void)close(sv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_quiet_loop_never_sleeps),
            cmocka_unit_test(test_busy_loop_reads_in_batches),
    };
    return cmocka_run_group_tests_name("daemon-pace", tests, NULL, NULL);
}
