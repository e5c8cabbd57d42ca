/* daemon/workers.c - the daemon's worker threads (see workers.h).
 *
 * A queue under one lock, a condition for the workers, and a uv_async_t that wakes the loop
 * for what they finished. Workers block every signal: fleetprofd's SIGTERM and SIGINT are the
 * loop's (uv_signal_t).
 */
#include "daemon/workers.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#include "profile/gecko.h"
#include "profile/symbolize-local.h"
#include "profile/symbols.h"

#define WORKERS_MAX 16

struct worker_thread {
    struct daemon_workers *pool;
    pthread_t thread;
    struct worker_scratch scratch; /* the thread's own, freed as it ends */
};

struct daemon_workers {
    uv_loop_t *loop;
    uv_async_t async; /* a worker finished a job */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct worker_job *queue, *queue_last;       /* under lock: waiting for a worker */
    struct worker_job *finished, *finished_last; /* under lock: run, waiting for done */
    bool stopping;                               /* under lock */
    size_t busy;                                 /* loop only: submitted, not yet done */
    unsigned threads, started;                   /* loop only */
    struct worker_thread t[WORKERS_MAX];
    struct worker_scratch loop_scratch; /* for jobs run on the loop when no thread could start */
    pthread_mutex_t symbols_lock;       /* guards symbols and every use of it */
    struct prof_symbols *symbols;       /* the workers' cache, made on first use */
    size_t symbols_limit;
    void (*closed)(void *userdata);
    void *closed_userdata;
};

/* Freed heap a process running workers keeps for their next builds (see workers_new()). */
#define WORKERS_KEPT_HEAP_BYTES (32 << 20)

static void scratch_free(struct worker_scratch *s)
{
    free(s->image);
    s->image = NULL;
    s->image_cap = 0;
}

/* Resolves under the pool's lock. The strings stay valid after it is released: the cache
 * interns them until it is freed (symbols.h), even when another worker evicts their module. */
static int resolve_shared(void *userdata, const struct prof_frame_request *requests, size_t count,
                          struct prof_frame_result *results)
{
    struct daemon_workers *w = userdata;
    struct prof_symbols_options o = {.memory_limit_bytes = w->symbols_limit};
    struct prof_symbolizer local;
    int r = 0;

    (void)pthread_mutex_lock(&w->symbols_lock);
    if (!w->symbols)
        r = prof_symbols_new_with_options(&o, &w->symbols);
    if (r == 0) {
        local = prof_symbolizer_local(w->symbols);
        r = local.resolve(local.userdata, requests, count, results);
    }
    (void)pthread_mutex_unlock(&w->symbols_lock);
    return r;
}

void worker_symbolizer(struct worker_scratch *s, struct prof_symbolizer *ret)
{
    *ret = (struct prof_symbolizer){resolve_shared, s->pool};
}

void workers_symbols_stats(struct daemon_workers *w, struct prof_symbols_stats *ret)
{
    *ret = (struct prof_symbols_stats){0};
    if (!w)
        return;
    (void)pthread_mutex_lock(&w->symbols_lock);
    if (w->symbols)
        prof_symbols_get_stats(w->symbols, ret);
    (void)pthread_mutex_unlock(&w->symbols_lock);
}

static void append(struct worker_job **first, struct worker_job **last, struct worker_job *job)
{
    job->next = NULL;
    if (*last)
        (*last)->next = job;
    else
        *first = job;
    *last = job;
}

static void *worker_main(void *arg)
{
    struct worker_thread *t = arg;
    struct daemon_workers *w = t->pool;

    (void)pthread_mutex_lock(&w->lock);
    for (;;) {
        struct worker_job *job;

        while (!w->queue && !w->stopping)
            (void)pthread_cond_wait(&w->wake, &w->lock);
        if (!w->queue)
            break; /* stopping, and nothing left to take */
        job = w->queue;
        w->queue = job->next;
        if (!w->queue)
            w->queue_last = NULL;
        (void)pthread_mutex_unlock(&w->lock);
        job->run(job, &t->scratch);
        (void)pthread_mutex_lock(&w->lock);
        append(&w->finished, &w->finished_last, job);
        (void)uv_async_send(&w->async);
        if (w->stopping)
            break; /* what is still queued is cancelled by workers_close() */
    }
    (void)pthread_mutex_unlock(&w->lock);
    scratch_free(&t->scratch);
    return NULL;
}

/* Runs done for every finished job (loop thread). */
static void finish_jobs(struct daemon_workers *w)
{
    struct worker_job *job;

    (void)pthread_mutex_lock(&w->lock);
    job = w->finished;
    w->finished = w->finished_last = NULL;
    (void)pthread_mutex_unlock(&w->lock);
    while (job) {
        struct worker_job *next = job->next;

        if (--w->busy == 0)
            uv_unref((uv_handle_t *)&w->async);
        job->done(job, true);
        job = next;
    }
}

static void on_async(uv_async_t *async)
{
    finish_jobs(async->data);
}

int workers_new(uv_loop_t *loop, unsigned threads, size_t symbols_limit_bytes,
                struct daemon_workers **ret)
{
    struct daemon_workers *w;
    int r;

    if (!loop || threads == 0 || threads > WORKERS_MAX || !ret)
        return -EINVAL;
    /* A build allocates and frees a few MiB on its worker's arena, chunk-sized blocks among
     * them. By default glibc maps such blocks afresh (mmap) or gives the freed top back at
     * once (madvise), and the next build faults the same memory in again: for a short-lived
     * process's exit profile, more page faults than work. Blocks up to that size come from
     * the arena instead, and freed memory up to WORKERS_KEPT_HEAP_BYTES stays for the next
     * build. */
    (void)mallopt(M_MMAP_THRESHOLD, WORKERS_KEPT_HEAP_BYTES / 8);
    (void)mallopt(M_TRIM_THRESHOLD, WORKERS_KEPT_HEAP_BYTES);
    w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->loop = loop;
    w->threads = threads;
    w->symbols_limit = symbols_limit_bytes;
    w->loop_scratch.pool = w;
    for (unsigned i = 0; i < threads; i++)
        w->t[i].scratch.pool = w;
    (void)pthread_mutex_init(&w->symbols_lock, NULL);
    (void)pthread_mutex_init(&w->lock, NULL);
    (void)pthread_cond_init(&w->wake, NULL);
    r = uv_async_init(loop, &w->async, on_async);
    if (r < 0) {
        (void)pthread_cond_destroy(&w->wake);
        (void)pthread_mutex_destroy(&w->lock);
        (void)pthread_mutex_destroy(&w->symbols_lock);
        free(w);
        return r;
    }
    w->async.data = w;
    uv_unref((uv_handle_t *)&w->async); /* an idle pool keeps no loop alive; a busy one does */
    *ret = w;
    return 0;
}

/* One more worker, with every signal blocked (the mask is inherited). */
static bool start_thread(struct daemon_workers *w)
{
    struct worker_thread *t = &w->t[w->started];
    sigset_t all, old;
    int r;

    t->pool = w;
    (void)sigfillset(&all);
    (void)pthread_sigmask(SIG_SETMASK, &all, &old);
    r = pthread_create(&t->thread, NULL, worker_main, t);
    (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0)
        return false;
    w->started++;
    return true;
}

void workers_submit(struct daemon_workers *w, struct worker_job *job)
{
    if (w->busy++ == 0)
        uv_ref((uv_handle_t *)&w->async);
    /* A thread per job in flight, up to the pool's size. */
    if (w->started < w->threads && w->busy > w->started)
        (void)start_thread(w);
    if (w->started == 0) {
        job->run(job, &w->loop_scratch);
        if (--w->busy == 0)
            uv_unref((uv_handle_t *)&w->async);
        job->done(job, true);
        return;
    }
    (void)pthread_mutex_lock(&w->lock);
    append(&w->queue, &w->queue_last, job);
    (void)pthread_cond_signal(&w->wake);
    (void)pthread_mutex_unlock(&w->lock);
}

size_t workers_busy(const struct daemon_workers *w)
{
    return w ? w->busy : 0;
}

static void on_closed(uv_handle_t *handle)
{
    struct daemon_workers *w = handle->data;
    void (*closed)(void *) = w->closed;
    void *userdata = w->closed_userdata;

    scratch_free(&w->loop_scratch);
    w->symbols = prof_symbols_free(w->symbols);
    (void)pthread_cond_destroy(&w->wake);
    (void)pthread_mutex_destroy(&w->lock);
    (void)pthread_mutex_destroy(&w->symbols_lock);
    free(w);
    if (closed)
        closed(userdata);
}

void workers_close(struct daemon_workers *w, void (*closed)(void *userdata), void *userdata)
{
    struct worker_job *cancelled;

    (void)pthread_mutex_lock(&w->lock);
    w->stopping = true;
    cancelled = w->queue;
    w->queue = w->queue_last = NULL;
    (void)pthread_cond_broadcast(&w->wake);
    (void)pthread_mutex_unlock(&w->lock);
    /* A running job ends on its own: its copy and build are bounded by the region's size. */
    for (unsigned i = 0; i < w->started; i++)
        (void)pthread_join(w->t[i].thread, NULL);
    w->started = 0;
    finish_jobs(w);
    while (cancelled) {
        struct worker_job *next = cancelled->next;

        if (--w->busy == 0)
            uv_unref((uv_handle_t *)&w->async);
        cancelled->done(cancelled, false);
        cancelled = next;
    }
    w->closed = closed;
    w->closed_userdata = userdata;
    uv_close((uv_handle_t *)&w->async, on_closed);
}
