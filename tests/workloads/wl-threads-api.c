/* tests/workloads/wl-threads-api.c - every thread of the runtime at once, for ThreadSanitizer.
 *
 *   wl-threads-api [SECONDS]      default 1.5
 *
 * Linked with libfleetprof (never preloaded: under TSan the program and the library must
 * come from the same instrumented build). fleetprof_init(), then while the sampler signals
 * and harvests: 4 workers push/pop labels, record text, interval, start/end, typed and
 * with-stack markers and bump counters on deep stacks; a churn thread keeps starting
 * short-lived registered threads; a schema thread declares schemas and counters while the
 * workers use earlier ones; a writer thread calls fleetprof_write_profile() repeatedly;
 * the main thread pauses and resumes. Each worker round is an event timing performance
 * groups shared by all workers (nested, re-entered, slow events at a 0.05 ms threshold),
 * while the writers read the groups' totals into profiles. After the joins another thread writes
 * the final profile, then fleetprof_shutdown(). Exit 0 when every profile written is a non-empty
 * JSON object; the test passes under TSan only with zero reports (TSAN_OPTIONS
 * halt_on_error=1). Registered as the 'threads-api' test (suites child, tsan).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fleetprof.h"

#define NOINLINE      __attribute__((noinline))
#define WORKERS       4
#define CHURN_THREADS 40
#define MAX_SCHEMAS   8

static atomic_int stop;
static atomic_int schemas_ready; /* schema ids published by the schema thread */
static int schema_ids[MAX_SCHEMAS];
static int counter_id;
static char dir[4096];
static atomic_int profiles_written;
static atomic_int failures;
static _Thread_local volatile uint64_t sink; /* per thread: no race of our own */

static double now_s(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void fail(const char *what, int err)
{
    fprintf(stderr, "wl-threads-api: %s: %s\n", what, strerror(err));
    atomic_fetch_add(&failures, 1);
}

NOINLINE void wt_spin(int iterations);
NOINLINE void wt_spin(int iterations)
{
    for (int i = 0; i < iterations; i++)
        sink += (uint64_t)i * 0x9e3779b97f4a7c15u;
}

/* One round of API calls at the bottom of a labelled recursion. */
NOINLINE void wt_api_round(int worker, unsigned round);
NOINLINE void wt_api_round(int worker, unsigned round)
{
    struct fleetprof_field_value values[2];
    int ready = atomic_load_explicit(&schemas_ready, memory_order_acquire);
    uint64_t t0 = fleetprof_now_ns();

    FLEETPROF_LABEL("wt-round", FLEETPROF_CATEGORY_APP);
    fleetprof_marker("wt-text", FLEETPROF_CATEGORY_APP, "round text");
    fleetprof_marker_start("wt-span", FLEETPROF_CATEGORY_IO);
    wt_spin(2000);
    fleetprof_marker_end("wt-span", FLEETPROF_CATEGORY_IO);
    fleetprof_marker_interval("wt-interval", FLEETPROF_CATEGORY_NETWORK, t0, fleetprof_now_ns(),
                              NULL);
    if (ready > 0) {
        values[0].kind = FLEETPROF_FIELD_STRING;
        values[0].v.s = worker % 2 ? "odd" : "even";
        values[1].kind = FLEETPROF_FIELD_UINT;
        values[1].v.u = round;
        fleetprof_marker_typed(schema_ids[round % (unsigned)ready], "wt-typed",
                               FLEETPROF_CATEGORY_APP, t0, 0, values, 2);
    }
    if (round % 64 == 0)
        fleetprof_marker_with_stack("wt-stack", FLEETPROF_CATEGORY_OTHER, "cause");
    fleetprof_counter_add(counter_id, 1);
}

NOINLINE void wt_recurse(int depth, int worker, unsigned round);
NOINLINE void wt_recurse(int depth, int worker, unsigned round)
{
    if (depth % 8 == 0) {
        FLEETPROF_LABEL("wt-depth", FLEETPROF_CATEGORY_OTHER);
        wt_recurse(depth - 1, worker, round);
    } else if (depth > 0) {
        wt_recurse(depth - 1, worker, round);
    } else {
        wt_api_round(worker, round);
    }
    sink++;
}

static void *worker_main(void *p)
{
    int worker = (int)(intptr_t)p;
    char name[16];
    unsigned round = 0;
    int r;

    (void)snprintf(name, sizeof(name), "wt-worker-%d", worker);
    r = fleetprof_register_thread(name);
    if (r < 0)
        fail("fleetprof_register_thread", -r);
    while (!atomic_load(&stop)) {
        /* Looked up each round on purpose: interning races with the other workers. */
        fleetprof_group *shared = fleetprof_group_get("wt-shared");
        fleetprof_group *own = fleetprof_group_get(name);

        fleetprof_event_begin();
        {
            FLEETPROF_GROUP(shared);
            FLEETPROF_GROUP(own);
            wt_recurse(24, worker, round++);
            {
                FLEETPROF_GROUP(shared); /* re-entered: no second stopwatch */
                wt_spin(1000);
            }
        }
        fleetprof_event_end();
    }
    fleetprof_unregister_thread();
    return NULL;
}

static void *short_lived_main(void *p)
{
    (void)p;
    (void)fleetprof_register_thread("wt-short");
    fleetprof_marker("wt-short-lived", FLEETPROF_CATEGORY_OTHER, NULL);
    wt_spin(200000);
    return NULL; /* unregistered by the runtime's thread-exit hook */
}

static void *churn_main(void *p)
{
    (void)p;
    for (int i = 0; i < CHURN_THREADS && !atomic_load(&stop); i++) {
        pthread_t t;
        int r = pthread_create(&t, NULL, short_lived_main, NULL);

        if (r != 0) {
            fail("pthread_create (churn)", r);
            break;
        }
        (void)pthread_join(t, NULL);
        (void)usleep(10000);
    }
    return NULL;
}

static void *schema_main(void *p)
{
    static const struct fleetprof_field_schema fields[] = {
            {"label", "Label", "unique-string", FLEETPROF_FIELD_STRING},
            {"round", "Round", "integer", FLEETPROF_FIELD_UINT},
    };
    char name[32];

    (void)p;
    for (int i = 0; i < MAX_SCHEMAS && !atomic_load(&stop); i++) {
        int id;

        (void)snprintf(name, sizeof(name), "WtSchema%d", i);
        id = fleetprof_marker_schema(name, "{marker.data.label}", fields, 2);
        if (id <= 0) {
            fail("fleetprof_marker_schema", -id);
            break;
        }
        schema_ids[i] = id;
        atomic_store_explicit(&schemas_ready, i + 1, memory_order_release);
        (void)snprintf(name, sizeof(name), "wt-counter-%d", i);
        if (fleetprof_counter_create(name, "Other", "created while markers run") < 0)
            fail("fleetprof_counter_create", EINVAL);
        (void)usleep(50000);
    }
    return NULL;
}

static int write_profile(const char *tag)
{
    char path[4200];
    int r;

    (void)snprintf(path, sizeof(path), "%s/%s-%d.json", dir, tag,
                   atomic_fetch_add(&profiles_written, 1));
    r = fleetprof_write_profile(path);
    if (r < 0)
        fail("fleetprof_write_profile", -r);
    return r;
}

static void *writer_main(void *p)
{
    (void)p;
    while (!atomic_load(&stop)) {
        (void)write_profile("during");
        (void)usleep(100000);
    }
    return NULL;
}

static void *final_writer_main(void *p)
{
    (void)p;
    (void)write_profile("final");
    return NULL;
}

/* A profile must be a non-empty JSON object (the integration tests check the rest). */
static int check_profile(const char *path)
{
    char first = 0, last = 0, buf[4096];
    ssize_t n;
    size_t total = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -errno;
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        if (total == 0)
            first = buf[0];
        for (ssize_t i = n; i-- > 0;)
            if (buf[i] != '\n' && buf[i] != ' ') {
                last = buf[i];
                break;
            }
        total += (size_t)n;
    }
    (void)close(fd);
    if (n < 0 || total < 1000 || first != '{' || last != '}') {
        fprintf(stderr, "wl-threads-api: %s: %zu bytes, starts %c ends %c\n", path, total, first,
                last);
        return -EBADMSG;
    }
    return 0;
}

static int check_and_remove_profiles(void)
{
    char path[4200];
    int count = atomic_load(&profiles_written), bad = 0;

    for (int i = 0; i < count; i++) {
        const char *tag = i == count - 1 ? "final" : "during";

        (void)snprintf(path, sizeof(path), "%s/%s-%d.json", dir, tag, i);
        if (check_profile(path) < 0)
            bad++;
        (void)unlink(path);
    }
    (void)rmdir(dir);
    return bad;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 1.5;
    const char *tmp = getenv("TMPDIR");
    pthread_t workers[WORKERS], churn, schema, writer, final_writer;
    double until;
    int r;

    (void)setenv("FLEETPROF_SLOW_EVENT_MS", "0.05", 1); /* markers from every worker */
    (void)snprintf(dir, sizeof(dir), "%s/wl-threads-api-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fail("mkdtemp", errno);
        return 1;
    }
    r = fleetprof_init();
    if (r < 0) {
        fail("fleetprof_init", -r);
        return 1;
    }
    counter_id = fleetprof_counter_create("wt-rounds", "Other", "API rounds");
    if (counter_id <= 0)
        fail("fleetprof_counter_create", counter_id < 0 ? -counter_id : EINVAL);

    for (int i = 0; i < WORKERS; i++)
        if (pthread_create(&workers[i], NULL, worker_main, (void *)(intptr_t)i) != 0)
            return 1;
    if (pthread_create(&churn, NULL, churn_main, NULL) != 0 ||
        pthread_create(&schema, NULL, schema_main, NULL) != 0 ||
        pthread_create(&writer, NULL, writer_main, NULL) != 0)
        return 1;

    until = now_s() + seconds;
    while (now_s() < until) {
        FLEETPROF_LABEL("wt-main", FLEETPROF_CATEGORY_IDLE);
        (void)usleep(150000);
        fleetprof_pause();
        fleetprof_marker("wt-paused", FLEETPROF_CATEGORY_OTHER, "markers still recorded");
        (void)usleep(20000);
        fleetprof_resume();
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < WORKERS; i++)
        (void)pthread_join(workers[i], NULL);
    (void)pthread_join(churn, NULL);
    (void)pthread_join(schema, NULL);
    (void)pthread_join(writer, NULL);

    /* The final profile from a thread that never registered. */
    if (pthread_create(&final_writer, NULL, final_writer_main, NULL) != 0)
        return 1;
    (void)pthread_join(final_writer, NULL);
    fleetprof_shutdown();

    r = check_and_remove_profiles();
    printf("wl-threads-api: %d profiles written, %d invalid, %d failures\n",
           atomic_load(&profiles_written), r, atomic_load(&failures));
    return r || atomic_load(&failures) ? 1 : 0;
}
