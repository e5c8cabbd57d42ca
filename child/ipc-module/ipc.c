/* child/ipc-module/ipc.c - the runtime's IPC thread: this process's side of the daemon protocol.
 *
 * Built into libfleetprof-ipc.so (child/core/ipc-module.h), not into libfleetprof.so: the core
 * loads it when a process first needs the daemon, and it calls the core only through the
 * table the core gives it (core->...); client.c forwards child/client/client.h's rt_ipc_* here.
 *
 * A private libuv loop on its own thread (never the program's loop, which may be libuv's
 * default one). It connects to FLEETPROF_SOCKET, says Hello, applies the Welcome
 * (interval, buffer limit, the daemon's clock reference), then serves the daemon:
 *   - AwaitNextChunkManagerUpdate: answered with the folded update as soon as there is
 *     one (long poll). The core owns the updates (child/core/updates.c): the chunk
 *     manager's changes fold into its slot, and its tick wakes this thread (wake) when one
 *     is to be sent by message. A standing poll is answered by every update from then on,
 *     without a new poll per update, paced by buf_update_pace: held for more, and never
 *     sent while the daemon has not read the previous one (the slot folds meanwhile and a
 *     timer, backing off, looks again);
 *   - DestroyReleasedChunksAtOrBefore: applied to the buffer at once; the change it makes
 *     goes with the next update, it does not make one of its own. A daemon that took our
 *     chunk region (Welcome's region_evictions) writes its evictions into the region's
 *     header instead, and the core's tick applies them the same way;
 *   - Stop/Start/Pause/Resume: sampling paused or resumed, then acknowledged.
 * Performance groups: when their totals changed or the process ran, at most once per
 * GROUP_STATS_PERIOD_NS, the sampler's tick wakes this thread, which sends the cumulative
 * totals (GroupStats) with the time they were read; a process that never uses a group
 * sends none and is never woken for them.
 * At exit it sends its last GroupStats (final), its exit profile, then a Final update, and
 * waits (bounded) for them to leave. Without a daemon,
 * or when it goes away, the process simply keeps profiling on its own.
 */
#include "ipc/ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "buffer/leb128.h"
#include "buffer/progress.h"
#include "buffer/region-updates.h"
#include "buffer/update.h"
#include "child/core/ipc-module.h"
#include "common/grow.h"
#include "ipc/socket-trust.h"
#include "ipc/uv-ipc.h"
#include "profile/groups.h"
#include "proto/fleetprof-protocol.h"

#define EXIT_WAIT_NS          (2ull * 1000 * 1000 * 1000) /* design: bounded wait at exit */
/* GroupStats at most this often: `top` rates over windows between reports, a quarter of a
 * second at its shortest usual interval. A message of a few hundred bytes per group. */
#define GROUP_STATS_PERIOD_NS (250ull * 1000 * 1000)
#define GROUP_STATS_CPU_NS    (1000ull * 1000) /* process CPU that is worth one: more than ours */
#define RECONNECT_DELAY_NS    (100ull * 1000 * 1000) /* after the program took a descriptor */
/* The core's functions (ipc-load.c): set once by module_init(), before anything else. */
static const struct rt_ipc_core *core;

static struct {
    uv_loop_t loop;
    uv_async_t wake;
    uv_timer_t update_retry; /* a held-back update (standing poll) looks again */
    uv_timer_t update_hold;  /* a held update's time is up */
    struct ipc_conn *conn;   /* IPC thread only */
    pthread_t thread;
    bool thread_started;
    bool loop_ready;           /* loop and wake initialised (for the fork child) */
    _Atomic int connected;     /* welcomed: settings applied */
    _Atomic int linked;        /* the socket is open (Hello sent): exit profiles can go */
    _Atomic int exiting;       /* send Final and close */
    _Atomic int start_pending; /* client_start() deferred the connection (ipc-start.h) */
    /* A tick makes that connection no sooner than this (CLOCK_MONOTONIC ns; 0: at once):
     * after the program took a descriptor of ours, its sweep over the table is let finish
     * first, else our new descriptors land just ahead of it, and are taken again. */
    _Atomic uint64_t start_not_before_ns;
    _Atomic int region_accepted; /* Welcome.exit_in_region: the daemon builds it if asked */
    _Atomic int exit_in_region;  /* the exit profile is in the region: the Final says so */
    /* Welcome.updates_in_region: the sampler's tick publishes changes in our region's update
     * ring (child/core/updates.c); only a Final goes by message. IPC thread only. */
    bool updates_in_region;
    bool defer_start; /* the next client_start() defers: set after a fork */
    /* The light connection (light_start()): Hello sent from the thread that started, no IPC
     * thread nor loop until the connection needs them (light_promote()). Under light_lock. */
    bool light;
    int light_fd;
    uid_t light_uid;
    bool hello_sent;         /* by light_start(): the IPC thread does not say it again */
    _Atomic int light_needs; /* something for the IPC thread (a wake while light) */
    /* A forked child's connection, made as the user it was born as (connect_early(): in
     * its fork handler when its parent has no connection to name it by, else before it
     * changes its user ids), for its first client_start() to adopt. */
    bool early;
    int early_fd;
    uid_t early_uid;
    /* A forked child of a connected process: it connects (to socket_path, kept across the
     * fork's reset) before it first changes its user ids. Tested unlocked by every call. */
    _Atomic bool connect_before_credentials;
    uint64_t poll_id;            /* IPC thread only: outstanding poll, 0 = none */
    bool poll_standing;          /* IPC thread only: poll_id stays outstanding once answered */
    struct buf_update_pace pace; /* IPC thread only: hold and retry (buffer/update.h) */
    uint64_t next_id;
    char socket_path[4096];
    struct rt_ipc_hooks hooks; /* the layers above: profile writer, pause, resume */
    pthread_mutex_t done_lock;
    pthread_cond_t done_cond;
    bool done;

    /* Gathering: a gather thread writes the profile while this thread answers progress
     * polls from the cell; the finished JSON waits in the outbox for this thread. */
    struct progress_cell progress;
    _Atomic int gathering;       /* a gather thread is running or its data is streaming */
    pthread_mutex_t outbox_lock; /* guards the outbox */
    struct outgoing *outbox;     /* owned JSON, or NULL */
    uint64_t outbox_id;          /* GatherProfile id; the pid for the exit profile */
    bool outbox_exit;
    bool outbox_ready;
    int outbox_error;
    uint64_t gather_id;   /* gather thread's request (set before it starts) */
    uint64_t gather_next; /* IPC thread only: a request that came while one was running (the
                           * daemon gave up on that one: a failed capture), 0 = none */
    bool exit_streaming;  /* IPC thread: the exit profile is on its way */

    /* Performance groups: the sampler asks (groups_pending), this thread sends. */
    _Atomic int groups_pending; /* set by the sampler's tick, taken by the IPC thread */
    uint64_t groups_gen_asked;  /* sampler only: core->groups_generation() when it last asked */
    uint64_t groups_asked_ns;   /* sampler only: when it last asked (CLOCK_MONOTONIC) */
    uint64_t groups_cpu_asked;  /* sampler only: the process's CPU time then */
    bool groups_final_sent;     /* IPC thread only: nothing may follow the final GroupStats */

    /* Symbolization: a profile writer posts a batch and waits; this thread sends it and
     * fills it from the Symbols reply (rt_ipc_symbolize). */
    pthread_mutex_t sym_serial; /* one batch at a time (gather and exit may overlap) */
    pthread_mutex_t sym_lock;   /* guards sym, sym_sent, sym_id and the posted batch */
    pthread_cond_t sym_cond;    /* CLOCK_MONOTONIC; signalled when the batch is done */
    struct rt_symbol_batch *sym;
    bool sym_sent;
    uint64_t sym_id;
} ipc;

/* Processes the program started (fork, posix_spawn), for the next Spawned (any thread adds,
 * the sampler's tick sends them or wakes the IPC thread to). Not in ipc: it outlives a reset
 * of that. */
#define SPAWNED_MAX 256
static pthread_mutex_t spawned_lock = PTHREAD_MUTEX_INITIALIZER;
static int32_t spawned_pids[SPAWNED_MAX];
static size_t spawned_count;

/* Held while the IPC thread is woken and while an abandoned loop is taken apart: a wake
 * writes to the loop's eventfd, which by then may be closed (libuv aborts the process on
 * that) or the program's own file. Not in ipc: it outlives a reset of that. */
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;

/* Held by whoever reads, promotes or ends a light connection (ipc.light...): the sampler's
 * tick, the exit path, a symbolization, an abandon. Not in ipc: it outlives a reset of that. */
static pthread_mutex_t light_lock = PTHREAD_MUTEX_INITIALIZER;

/* Wakes the IPC thread if its loop is live and its eventfd still ours; else the sampler's
 * next check of the descriptors (runtime.c) finds what was lost. */
static void wake_ipc(void)
{
    atomic_store(&ipc.light_needs, 1); /* a light connection starts its thread for it */
    (void)pthread_mutex_lock(&wake_lock);
    if (ipc.loop_ready && core->fd_intact(ipc.loop.async_wfd >= 0 ? ipc.loop.async_wfd
                                                                  : ipc.loop.async_io_watcher.fd))
        (void)uv_async_send(&ipc.wake);
    (void)pthread_mutex_unlock(&wake_lock);
}

static void client_start_deferred(void);
static bool light_read(void);
static int light_promote(void);
static void light_wait_welcome(void);
static void light_send_spawned(void);

static bool spawned_waiting(void)
{
    size_t n;

    (void)pthread_mutex_lock(&spawned_lock);
    n = spawned_count;
    (void)pthread_mutex_unlock(&spawned_lock);
    return n > 0 && atomic_load(&ipc.linked);
}

static void client_tick(void)
{
    uint64_t gen = core->groups_generation();

    if (atomic_load_explicit(&ipc.start_pending, memory_order_relaxed) &&
        core->now_ns() >= atomic_load(&ipc.start_not_before_ns))
        client_start_deferred();
    /* A light connection: the Welcome, the poll, and whether it needs its thread now (a
     * wake-up while light, at an earlier tick, says so too). */
    (void)pthread_mutex_lock(&light_lock);
    if (ipc.light && (light_read() || atomic_load(&ipc.light_needs)))
        (void)light_promote();
    if (ipc.light)
        light_send_spawned();
    else if (spawned_waiting())
        wake_ipc(); /* one wake-up a tick for the pids started since, not one a fork */
    (void)pthread_mutex_unlock(&light_lock);
    /* Totals changed, or the process ran (the daemon's fleet CPU is the process CPU these
     * carry, and it takes a process that sends nothing for a quiet one): one wake-up per
     * period at most, and none while no group is used (the generation stays 0). */
    if (gen != 0 && atomic_load(&ipc.connected)) {
        uint64_t now = core->now_ns();

        if (ipc.groups_asked_ns == 0 || now - ipc.groups_asked_ns >= GROUP_STATS_PERIOD_NS) {
            struct timespec ts;
            uint64_t cpu;

            (void)clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
            cpu = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
            if (gen != ipc.groups_gen_asked || cpu - ipc.groups_cpu_asked >= GROUP_STATS_CPU_NS) {
                ipc.groups_gen_asked = gen;
                ipc.groups_cpu_asked = cpu;
                ipc.groups_asked_ns = now;
                atomic_store(&ipc.groups_pending, 1);
                wake_ipc();
            }
        }
    }
}

static int send_env(Fleetprof__Envelope *env)
{
    return ipc.conn ? ipc_conn_send(ipc.conn, env) : -ENOTCONN;
}

static void flush_update(void);

static void on_update_retry(uv_timer_t *timer)
{
    (void)timer;
    flush_update();
}

/* Under a standing poll: whether the daemon read the previous update (and whatever went
 * before it). If not, the slot keeps folding and update_retry looks again later. */
static bool daemon_caught_up(void)
{
    int r = ipc_conn_peer_caught_up(ipc.conn);

    if (r != 0) /* read, or cannot tell: the send reports a broken connection */
        return true;
    if (!uv_is_active((uv_handle_t *)&ipc.update_retry)) {
        (void)uv_timer_start(&ipc.update_retry, on_update_retry, buf_update_pace_retry(&ipc.pace),
                             0);
    }
    return false;
}

/* Whether the slot's update waits for more (the hold: buffer/update.h); update_hold looks
 * again when its time is up. */
static bool hold_update(void)
{
    size_t released;
    uint64_t unreleased, wait_ns;
    enum buf_update_kind kind = core->updates_peek(&released, &unreleased);

    if (!buf_update_pace_hold(&ipc.pace, ipc.poll_standing, atomic_load(&ipc.exiting), kind,
                              released, unreleased, core->now_ns(), &wait_ns))
        return false;
    if (!uv_is_active((uv_handle_t *)&ipc.update_hold))
        (void)uv_timer_start(&ipc.update_hold, on_update_retry, (wait_ns + 999999) / 1000000, 0);
    return true;
}

/* Changes go through the region (the sampler's tick publishes them), only a Final by
 * message: a change sent here could overtake older chunks still waiting for room in the
 * ring, and the daemon refuses chunks out of order. */
static bool changes_go_through_region(void)
{
    size_t released;
    uint64_t unreleased;

    return ipc.updates_in_region && core->updates_peek(&released, &unreleased) != BUF_UPDATE_FINAL;
}

/* Answers the outstanding poll with whatever the slot holds. */
static void flush_update(void)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__ChunkManagerUpdate msg = FLEETPROF__CHUNK_MANAGER_UPDATE__INIT;
    Fleetprof__ChunkMetadata *items = NULL, **ptrs = NULL;
    struct buf_update u;

    if (!ipc.poll_id || !ipc.conn || changes_go_through_region() ||
        (ipc.poll_standing && !daemon_caught_up()) || hold_update())
        return;
    if (!core->updates_take(&u))
        return;
    if (u.newly_released_count) {
        items = calloc(u.newly_released_count, sizeof(*items));
        ptrs = calloc(u.newly_released_count, sizeof(*ptrs));
        if (!items || !ptrs) {
            /* Keep it for the next attempt rather than lose released chunks. */
            core->updates_put_back(&u);
            free(items);
            free(ptrs);
            buf_update_done(&u);
            return;
        }
    }
    for (size_t i = 0; i < u.newly_released_count; i++) {
        fleetprof__chunk_metadata__init(&items[i]);
        items[i].done_ns = u.newly_released[i].done_ns;
        items[i].bytes = u.newly_released[i].bytes;
        ptrs[i] = &items[i];
    }
    msg.request_id = ipc.poll_id;
    msg.final = u.kind == BUF_UPDATE_FINAL;
    msg.unreleased_bytes = u.unreleased_bytes;
    msg.released_bytes = u.released_bytes;
    msg.oldest_done_ns = u.oldest_done_ns;
    msg.n_newly_released = u.newly_released_count;
    msg.newly_released = ptrs;
    msg.standing = ipc.poll_standing;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_CHUNK_MANAGER_UPDATE;
    env.chunk_manager_update = &msg;
    if (send_env(&env) == 0) {
        if (!ipc.poll_standing)
            ipc.poll_id = 0;
        buf_update_pace_sent(&ipc.pace, u.unreleased_bytes);
    }
    free(items);
    free(ptrs);
    buf_update_done(&u);
}

static int send_env(Fleetprof__Envelope *env);

static int send_env_light(Fleetprof__Envelope *env)
{
    return ipc_socket_send_frame(ipc.light_fd, env, -1) > 0 ? 0 : -EIO;
}

/* Sends every measured group's cumulative totals, through send (the connection's loop, or
 * a light connection's socket); final marks the last one (at exit). Nothing when no group
 * was ever used, or after the final one. */
static void send_group_stats_by(bool final, int (*send)(Fleetprof__Envelope *))
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__GroupStats msg = FLEETPROF__GROUP_STATS__INIT;
    Fleetprof__GroupTotals *items = NULL, **ptrs = NULL;
    struct prof_group_totals *t = NULL;
    struct timespec cpu;
    size_t n;

    if (ipc.groups_final_sent || core->groups_generation() == 0)
        return;
    n = core->groups_snapshot(&t);
    /* Read right after the totals: the daemon divides by it for the process's share, and
     * takes the totals as of this time. */
    (void)clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
    msg.time_ns = core->now_ns();
    if (n == 0)
        goto out;
    items = calloc(n, sizeof(*items));
    ptrs = calloc(n, sizeof(*ptrs));
    if (!items || !ptrs)
        goto out; /* the next change, or the final one, carries them */
    for (size_t i = 0; i < n; i++) {
        Fleetprof__GroupTotals *g = &items[i];

        fleetprof__group_totals__init(g);
        g->name = (char *)t[i].name;
        g->cpu_ns = t[i].cpu_ns;
        g->cycles = t[i].cycles;
        g->activations = t[i].activations;
        g->events = t[i].events;
        g->worst_event_ns = t[i].worst_event_ns;
        g->slow_events = t[i].slow_events;
        g->discarded = t[i].discarded;
        g->migrated = t[i].migrated;
        g->stale = t[i].stale;
        g->n_durations = PROF_GROUP_BUCKETS;
        g->durations = t[i].durations;
        ptrs[i] = g;
    }
    msg.id = ++ipc.next_id;
    msg.process_cpu_ns = (uint64_t)cpu.tv_sec * 1000000000u + (uint64_t)cpu.tv_nsec;
    {
        struct rt_hello_info hi;

        core->hello_info(&hi);
        msg.slow_event_ns = hi.slow_event_ns;
    }
    msg.n_groups = n;
    msg.groups = ptrs;
    msg.final = final;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_GROUP_STATS;
    env.group_stats = &msg;
    if (send(&env) == 0 && final)
        ipc.groups_final_sent = true;
out:
    free(items);
    free(ptrs);
    free(t);
}

static void send_group_stats(bool final)
{
    if (ipc.conn)
        send_group_stats_by(final, send_env);
}

static void send_ack(uint64_t id)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Ack ack = FLEETPROF__ACK__INIT;

    ack.request_id = id;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_ACK;
    env.ack = &ack;
    (void)send_env(&env);
}

static void apply_welcome(const Fleetprof__Welcome *w)
{
    struct rt_welcome settings = {
            .interval_ns = w->interval_ns,
            .process_limit_bytes = w->process_limit_bytes,
            .clock_epoch_ms = w->clock ? w->clock->epoch_ms : 0,
            .clock_monotonic_ns = w->clock ? w->clock->monotonic_ns : 0,
            .exec_cpu_accounted_ns = w->exec_cpu_accounted_ns,
    };

    /* Interval, buffer limit, clock origin: the core's (ipc-load.c). */
    core->apply_welcome(&settings);
    if (!w->start)
        ipc.hooks.pause();
    /* Bounded: a hostile or confused daemon cannot make us sit on our updates for long. */
    ipc.pace.hold_ns = w->update_hold_ns < 10000000000ull ? w->update_hold_ns : 10000000000ull;
    atomic_store(&ipc.region_accepted, w->exit_in_region);
    /* Both asked for in Hello, so only when our region went with it. */
    ipc.updates_in_region = w->updates_in_region;
    core->updates_use_region(w->region_evictions, w->updates_in_region);
    atomic_store(&ipc.connected, 1);
    core->debug("connected to the daemon at %s", ipc.socket_path);
}

static bool client_connected(void)
{
    /* Not "welcomed": a process that lives a few milliseconds may end before the Welcome
     * arrives, and its exit profile is still wanted. */
    return atomic_load(&ipc.linked) && !atomic_load(&ipc.exiting);
}

static void client_welcome_wait(void)
{
    (void)pthread_mutex_lock(&light_lock);
    if (ipc.light && !atomic_load(&ipc.connected))
        light_wait_welcome();
    (void)pthread_mutex_unlock(&light_lock);
}

static bool client_exit_in_region_accepted(void)
{
    client_welcome_wait();
    return client_connected() && atomic_load(&ipc.connected) && atomic_load(&ipc.region_accepted);
}

/* The IPC thread, for what only it sends; 0, or why there is none. */
static int need_thread(void)
{
    int r;

    (void)pthread_mutex_lock(&light_lock);
    r = light_promote();
    (void)pthread_mutex_unlock(&light_lock);
    return r;
}

static void client_promote(void)
{
    (void)need_thread();
}

static void client_exit_in_region(void)
{
    atomic_store(&ipc.exit_in_region, 1);
}

/* A finished profile: its memory writer, and the spans of the writer's chunks that stream
 * from it as they are (joining 15 MB into one string cost a copy and its page faults). */
struct outgoing {
    struct json_writer *writer;
    struct ipc_span *spans;
    size_t span_count;
};

static struct outgoing *outgoing_free(struct outgoing *o)
{
    if (o) {
        core->json_free(o->writer);
        free(o->spans);
        free(o);
    }
    return NULL;
}

static int count_span(const char *data, size_t len, void *userdata)
{
    (void)data;
    (void)len;
    ++*(size_t *)userdata;
    return 0;
}

static int add_span(const char *data, size_t len, void *userdata)
{
    struct outgoing *o = userdata;

    o->spans[o->span_count++] = (struct ipc_span){data, len};
    return 0;
}

/* Takes the writer (finished: a whole JSON text), or frees it. */
static int outgoing_new(struct json_writer *w, struct outgoing **ret)
{
    struct outgoing *o = calloc(1, sizeof(*o));
    size_t chunks = 0;

    /* Spliced writers leave partly filled chunks: count them rather than guess. */
    (void)core->json_each_chunk(w, count_span, &chunks);
    if (o)
        o->spans = calloc(chunks ? chunks : 1, sizeof(*o->spans));
    if (!o || !o->spans) {
        free(o);
        core->json_free(w);
        return -ENOMEM;
    }
    o->writer = w;
    (void)core->json_each_chunk(w, add_span, o);
    *ret = o;
    return 0;
}

/* Puts a finished profile (or an error) in the outbox and wakes the IPC thread. Takes o. */
static void post_outbox(uint64_t id, bool exit_profile, struct outgoing *o, int error)
{
    (void)pthread_mutex_lock(&ipc.outbox_lock);
    outgoing_free(ipc.outbox);
    ipc.outbox = o;
    ipc.outbox_id = id;
    ipc.outbox_exit = exit_profile;
    ipc.outbox_error = error;
    ipc.outbox_ready = true;
    (void)pthread_mutex_unlock(&ipc.outbox_lock);
    wake_ipc();
}

static int client_send_exit_profile(struct json_writer *w)
{
    struct outgoing *o;
    int r = need_thread();

    if (r < 0) {
        core->json_free(w);
        return r;
    }
    r = outgoing_new(w, &o);

    /* Every ProfileData names a request; an exit profile answers none, so it carries the
     * (nonzero) pid instead. */
    if (r == 0)
        post_outbox((uint64_t)getpid(), true, o, 0);
    return r;
}

static void *gather_main(void *arg)
{
    struct progress_logger logger = progress_logger_root(&ipc.progress);
    struct json_writer *w = NULL;
    struct outgoing *o = NULL;
    int r;

    (void)arg;
    r = core->json_new_memory(&w);
    if (r == 0)
        r = ipc.hooks.write_profile(w, 0, false, &logger);
    if (r == 0) {
        r = outgoing_new(w, &o); /* takes w */
        w = NULL;
    }
    core->json_free(w);
    post_outbox(ipc.gather_id, false, o, r);
    return NULL;
}

static void send_profile_error(uint64_t id, const char *message)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__ProfileData msg = FLEETPROF__PROFILE_DATA__INIT;

    msg.request_id = id;
    msg.last = true;
    msg.error = (char *)message;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_PROFILE_DATA;
    env.profile_data = &msg;
    (void)send_env(&env);
}

static void on_gather_request(uint64_t id)
{
    pthread_t thread;
    int r;

    /* The daemon asks again only once it gave the earlier capture up (it failed: a full
     * disk): that one's data is late, this one is served as soon as it has gone. Refused,
     * the next capture lost the process. */
    if (atomic_exchange(&ipc.gathering, 1)) {
        ipc.gather_next = id;
        return;
    }
    progress_cell_init(&ipc.progress);
    ipc.gather_id = id;
    r = core->create_internal_thread(&thread, gather_main, NULL);
    if (r < 0) {
        atomic_store(&ipc.gathering, 0);
        send_profile_error(id, strerror(-r));
        return;
    }
    (void)pthread_detach(thread);
}

static void on_progress_request(const Fleetprof__GetGatherProfileProgress *m)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__GatherProgress msg = FLEETPROF__GATHER_PROGRESS__INIT;
    struct proportion value;
    const char *location;

    progress_cell_read(&ipc.progress, &value, &location);
    msg.request_id = m->id;
    msg.gather_id = m->gather_id;
    msg.proportion = atomic_load(&ipc.gathering) ? value.raw : PROPORTION_INVALID_RAW;
    msg.location = (char *)(location ? location : "");
    env.msg_case = FLEETPROF__ENVELOPE__MSG_GATHER_PROGRESS;
    env.gather_progress = &msg;
    (void)send_env(&env);
}

/* Ends the posted batch. sym_lock held. */
static void sym_finish(struct rt_symbol_batch *b, int result)
{
    b->result = result;
    b->done = true;
    ipc.sym = NULL;
    (void)pthread_cond_broadcast(&ipc.sym_cond);
}

/* Sends batch b as a Symbolize with the given id. sym_lock held. */
static int send_symbolize(const struct rt_symbol_batch *b, uint64_t id)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Symbolize msg = FLEETPROF__SYMBOLIZE__INIT;
    Fleetprof__SymbolModule *mods = calloc(b->module_count + 1, sizeof(*mods));
    Fleetprof__SymbolModule **mod_ptrs = calloc(b->module_count + 1, sizeof(*mod_ptrs));
    Fleetprof__SymbolAddress *addrs = calloc(b->count + 1, sizeof(*addrs));
    Fleetprof__SymbolAddress **addr_ptrs = calloc(b->count + 1, sizeof(*addr_ptrs));
    int r = -ENOMEM;

    if (!mods || !mod_ptrs || !addrs || !addr_ptrs)
        goto out;
    for (size_t k = 0; k < b->module_count; k++) {
        fleetprof__symbol_module__init(&mods[k]);
        mods[k].path = (char *)b->modules[k].path;
        mods[k].build_id.data = (uint8_t *)b->modules[k].build_id;
        mods[k].build_id.len = b->modules[k].build_id_len;
        mods[k].load_bias = b->modules[k].load_bias;
        mod_ptrs[k] = &mods[k];
    }
    for (size_t a = 0; a < b->count; a++) {
        fleetprof__symbol_address__init(&addrs[a]);
        addrs[a].module_index = b->addresses[a].module_index;
        addrs[a].offset = b->addresses[a].offset;
        addr_ptrs[a] = &addrs[a];
    }
    msg.id = id;
    msg.n_modules = b->module_count;
    msg.modules = mod_ptrs;
    msg.n_addresses = b->count;
    msg.addresses = addr_ptrs;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_SYMBOLIZE;
    env.symbolize = &msg;
    r = send_env(&env);
out:
    free(mods);
    free(mod_ptrs);
    free(addrs);
    free(addr_ptrs);
    return r;
}

/* Sends the posted batch, if any is waiting. */
static void flush_symbolize(void)
{
    int r;

    (void)pthread_mutex_lock(&ipc.sym_lock);
    if (ipc.sym && !ipc.sym_sent) {
        uint64_t id = ++ipc.next_id;

        r = send_symbolize(ipc.sym, id);
        if (r < 0) {
            sym_finish(ipc.sym, r);
        } else {
            ipc.sym_sent = true;
            ipc.sym_id = id;
        }
    }
    (void)pthread_mutex_unlock(&ipc.sym_lock);
}

static int arena_add(struct rt_symbol_batch *b, const char *text, size_t *ret_off)
{
    size_t n = strlen(text) + 1;

    if (n == 1) {
        *ret_off = SIZE_MAX;
        return 0;
    }
    if (FLEETPROF_GROW(b->arena, b->arena_cap, b->arena_len + n) < 0)
        return -ENOMEM;
    memcpy(b->arena + b->arena_len, text, n);
    *ret_off = b->arena_len;
    b->arena_len += n;
    return 0;
}

/* A piece of the reply to the posted batch (late replies to a withdrawn one are dropped). */
static void on_symbols(const Fleetprof__Symbols *m)
{
    struct rt_symbol_batch *b;

    (void)pthread_mutex_lock(&ipc.sym_lock);
    b = ipc.sym;
    if (!b || !ipc.sym_sent || m->request_id != ipc.sym_id)
        goto out;
    if (m->error && *m->error) {
        (void)snprintf(b->error, sizeof(b->error), "%s", m->error);
        sym_finish(b, -EIO);
        goto out;
    }
    if (m->offset != b->received || m->n_names > b->count - b->received) {
        (void)snprintf(b->error, sizeof(b->error), "the daemon's reply does not fit the request");
        sym_finish(b, -EBADMSG);
        goto out;
    }
    for (size_t i = 0; i < m->n_names; i++) {
        size_t k = b->received + i;

        if (arena_add(b, m->names[i], &b->name_off[k]) < 0 ||
            arena_add(b, m->n_files ? m->files[i] : "", &b->file_off[k]) < 0) {
            sym_finish(b, -ENOMEM);
            goto out;
        }
        b->lines[k] = m->n_lines ? m->lines[i] : 0;
        b->status[k] = m->n_status ? m->status[i] : 0;
    }
    b->received += m->n_names;
    if (!m->last)
        goto out;
    for (size_t i = 0; i < m->n_module_errors; i++) {
        if (!*m->module_errors[i])
            continue;
        if (b->module_errors++ == 0)
            (void)snprintf(b->error, sizeof(b->error), "%s", m->module_errors[i]);
    }
    sym_finish(b, b->received == b->count ? 0 : -EBADMSG);
out:
    (void)pthread_mutex_unlock(&ipc.sym_lock);
}

static int client_symbolize(struct rt_symbol_batch *b, uint64_t timeout_ns)
{
    struct timespec deadline;
    int r = 0;

    if (!client_connected() || need_thread() < 0)
        return -ENOTCONN;
    (void)clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += (time_t)(timeout_ns / 1000000000u);
    deadline.tv_nsec += (long)(timeout_ns % 1000000000u);
    if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000;
    }
    (void)pthread_mutex_lock(&ipc.sym_serial);
    (void)pthread_mutex_lock(&ipc.sym_lock);
    b->done = false;
    b->result = -ETIMEDOUT;
    b->received = 0;
    ipc.sym = b;
    ipc.sym_sent = false;
    if (!atomic_load(&ipc.linked)) /* on_close ran meanwhile: nobody would answer */
        sym_finish(b, -ENOTCONN);
    (void)pthread_mutex_unlock(&ipc.sym_lock);
    wake_ipc();
    (void)pthread_mutex_lock(&ipc.sym_lock);
    while (!b->done && r != ETIMEDOUT)
        r = pthread_cond_timedwait(&ipc.sym_cond, &ipc.sym_lock, &deadline);
    if (!b->done) { /* withdraw it: a late reply finds nothing to fill */
        ipc.sym = NULL;
        b->result = -ETIMEDOUT;
    }
    r = b->result;
    (void)pthread_mutex_unlock(&ipc.sym_lock);
    (void)pthread_mutex_unlock(&ipc.sym_serial);
    return r;
}

static void send_final_and_close(void);

/* The gathered profile has gone (or could not): a request that came meanwhile is next. */
static void gather_ended(void)
{
    uint64_t next = ipc.gather_next;

    ipc.gather_next = 0;
    atomic_store(&ipc.gathering, 0);
    if (next && ipc.conn)
        on_gather_request(next);
}

static void on_stream_done(struct ipc_conn *conn, uint64_t request_id, int status, void *userdata)
{
    (void)conn;
    (void)request_id;
    (void)status;
    outgoing_free(userdata); /* the JSON, kept alive while it streamed */
    if (ipc.exit_streaming) {
        ipc.exit_streaming = false;
        if (ipc.conn)
            send_final_and_close();
        return;
    }
    gather_ended();
}

/* Streams what the outbox holds; returns true if an exit profile is now streaming. */
static bool flush_outbox(void)
{
    struct outgoing *o;
    uint64_t id;
    bool exit_profile;
    int error, r;

    (void)pthread_mutex_lock(&ipc.outbox_lock);
    if (!ipc.outbox_ready) {
        (void)pthread_mutex_unlock(&ipc.outbox_lock);
        return false;
    }
    o = ipc.outbox;
    id = ipc.outbox_id;
    exit_profile = ipc.outbox_exit;
    error = ipc.outbox_error;
    ipc.outbox = NULL;
    ipc.outbox_ready = false;
    (void)pthread_mutex_unlock(&ipc.outbox_lock);

    if (!ipc.conn) {
        outgoing_free(o);
        gather_ended();
        return false;
    }
    if (error < 0 || !o) {
        send_profile_error(id, strerror(error < 0 ? -error : ENOMEM));
        outgoing_free(o);
        gather_ended();
        return false;
    }
    if (exit_profile) /* the groups' last totals go first: the exit profile may be long */
        send_group_stats(true);
    r = ipc_conn_stream_profile_spans(ipc.conn, id, o->spans, o->span_count, exit_profile, NULL,
                                      on_stream_done, o);
    if (r < 0) {
        core->debug("cannot send the profile: %s", strerror(-r));
        outgoing_free(o);
        gather_ended();
        return false;
    }
    if (exit_profile)
        ipc.exit_streaming = true;
    return exit_profile;
}

static void on_message(struct ipc_conn *conn, const Fleetprof__Envelope *env, void *userdata)
{
    (void)conn;
    (void)userdata;
    switch (env->msg_case) {
    case FLEETPROF__ENVELOPE__MSG_WELCOME:
        apply_welcome(env->welcome);
        break;
    case FLEETPROF__ENVELOPE__MSG_REFUSE:
        core->debug("the daemon refused us: %s", env->refuse->reason);
        ipc_conn_close(ipc.conn);
        break;
    case FLEETPROF__ENVELOPE__MSG_AWAIT_NEXT_CHUNK_MANAGER_UPDATE:
        ipc.poll_id = env->await_next_chunk_manager_update->id;
        ipc.poll_standing = env->await_next_chunk_manager_update->standing;
        flush_update();
        break;
    case FLEETPROF__ENVELOPE__MSG_DESTROY_RELEASED_CHUNKS_AT_OR_BEFORE:
        /* Under a one-shot poll the next poll flushes the slot anyway. */
        core->updates_destroy(env->destroy_released_chunks_at_or_before->done_ns,
                              ipc.poll_standing);
        break;
    case FLEETPROF__ENVELOPE__MSG_GATHER_PROFILE:
        on_gather_request(env->gather_profile->id);
        break;
    case FLEETPROF__ENVELOPE__MSG_GET_GATHER_PROFILE_PROGRESS:
        on_progress_request(env->get_gather_profile_progress);
        break;
    case FLEETPROF__ENVELOPE__MSG_SYMBOLS:
        on_symbols(env->symbols);
        break;
    case FLEETPROF__ENVELOPE__MSG_STOP:
        ipc.hooks.pause();
        send_ack(env->stop->id);
        break;
    case FLEETPROF__ENVELOPE__MSG_PAUSE:
        ipc.hooks.pause();
        send_ack(env->pause->id);
        break;
    case FLEETPROF__ENVELOPE__MSG_START:
        ipc.hooks.resume();
        send_ack(env->start->id);
        break;
    case FLEETPROF__ENVELOPE__MSG_RESUME:
        ipc.hooks.resume();
        send_ack(env->resume->id);
        break;
    default:
        core->debug("ignoring %s from the daemon", ipc_msg_name(env->msg_case));
        break;
    }
}

/* Once they are closed the loop ends, and the thread with it. */
static void close_loop_handles(void)
{
    if (!uv_is_closing((uv_handle_t *)&ipc.wake))
        uv_close((uv_handle_t *)&ipc.wake, NULL);
    if (!uv_is_closing((uv_handle_t *)&ipc.update_retry))
        uv_close((uv_handle_t *)&ipc.update_retry, NULL);
    if (!uv_is_closing((uv_handle_t *)&ipc.update_hold))
        uv_close((uv_handle_t *)&ipc.update_hold, NULL);
}

static void on_close(struct ipc_conn *conn, int error, const char *reason, void *userdata)
{
    (void)conn;
    (void)userdata;
    if (error < 0 && !atomic_load(&ipc.exiting))
        core->debug("lost the daemon: %s; profiling on alone", reason ? reason : strerror(-error));
    ipc.conn = NULL;
    atomic_store(&ipc.connected, 0);
    /* No daemon writes evictions into our region any more, nor reads our ring. */
    ipc.updates_in_region = false;
    core->updates_use_region(false, false);
    atomic_store(&ipc.linked, 0);
    (void)pthread_mutex_lock(&ipc.sym_lock); /* a waiting writer resolves locally now */
    if (ipc.sym)
        sym_finish(ipc.sym, -ENOTCONN);
    (void)pthread_mutex_unlock(&ipc.sym_lock);
    (void)uv_timer_stop(&ipc.update_retry);
    (void)uv_timer_stop(&ipc.update_hold);
    /* The wake handle stays open until client_stop() (the thread idles in its loop
     * meanwhile): closing it here would race with a uv_async_send from the exit path. */
    if (atomic_load(&ipc.exiting))
        close_loop_handles();
}

static void send_final_and_close(void)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__ChunkManagerUpdate msg = FLEETPROF__CHUNK_MANAGER_UPDATE__INIT;

    send_group_stats(true); /* when no exit profile went (it carries them otherwise) */
    /* Our chunks die with us: the daemon forgets them now, not at EOF. */
    msg.final = true;
    /* Sent after the exit description was published (client_exit_in_region()): the daemon
     * reads the region when this arrives. */
    msg.exit_in_region = atomic_load(&ipc.exit_in_region) != 0;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_CHUNK_MANAGER_UPDATE;
    env.chunk_manager_update = &msg;
    (void)send_env(&env);
    ipc_conn_shutdown(ipc.conn); /* flush, then close */
}

/* Sends the pids the program spawned since the last time. IPC thread. */
static void flush_spawned(void)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Spawned msg = FLEETPROF__SPAWNED__INIT;
    int32_t pids[SPAWNED_MAX];

    (void)pthread_mutex_lock(&spawned_lock);
    msg.n_pids = spawned_count;
    memcpy(pids, spawned_pids, spawned_count * sizeof(pids[0]));
    spawned_count = 0;
    (void)pthread_mutex_unlock(&spawned_lock);
    if (msg.n_pids == 0)
        return;
    msg.pids = pids;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_SPAWNED;
    env.spawned = &msg;
    (void)send_env(&env);
}

static void client_spawned(int32_t pid)
{
    size_t waiting;

    (void)pthread_mutex_lock(&spawned_lock);
    if (spawned_count < SPAWNED_MAX) /* beyond: a burst the daemon cannot name; rare */
        spawned_pids[spawned_count++] = pid;
    waiting = spawned_count;
    (void)pthread_mutex_unlock(&spawned_lock);
    /* Sent at the sampler's next tick (client_tick()): on a light connection by it, else by
     * the IPC thread it wakes. The daemon needs them only to name a child that never
     * connects, and that waits for its grace anyway; waking a thread for each cost every
     * fork a wake-up, and a light connection's first one the whole IPC thread and libuv.
     * Half a batch waiting wakes it all the same. */
    if (waiting >= SPAWNED_MAX / 2)
        wake_ipc();
}

static void on_wake(uv_async_t *handle)
{
    (void)handle;
    if (atomic_load(&ipc.exiting) && !ipc.conn) {
        close_loop_handles();
        return;
    }
    if (!ipc.conn)
        return;
    flush_symbolize();
    flush_spawned();
    if (atomic_exchange(&ipc.groups_pending, 0))
        send_group_stats(false);
    /* The exit profile goes first; the Final update and the close follow when it has left
     * (on_stream_done). */
    if (flush_outbox() || ipc.exit_streaming)
        return;
    if (atomic_load(&ipc.exiting)) {
        send_final_and_close();
        return;
    }
    flush_update();
}

/* Our Hello, in env (h and the name buffers are the caller's, alive while env is used); the
 * region's descriptor to send with it, or -1. */
static int make_hello(Fleetprof__Envelope *env, Fleetprof__Hello *h, char name[64], char **argv0)
{
    struct rt_hello_info hi;
    int region_fd;

    core->hello_info(&hi);
    (void)snprintf(name, 64, "%s", hi.name);
    *argv0 = name;
    h->id = ++ipc.next_id;
    h->version = FLEETPROF_PROTOCOL_VERSION;
    h->pid = (int32_t)getpid();
    h->ppid = (int32_t)getppid();
    h->name = name;
    h->n_argv = 1;
    h->argv = argv0;
    h->start_ns = hi.start_ns;
    h->start_epoch_ms = (uint64_t)hi.start_epoch_ms;
    region_fd = core->region_fd();
    h->chunk_region = region_fd >= 0;
    h->region_evictions = region_fd >= 0; /* the core's tick reads them from that region */
    h->exit_in_region = region_fd >= 0;
    h->updates_in_region = region_fd >= 0; /* the core's tick publishes them in that region */
    h->sampling_timer = (char *)(hi.sampling_timer ? hi.sampling_timer : "");
    h->sampling_timer_why = (char *)(hi.sampling_timer_why ? hi.sampling_timer_why : "");
    env->msg_case = FLEETPROF__ENVELOPE__MSG_HELLO;
    env->hello = h;
    return region_fd;
}

static void send_hello(void)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Hello h = FLEETPROF__HELLO__INIT;
    char name[64], *argv0;
    int region_fd = make_hello(&env, &h, name, &argv0);

    /* The region's descriptor goes with the first frame; on a full socket it stays home
     * (chunk_region says it was meant to come: the daemon logs its absence). */
    if (ipc.conn)
        (void)ipc_conn_send_with_fd(ipc.conn, &env, region_fd);
}

static size_t ipc_fds(int fds[8]);

static void *ipc_main(void *arg)
{
    (void)arg;
    core->thread_cancel_only_in_poll(); /* first: see client_abandon() */
    /* Not the name of the thread that made it (the sampler's, or the program's). */
    (void)prctl(PR_SET_NAME, "fleetprof-ipc", 0, 0, 0);
    /* Hello leaves from here, like every frame: this thread blocks every signal, so a
     * daemon that closed the connection already costs an EPIPE. Written from the program's
     * thread at start, the same write raised SIGPIPE there and killed the program. */
    if (atomic_load(&ipc.linked) && !ipc.hello_sent)
        send_hello();
    (void)uv_run(&ipc.loop, UV_RUN_DEFAULT);
    {
        int fds[8];
        size_t n;

        /* Closed by libuv past our close() (see client_owns_fd()): no longer ours. */
        (void)pthread_mutex_lock(&wake_lock);
        n = ipc_fds(fds);
        for (size_t i = 0; i < n; i++)
            core->fd_unprotect(fds[i]);
        (void)uv_loop_close(&ipc.loop);
        ipc.loop_ready = false;
        (void)pthread_mutex_unlock(&wake_lock);
    }
    (void)pthread_mutex_lock(&ipc.done_lock);
    ipc.done = true;
    (void)pthread_cond_broadcast(&ipc.done_cond);
    (void)pthread_mutex_unlock(&ipc.done_lock);
    return NULL;
}

/* Connects and starts the IPC thread, which says Hello first. */
/* Why the daemon at our socket was not trusted, kept for profilingLog from the first refusal
 * on (a forked child inherits it, and says nothing again: its parent did). */
static char untrusted_reason[IPC_TRUST_REASON_MAX];
static atomic_bool untrusted_set;

static void note_untrusted(const char *reason)
{
    if (atomic_load_explicit(&untrusted_set, memory_order_acquire))
        return;
    (void)snprintf(untrusted_reason, sizeof(untrusted_reason), "%s", reason);
    atomic_store_explicit(&untrusted_set, true, memory_order_release);
    /* Always said: the user asked for this daemon, and someone else may be listening. */
    core->warn("not connecting to the daemon socket %s: %s; profiling without it", ipc.socket_path,
               reason);
}

static const char *client_untrusted(void)
{
    return atomic_load_explicit(&untrusted_set, memory_order_acquire) ? untrusted_reason : NULL;
}

/* Whether the process can spare the descriptors a loop needs right now: libuv aborts the
 * process when its first loop cannot make its signal pipe (after the epoll descriptor), so
 * under a tiny RLIMIT_NOFILE (prlimit --nofile=8) the program died of our start. Tried with
 * two pipes, at once closed: 0, or -EMFILE/-ENFILE. */
static int descriptors_to_spare(void)
{
    int a[2], b[2], r = 0;

    if (pipe2(a, O_CLOEXEC) < 0)
        return -errno;
    if (pipe2(b, O_CLOEXEC) < 0)
        r = -errno;
    else {
        (void)close(b[0]);
        (void)close(b[1]);
    }
    (void)close(a[0]);
    (void)close(a[1]);
    return r;
}

static int start_now(void)
{
    char why[200];
    int r;

    /* libuv, the first time (uv-lazy.h): a light connection never needed it. */
    r = uv_lazy_load(why, sizeof(why));
    if (r < 0) {
        core->debug("cannot load libuv (%s): no IPC thread", why);
        return r;
    }

    (void)pthread_mutex_init(&ipc.outbox_lock, NULL);
    (void)pthread_mutex_init(&ipc.sym_serial, NULL);
    (void)pthread_mutex_init(&ipc.sym_lock, NULL);
    {
        pthread_condattr_t attr;

        (void)pthread_condattr_init(&attr);
        (void)pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        (void)pthread_cond_init(&ipc.sym_cond, &attr);
        (void)pthread_condattr_destroy(&attr);
    }
    progress_cell_init(&ipc.progress);
    (void)pthread_mutex_init(&ipc.done_lock, NULL);
    (void)pthread_cond_init(&ipc.done_cond, NULL);
    ipc.done = false;
    atomic_store(&ipc.exiting, 0);
    if (!ipc.hello_sent) {
        /* A new daemon knows nothing of ours yet. A light connection's (light_promote()) was
         * welcomed already, maybe polled, maybe told where the exit profile is: kept. */
        atomic_store(&ipc.exit_in_region, 0);
        ipc.poll_id = 0;
        ipc.poll_standing = false;
        buf_update_pace_init(&ipc.pace, 0);
        atomic_store(&ipc.region_accepted, 0);
    }
    r = descriptors_to_spare();
    if (r < 0) {
        core->debug("too few free descriptors for a daemon connection (%s): profiling alone",
                    strerror(-r));
        return r;
    }
    /* libuv's signal pipes are recorded (pipe2 in preload.c), and none of the loop's
     * descriptors takes 0, 1 or 2. */
    core->fds_capture(RT_FDS_CAPTURE);
    r = uv_loop_init(&ipc.loop);
    if (r < 0) {
        core->fds_capture(RT_FDS_CAPTURE_OFF);
        return r;
    }
    r = uv_async_init(&ipc.loop, &ipc.wake, on_wake);
    if (r < 0) {
        core->fds_capture(RT_FDS_CAPTURE_OFF);
        (void)uv_loop_close(&ipc.loop);
        return r;
    }
    (void)uv_timer_init(&ipc.loop, &ipc.update_retry); /* cannot fail: no descriptor */
    (void)uv_timer_init(&ipc.loop, &ipc.update_hold);
    ipc.loop_ready = true;
    /* Connect here, before the thread runs the loop: a Unix-socket connect completes at
     * once, and a process that ends a moment after starting still has its connection. */
    {
        static const struct ipc_conn_callbacks cbs = {.on_message = on_message,
                                                      .on_close = on_close};

        char reason[IPC_TRUST_REASON_MAX];

        if (ipc.early) {
            ipc.early = false;
            core->fd_unprotect(ipc.early_fd); /* the pipe's from now on */
            r = ipc_conn_adopt(&ipc.loop, ipc.early_fd, ipc.socket_path, ipc.early_uid, NULL, &cbs,
                               NULL, reason, sizeof(reason), &ipc.conn);
        } else {
            r = ipc_conn_connect(&ipc.loop, ipc.socket_path, NULL, &cbs, NULL, reason,
                                 sizeof(reason), &ipc.conn);
        }
        if (r == -EPERM) /* the thread then idles until client_stop() */
            note_untrusted(reason);
        else if (r < 0)
            core->debug("no daemon at %s (%s): profiling alone", ipc.socket_path, strerror(-r));
        else
            atomic_store(&ipc.linked, 1);
    }
    /* The program may close "every descriptor" (daemons do, first thing in main): not
     * these, which libuv would abort the process over. Protected here, before the IPC
     * thread runs: a program that starts closing at once otherwise wins the race. */
    /* libuv's spare /dev/null (for EMFILE, opened by the connect) comes from open(), which
     * is not interposed: moved to the runtime's band here, like the others (preload-fds.c). */
    if (ipc.loop.emfile_fd >= 0)
        ipc.loop.emfile_fd = core->fd_relocate(ipc.loop.emfile_fd);
    core->fd_protect(uv_backend_fd(&ipc.loop));
    core->fd_protect(ipc.loop.async_io_watcher.fd);
    core->fd_protect(ipc.loop.async_wfd);
    core->fd_protect(ipc.loop.signal_pipefd[0]);
    core->fd_protect(ipc.loop.signal_pipefd[1]);
    core->fd_protect(ipc.loop.emfile_fd); /* libuv's spare /dev/null, for EMFILE */
    if (ipc.conn)
        core->fd_protect(ipc_conn_fileno(ipc.conn));
    r = core->create_internal_thread(&ipc.thread, ipc_main, NULL);
    if (r < 0) {
        core->updates_stop();
        close_loop_handles();
        (void)uv_run(&ipc.loop, UV_RUN_NOWAIT);
        (void)uv_loop_close(&ipc.loop);
        ipc.loop_ready = false;
        core->fds_capture(RT_FDS_CAPTURE_OFF);
        return r;
    }
    ipc.thread_started = true;
    /* Only now may a program thread's dup2() onto one of these give it up: client_abandon()
     * stops a started thread before it closes what the thread uses. */
    core->fds_capture(RT_FDS_CAPTURE_OFF);
    return 0;
}

/* --- the light connection ------------------------------------------------------------
 *
 * Most profiled processes live a few milliseconds: a build's compilers, a shell's commands, a
 * pool's helpers. What they need of the daemon is that it holds their region from their start
 * and builds their exit profile from it: a socket, a Hello and, at the end, a Final. So a
 * process connects and says Hello from the thread that starts the runtime (light_start()),
 * the sampler's tick reads the Welcome and the standing poll (light_read()), and the IPC
 * thread with its libuv loop starts only when the connection needs it (light_promote()): the
 * daemon asks anything else (a capture, a pause, symbols), the core has something to send by
 * message (an update the region cannot carry, performance groups' totals, spawned pids, an
 * exit profile written as JSON, a symbolization), or the Welcome does not come in time at
 * exit. A process that never needs it writes its Final from its exit path
 * (light_finish()). */

#define LIGHT_PEEK_BYTES      4096 /* the Welcome and a poll are a few dozen bytes each */
#define LIGHT_WELCOME_WAIT_MS 200  /* at exit, for a Welcome not read yet */

/* Connects (or takes the fork handler's connection), checks who listens, and says Hello with
 * the region's descriptor. light_lock held. */
static int light_start(void)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__Hello h = FLEETPROF__HELLO__INIT;
    char reason[IPC_TRUST_REASON_MAX], name[64], *argv0;
    ssize_t sent;
    uid_t uid;
    int fd, r;

    if (ipc.early) {
        ipc.early = false;
        fd = ipc.early_fd;
        uid = ipc.early_uid;
    } else {
        uid = geteuid();
        core->fds_capture(RT_FDS_CAPTURE); /* away from the numbers the program will take */
        r = ipc_socket_connect(ipc.socket_path, uid, reason, sizeof(reason), &fd);
        if (r == 0)
            core->fd_protect(fd); /* from a program that closes every descriptor */
        core->fds_capture(RT_FDS_CAPTURE_OFF);
        if (r == -EPERM)
            note_untrusted(reason);
        else if (r < 0)
            core->debug("no daemon at %s (%s): profiling alone", ipc.socket_path, strerror(-r));
        if (r < 0)
            return r;
    }
    /* Who called listen(2): nothing is said to a daemon of another user (the IPC thread's
     * connections are checked the same way, ipc_conn_adopt()). */
    r = ipc_socket_listener_check(fd, uid, ipc.socket_path, reason, sizeof(reason));
    if (r == -EPERM)
        note_untrusted(reason);
    else if (r < 0)
        core->debug("%s", reason);
    if (r == 0) {
        int region_fd = make_hello(&env, &h, name, &argv0);

        /* Never SIGPIPE (MSG_NOSIGNAL): the daemon may have closed already. */
        sent = ipc_socket_send_frame(fd, &env, region_fd);
        if (sent < 0) {
            r = (int)sent;
            core->debug("cannot say Hello to the daemon at %s: %s", ipc.socket_path, strerror(-r));
        }
    }
    if (r < 0) {
        core->fd_release(fd);
        return r;
    }
    ipc.light = true;
    ipc.light_fd = fd;
    ipc.light_uid = uid;
    ipc.hello_sent = true;
    atomic_store(&ipc.light_needs, 0);
    atomic_store(&ipc.linked, 1);
    return 0;
}

/* Takes the Welcome and the standing poll at the head of what the daemon sent; anything else
 * stays in the socket for the IPC thread. Returns true when the connection needs that thread
 * (another message, a frame too large to be either, the daemon gone or in error), false when
 * it does not (yet). light_lock held. */
static bool light_read(void)
{
    uint8_t buf[LIGHT_PEEK_BYTES];
    size_t off = 0;
    bool needs = false;
    ssize_t n;

    do
        n = recv(ipc.light_fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno != EAGAIN && errno != EWOULDBLOCK;
    if (n == 0)
        return true; /* closed: the IPC thread says so, and profiles alone */
    while (!needs && off < (size_t)n) {
        Fleetprof__Envelope *env = NULL;
        const char *why = NULL;
        uint64_t len;
        ssize_t prefix = buf_uleb128_decode(buf + off, (size_t)n - off, &len);

        if (prefix == 0 || prefix == -EAGAIN)
            break; /* the rest of the prefix is on its way */
        if (prefix < 0 || len == 0 || len > sizeof(buf) - off - (size_t)prefix) {
            needs = true; /* not a Welcome nor a poll, or not a frame at all */
            break;
        }
        if (off + (size_t)prefix + len > (size_t)n)
            break; /* the rest of the frame is on its way */
        if (ipc_envelope_decode(buf + off + prefix, len, 0, &env, &why) < 0 ||
            ipc_envelope_validate(env, &why) < 0) {
            needs = true; /* the IPC thread's reader says what was wrong, and closes */
        } else if (env->msg_case == FLEETPROF__ENVELOPE__MSG_WELCOME &&
                   !atomic_load(&ipc.connected)) {
            apply_welcome(env->welcome);
        } else if (env->msg_case == FLEETPROF__ENVELOPE__MSG_AWAIT_NEXT_CHUNK_MANAGER_UPDATE &&
                   ipc.updates_in_region) {
            /* Answered by the Final: the updates go through the region. */
            ipc.poll_id = env->await_next_chunk_manager_update->id;
            ipc.poll_standing = env->await_next_chunk_manager_update->standing;
        } else {
            needs = true;
        }
        (void)ipc_envelope_free(env);
        if (!needs)
            off += (size_t)prefix + len;
    }
    /* Taken off the socket: the bytes read above, all there. */
    while (off > 0) {
        n = recv(ipc.light_fd, buf, off, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return true;
        off -= (size_t)n;
    }
    return needs;
}

/* The IPC thread and its loop take the light connection over, as they take a forked child's
 * (ipc.early): nothing is lost, what the daemon sent since is still in the socket. light_lock
 * held. */
static int light_promote(void)
{
    int r;

    if (!ipc.light)
        return 0;
    ipc.light = false;
    ipc.early = true;
    ipc.early_fd = ipc.light_fd;
    ipc.early_uid = ipc.light_uid;
    r = start_now();
    if (r < 0 && ipc.early) {
        /* Not taken (no descriptors for a loop, no thread): light again. */
        ipc.early = false;
        ipc.light = true;
    } else if (r < 0) {
        atomic_store(&ipc.linked, 0);
    } else {
        core->debug("the daemon connection has its thread now");
        wake_ipc(); /* what is waiting: spawned pids, group totals, an update */
    }
    return r;
}

/* At exit, a light connection that has not read its Welcome waits for it (bounded): the
 * daemon builds the exit profile only if it said it would. light_lock held. */
static void light_wait_welcome(void)
{
    uint64_t deadline = core->now_ns() + LIGHT_WELCOME_WAIT_MS * 1000000ull;

    for (;;) {
        struct pollfd p = {.fd = ipc.light_fd, .events = POLLIN};
        uint64_t now;

        if (light_read()) {
            (void)light_promote();
            return;
        }
        now = core->now_ns();
        if (atomic_load(&ipc.connected) || now >= deadline)
            return;
        (void)poll(&p, 1, (int)((deadline - now + 999999) / 1000000));
    }
}

/* The pids the program spawned, waiting (client_spawned()), in one Spawned frame on a light
 * connection; kept for the next try if the socket is full. light_lock held. */
static void light_send_spawned(void)
{
    (void)pthread_mutex_lock(&spawned_lock);
    if (spawned_count) {
        Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
        Fleetprof__Spawned spawned = FLEETPROF__SPAWNED__INIT;

        spawned.n_pids = spawned_count;
        spawned.pids = spawned_pids;
        env.msg_case = FLEETPROF__ENVELOPE__MSG_SPAWNED;
        env.spawned = &spawned;
        if (ipc_socket_send_frame(ipc.light_fd, &env, -1) > 0)
            spawned_count = 0;
    }
    (void)pthread_mutex_unlock(&spawned_lock);
}

/* The process ends on a light connection: its Final (with where its exit profile is), and
 * the close. light_lock held. */
static void light_finish(void)
{
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    Fleetprof__ChunkManagerUpdate msg = FLEETPROF__CHUNK_MANAGER_UPDATE__INIT;
    ssize_t sent;

    light_send_spawned(); /* those since the last tick */
    /* The groups' last totals, before the Final: the daemon puts them in an exit profile it
     * builds from the region, and in `top`'s totals. */
    send_group_stats_by(true, send_env_light);
    /* Our chunks die with us: the daemon forgets them now, not at EOF; and reads the region
     * when this arrives, if the exit profile is there (client_exit_in_region()). */
    msg.final = true;
    msg.exit_in_region = atomic_load(&ipc.exit_in_region) != 0;
    msg.request_id = ipc.poll_standing ? ipc.poll_id : 0;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_CHUNK_MANAGER_UPDATE;
    env.chunk_manager_update = &msg;
    sent = ipc_socket_send_frame(ipc.light_fd, &env, -1);
    if (sent == -EAGAIN) { /* a full socket: the daemon is slow; bounded, as the thread is */
        struct pollfd p = {.fd = ipc.light_fd, .events = POLLOUT};

        if (poll(&p, 1, (int)(EXIT_WAIT_NS / 1000000u)) > 0)
            sent = ipc_socket_send_frame(ipc.light_fd, &env, -1);
    }
    if (sent < 0)
        core->debug("cannot send the last update to the daemon: %s", strerror((int)-sent));
    core->fd_release(ipc.light_fd);
    ipc.light = false;
    atomic_store(&ipc.linked, 0);
}

static int client_start(const char *socket_path, const struct rt_ipc_hooks *hooks)
{
    bool defer = ipc.defer_start;
    int r;

    ipc.defer_start = false;
    if (!socket_path || !*socket_path || strlen(socket_path) >= sizeof(ipc.socket_path))
        return -EINVAL;
    strcpy(ipc.socket_path, socket_path);
    ipc.hooks = *hooks;
    r = core->updates_start();
    if (r < 0)
        return r;
    if (defer) {
        atomic_store(&ipc.start_pending, 1);
        return 0;
    }
    (void)pthread_mutex_lock(&light_lock);
    r = light_start();
    (void)pthread_mutex_unlock(&light_lock);
    if (r < 0)
        core->updates_stop();
    return r;
}

static void client_start_deferred(void)
{
    int r;

    if (!atomic_exchange(&ipc.start_pending, 0))
        return;
    (void)pthread_mutex_lock(&light_lock);
    r = light_start();
    (void)pthread_mutex_unlock(&light_lock);
    if (r < 0) { /* profiling alone, as when client_start() fails */
        core->updates_stop();
        core->debug("cannot start the IPC thread: %s", strerror(-r));
    }
}

/* Closes a fork handler's connection that no start took (the runtime stopped first). */
static void drop_early(void)
{
    if (ipc.early) {
        ipc.early = false;
        core->fd_release(ipc.early_fd);
    }
}

static void client_stop(void)
{
    struct timespec deadline;
    int r = 0;

    drop_early();
    if (atomic_exchange(&ipc.start_pending, 0)) /* never connected: nothing to say */
        core->updates_stop();
    (void)pthread_mutex_lock(&light_lock);
    if (ipc.light) {
        atomic_store(&ipc.exiting, 1);
        light_finish();
        (void)pthread_mutex_unlock(&light_lock);
        core->updates_stop();
        return;
    }
    (void)pthread_mutex_unlock(&light_lock);
    if (!ipc.thread_started)
        return;
    ipc.thread_started = false;
    /* Set under the outbox lock: an exit profile posted just before is seen with it. */
    (void)pthread_mutex_lock(&ipc.outbox_lock);
    atomic_store(&ipc.exiting, 1);
    (void)pthread_mutex_unlock(&ipc.outbox_lock);
    wake_ipc();
    (void)clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)(EXIT_WAIT_NS / 1000000000u);
    (void)pthread_mutex_lock(&ipc.done_lock);
    while (!ipc.done && r != ETIMEDOUT)
        r = pthread_cond_timedwait(&ipc.done_cond, &ipc.done_lock, &deadline);
    (void)pthread_mutex_unlock(&ipc.done_lock);
    if (ipc.done)
        (void)pthread_join(ipc.thread, NULL);
    else
        core->debug("the daemon did not take our last messages within 2 s");
    /* Updates have nowhere to go now. */
    core->updates_stop();
}

/* The loop's descriptors and the connection's, -1 where there is none; their count. */
static size_t ipc_fds(int fds[8])
{
    size_t n = 0;

    if (!ipc.loop_ready)
        return 0;
    fds[n++] = ipc.conn ? ipc_conn_fileno(ipc.conn) : -1;
    fds[n++] = uv_backend_fd(&ipc.loop);
    fds[n++] = ipc.loop.async_io_watcher.fd;
    fds[n++] = ipc.loop.async_wfd != ipc.loop.async_io_watcher.fd ? ipc.loop.async_wfd : -1;
    fds[n++] = ipc.loop.signal_pipefd[0];
    fds[n++] = ipc.loop.signal_pipefd[1];
    fds[n++] = ipc.loop.emfile_fd;
    return n;
}

static bool client_owns_fd(int fd)
{
    int fds[8];
    size_t n;
    bool owns = false;

    /* libuv closes its descriptors with the raw close system call, past our close(): while
     * the IPC thread closes its loop (exiting), or a connection that is closing (its
     * ipc_conn_fileno() is then -EBADF), a descriptor found closed is its own doing. */
    if (atomic_load(&ipc.exiting))
        return false;
    (void)pthread_mutex_lock(&light_lock);
    owns = ipc.light && fd >= 0 && fd == ipc.light_fd;
    (void)pthread_mutex_unlock(&light_lock);
    (void)pthread_mutex_lock(&wake_lock);
    n = ipc_fds(fds);
    for (size_t i = 0; i < n; i++)
        owns |= fd >= 0 && fds[i] == fd;
    (void)pthread_mutex_unlock(&wake_lock);
    return owns;
}

static int client_abandon(void)
{
    struct rt_ipc_hooks hooks;
    struct timespec deadline;
    bool was_light;
    int fds[8];
    size_t n;

    /* A light connection has nothing but its socket: closed if still ours. */
    (void)pthread_mutex_lock(&light_lock);
    was_light = ipc.light;
    if (was_light)
        core->fd_release(ipc.light_fd);
    ipc.light = false;
    (void)pthread_mutex_unlock(&light_lock);
    (void)pthread_mutex_lock(&wake_lock);
    if (!ipc.loop_ready && !was_light) {
        (void)pthread_mutex_unlock(&wake_lock);
        return 0;
    }
    if (ipc.loop_ready && ipc.thread_started) {
        /* Cancelled only inside its poll (preload-fds.c): libuv is between events there,
         * and no lock of ours is held, so nothing of the loop runs again. A thread that
         * does not get there within a second is left alone, and so is everything it
         * uses: no reconnection, the daemon sees the process end. */
        (void)pthread_cancel(ipc.thread);
        (void)clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 1;
        if (pthread_timedjoin_np(ipc.thread, NULL, &deadline) != 0) {
            ipc.loop_ready = false;
            ipc.thread_started = false;
            (void)pthread_mutex_unlock(&wake_lock);
            return -ETIMEDOUT;
        }
        ipc.thread_started = false;
    }
    /* The loop's memory is left as it is (a few KiB): closing it would touch descriptors
     * that may be the program's now. Those still ours are closed. */
    n = ipc_fds(fds);
    for (size_t i = 0; i < n; i++)
        core->fd_release(fds[i]);
    ipc.loop_ready = false;
    ipc.conn = NULL;
    (void)pthread_mutex_unlock(&wake_lock);

    core->updates_stop();
    atomic_store(&ipc.connected, 0);
    atomic_store(&ipc.linked, 0);
    atomic_store(&ipc.gathering, 0);
    (void)pthread_mutex_lock(&ipc.sym_lock);
    if (ipc.sym) /* a profile writer waits for symbols that will not come this way */
        sym_finish(ipc.sym, -ENOTCONN);
    (void)pthread_mutex_unlock(&ipc.sym_lock);
    ipc.poll_id = 0;
    ipc.exit_streaming = false;
    ipc.hello_sent = false;
    /* A new connection, made at the sampler's next tick or by the exit path: the daemon
     * sees this process again, with its Hello. */
    ipc.defer_start = true;
    atomic_store(&ipc.start_not_before_ns, core->now_ns() + RECONNECT_DELAY_NS);
    hooks = ipc.hooks;
    return client_start(ipc.socket_path, &hooks);
}

/* The connection was given up (client_give_up()): a child forked since still connects in
 * its fork handler (a socket, no thread), so that the daemon knows of it. */
static bool children_connect;

/* The program ran out of descriptors: the connection's go to it, and none is made again;
 * the exit profile goes to a file (FLEETPROF_DIR), the region stays for recovery. */
static int client_give_up(void)
{
    bool linked = atomic_load(&ipc.linked);
    int r = client_abandon();

    children_connect = children_connect || linked;
    atomic_store(&ipc.start_pending, 0);
    core->updates_stop();
    return r;
}

/* A forked child's connection before its start makes one (which adopts it): a server's
 * worker often drops its privileges at once (nginx, httpd, postfix: setuid to an
 * unprivileged user), after which it can neither reach the socket (a directory only we may
 * enter) nor pass the daemon's check of who connects; connected before, as the user the
 * daemon accepted, it stays in the fleet to its end. Made in the fork handler only when the
 * parent gave its connection up, so that the daemon learns of the child from it; else the
 * parent names its children (Spawned), and the connection waits for the child's start or
 * its first change of user ids (client_before_credentials()): most forked children exec at
 * once, and each early connection cost them and the daemon 0.2-0.3 ms for a socket the exec
 * closed unused. */
static void connect_early(const char *path)
{
    char reason[IPC_TRUST_REASON_MAX];
    uid_t uid = geteuid();
    int fd, r;

    core->fds_capture(RT_FDS_CAPTURE); /* away from the numbers the program will take */
    r = ipc_socket_connect(path, uid, reason, sizeof(reason), &fd);
    if (r == 0)
        core->fd_protect(fd); /* from a program that closes every descriptor it did not open */
    core->fds_capture(RT_FDS_CAPTURE_OFF);
    if (r < 0) {
        core->debug("no early connection to %s: %s", path, *reason ? reason : strerror(-r));
        return;
    }
    ipc.early = true;
    ipc.early_fd = fd;
    ipc.early_uid = uid;
}

static void client_before_credentials(void)
{
    if (!atomic_load_explicit(&ipc.connect_before_credentials, memory_order_acquire))
        return;
    (void)pthread_mutex_lock(&light_lock);
    /* Once: as the user it was born as. */
    if (atomic_exchange(&ipc.connect_before_credentials, false) && !ipc.early && !ipc.light &&
        !atomic_load(&ipc.linked))
        connect_early(ipc.socket_path);
    (void)pthread_mutex_unlock(&light_lock);
}

static void client_forget_after_fork(void)
{
    char path[sizeof(ipc.socket_path)];
    bool linked;

    /* The loop, its epoll instance and the socket are shared with the parent: never run,
     * close or modify them here (uv_loop_close would epoll_ctl the parent's set). Close
     * only our copies of their descriptors, and start over. */
    /* the core forgot its descriptors first (on_fork_child_first): these closes are real. */
    /* The parent's sampler may have held wake_lock at the fork (its tick wakes the IPC thread
     * under it): the copy here stays locked, with no thread left to unlock it, and this
     * process's first wake-up, from its sampler or its exit, waited for ever. Seen as a child
     * whose main thread sat in pthread_join() of its sampler, blocked on that lock. We are
     * the only thread now: a fresh lock. */
    (void)pthread_mutex_init(&wake_lock, NULL);
    (void)pthread_mutex_init(&light_lock, NULL);
    (void)pthread_mutex_init(&spawned_lock, NULL); /* the parent's spawns are not ours */
    if (ipc.light)                                 /* the parent's connection */
        (void)close(ipc.light_fd);
    spawned_count = 0;
    if (ipc.loop_ready) {
        int fd = ipc.conn ? ipc_conn_fileno(ipc.conn) : -1;
        int fds[] = {fd,
                     uv_backend_fd(&ipc.loop),
                     ipc.loop.async_io_watcher.fd,
                     ipc.loop.async_wfd != ipc.loop.async_io_watcher.fd ? ipc.loop.async_wfd : -1,
                     ipc.loop.signal_pipefd[0],
                     ipc.loop.signal_pipefd[1],
                     ipc.loop.emfile_fd};

        for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
            if (fds[i] >= 0)
                (void)close(fds[i]);
    }
    linked = atomic_load(&ipc.linked);
    memcpy(path, ipc.socket_path, sizeof(path));
    memset(&ipc, 0, sizeof(ipc));
    ipc.defer_start = true; /* this child may exec at once: start at the first tick */
    atomic_store(&ipc.start_not_before_ns, 0);
    if (children_connect) {
        connect_early(path);
    } else if (linked) {                                 /* the parent names this child (Spawned) */
        memcpy(ipc.socket_path, path, strlen(path) + 1); /* pages the reset wrote already */
        atomic_store_explicit(&ipc.connect_before_credentials, true, memory_order_release);
    }
}

/* --- the module's table (child/core/ipc-module.h) ------------------------------------------ */

static void module_init(const struct rt_ipc_core *c)
{
    core = c;
}

static const struct rt_ipc_module module = {
        .abi = RT_IPC_MODULE_ABI,
        .core_size = sizeof(struct rt_ipc_core),
        .batch_size = sizeof(struct rt_symbol_batch),
        .description_size = sizeof(struct prof_process_info),
        .init = module_init,
        .start = client_start,
        .start_deferred = client_start_deferred,
        .stop = client_stop,
        .tick = client_tick,
        .wake = wake_ipc,
        .forget_after_fork = client_forget_after_fork,
        .connected = client_connected,
        .owns_fd = client_owns_fd,
        .abandon = client_abandon,
        .give_up = client_give_up,
        .send_exit_profile = client_send_exit_profile,
        .exit_in_region_accepted = client_exit_in_region_accepted,
        .exit_in_region = client_exit_in_region,
        .symbolize = client_symbolize,
        .pack_description = rt_ipc_pack_description,
        .untrusted = client_untrusted,
        .spawned = client_spawned,
        .welcome_wait = client_welcome_wait,
        .promote = client_promote,
        .before_credentials = client_before_credentials,
};

__attribute__((visibility("default"))) const struct rt_ipc_module *fleetprof_ipc_module(void)
{
    return &module;
}
