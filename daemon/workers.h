/* daemon/workers.h - the daemon's second floor: a few threads for the heavy work of one
 * child (rebuilding a killed child's profile from its region, building a short-lived child's
 * exit profile), so that the loop keeps serving the fleet meanwhile.
 *
 * A job is run on a worker thread with that thread's scratch (its image buffer), then
 * finished on the loop thread. The workers share one symbol cache, the pool's own (apart from
 * the loop's: a worker may hold it for a whole profile's frames, the loop must never wait),
 * under a lock. The pool knows nothing of connections: a job carries what it needs and owns
 * it.
 */
#ifndef FLEETPROF_DAEMON_WORKERS_H
#define FLEETPROF_DAEMON_WORKERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

struct prof_symbolizer;
struct prof_symbols_stats;
struct daemon_workers;

/* One worker thread's own things, kept from job to job. */
struct worker_scratch {
    struct daemon_workers *pool;
    uint8_t *image; /* a region's compact copy (recover.c), grown as needed */
    size_t image_cap;
};

struct worker_job {
    /* On a worker thread: everything but the loop's data. */
    void (*run)(struct worker_job *job, struct worker_scratch *scratch);
    /* On the loop thread, once: ran is false for a job cancelled before it ran
     * (workers_close()). May free job. */
    void (*done)(struct worker_job *job, bool ran);
    struct worker_job *next; /* the pool's */
};

/* threads workers (1..16) for loop, their symbol cache bounded by symbols_limit_bytes; 0 or
 * a negative errno (threads and the cache are made on first use). */
int workers_new(uv_loop_t *loop, unsigned threads, size_t symbols_limit_bytes,
                struct daemon_workers **ret);

/* Queues job; it runs on the first free worker. Never fails: a pool that cannot make a
 * thread runs the job on the loop, at once (as before there was a pool). */
void workers_submit(struct daemon_workers *w, struct worker_job *job);

/* Jobs submitted and not yet done. */
size_t workers_busy(const struct daemon_workers *w);

/* Ends the pool: queued jobs are done with ran false, running ones are waited for and done
 * with ran true, all before it returns; closed calls back (on the loop) once the pool's
 * handle is closed and its memory freed. */
void workers_close(struct daemon_workers *w, void (*closed)(void *userdata), void *userdata);

/* A symbolizer over the pool's cache (for a job's profile writer; each call holds the lock). */
void worker_symbolizer(struct worker_scratch *s, struct prof_symbolizer *ret);

/* What the pool's cache has loaded (from the loop, under the lock: a moment). */
void workers_symbols_stats(struct daemon_workers *w, struct prof_symbols_stats *ret);

#endif /* FLEETPROF_DAEMON_WORKERS_H */
