/* daemon/pace.c - batching a busy loop's wake-ups (pace.h).
 *
 * libuv runs prepare handles just before it polls and check handles just after the I/O
 * callbacks of that poll. The check notes when each round ended; the prepare sleeps, before
 * the next poll, until one pace after the previous round's end when that round came less
 * than a pace after the one before (the loop is busy). A round that had to wait longer for
 * its events ends the pacing until the loop is busy again.
 */
#include "daemon/pace.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

struct loop_pace {
    uv_prepare_t prepare;
    uv_check_t check;
    uint64_t pace_ns;
    uint64_t last_end_ns; /* when the last round's I/O callbacks were done; 0 = none yet */
    bool busy;            /* the last round came within a pace of the one before */
    int open_handles;
    struct loop_pace_stats stats;
};

static void on_check(uv_check_t *handle)
{
    struct loop_pace *p = handle->data;
    uint64_t now = uv_hrtime();

    p->busy = p->last_end_ns && now - p->last_end_ns < p->pace_ns;
    p->last_end_ns = now;
    p->stats.rounds++;
}

static void on_prepare(uv_prepare_t *handle)
{
    struct loop_pace *p = handle->data;
    uint64_t elapsed, rest;
    struct timespec ts;

    if (!p->busy)
        return;
    elapsed = uv_hrtime() - p->last_end_ns;
    if (elapsed >= p->pace_ns)
        return;
    rest = p->pace_ns - elapsed;
    ts.tv_sec = (time_t)(rest / 1000000000u);
    ts.tv_nsec = (long)(rest % 1000000000u);
    /* A signal cuts the sleep short: the loop then polls a little early, which is harmless. */
    (void)nanosleep(&ts, NULL);
    p->stats.sleeps++;
    p->stats.slept_ns += rest;
}

int loop_pace_new(uv_loop_t *loop, uint64_t pace_ns, struct loop_pace **ret)
{
    struct loop_pace *p;
    int r;

    if (!loop || !pace_ns || !ret)
        return -EINVAL;
    p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->pace_ns = pace_ns;
    r = uv_prepare_init(loop, &p->prepare);
    if (r < 0) {
        free(p);
        return r;
    }
    r = uv_check_init(loop, &p->check);
    if (r < 0) {
        /* The prepare handle is initialised: libuv must close it before p goes. */
        p->open_handles = 1;
        loop_pace_close(p);
        return r;
    }
    p->open_handles = 2;
    p->prepare.data = p;
    p->check.data = p;
    (void)uv_prepare_start(&p->prepare, on_prepare);
    (void)uv_check_start(&p->check, on_check);
    uv_unref((uv_handle_t *)&p->prepare);
    uv_unref((uv_handle_t *)&p->check);
    *ret = p;
    return 0;
}

static void on_closed(uv_handle_t *handle)
{
    struct loop_pace *p = handle->data;

    if (--p->open_handles == 0)
        free(p);
}

void loop_pace_close(struct loop_pace *p)
{
    if (!p)
        return;
    p->prepare.data = p;
    p->check.data = p;
    uv_close((uv_handle_t *)&p->prepare, on_closed);
    if (p->open_handles == 2)
        uv_close((uv_handle_t *)&p->check, on_closed);
}

struct loop_pace_stats loop_pace_stats(const struct loop_pace *p)
{
    return p ? p->stats : (struct loop_pace_stats){0};
}
