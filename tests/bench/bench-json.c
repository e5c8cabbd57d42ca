/* tests/bench/bench-json.c - JSON writer throughput on a realistic Gecko thread.
 *
 * Writes one thread as the child's gather thread would: a samples table of ~2 million rows
 * like [123,4567.123456,0,1000] (stack, time_ms, eventDelay, threadCPUDelta), stack and frame
 * tables, and a stringTable of ~10k function names interned through json_unique_strings, into
 * a memory writer. Repeats it and prints a table, then "BENCH json.write_MBps <median> MB/s"
 * (MB = 1e6 bytes). Input data is generated before the clock starts; interning is timed.
 * Benchmarks never assert on time.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json/writer.h"

#define SAMPLES 2000000
#define FRAMES  10000
#define STACKS  60000
#define REPEATS 5

struct thread_data {
    char **function_names; /* FRAMES strings, some repeated */
    int32_t *frame_lines;  /* 0 = no line */
    int32_t *stack_prefix; /* -1 = root */
    uint32_t *stack_frame;
    uint32_t *sample_stack;
    int64_t *sample_ns;
    int64_t *sample_cpu_delta;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rng_next(void)
{
    uint64_t x = rng_state;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545f4914f6cdd1du;
}

static void *xmalloc(size_t size)
{
    void *p = malloc(size);

    if (!p) {
        fprintf(stderr, "bench-json: out of memory\n");
        exit(1);
    }
    return p;
}

static void make_data(struct thread_data *d)
{
    static const char *const namespaces[] = {"mozilla::", "std::", "", "js::jit::", "uv__"};
    static const char *const libs[] = {"libxul.so", "libc.so.6", "fleetprof-demo", "libuv.so.1"};
    int64_t t = 12345678901;

    d->function_names = xmalloc(FRAMES * sizeof(char *));
    d->frame_lines = xmalloc(FRAMES * sizeof(int32_t));
    for (uint32_t i = 0; i < FRAMES; i++) {
        /* About one name in twenty repeats an earlier one (inlined copies). */
        uint32_t id = i > 0 && rng_next() % 20 == 0 ? (uint32_t)(rng_next() % i) : i;
        char buf[160];
        int n = snprintf(buf, sizeof(buf), "%sSomeSubsystem::Function_%" PRIu32 "(int, %s) (in %s)",
                         namespaces[id % 5], id, id % 3 ? "char const*" : "void*", libs[id % 4]);

        d->function_names[i] = xmalloc((size_t)n + 1);
        memcpy(d->function_names[i], buf, (size_t)n + 1);
        d->frame_lines[i] = rng_next() % 3 ? (int32_t)(rng_next() % 5000) + 1 : 0;
    }
    d->stack_prefix = xmalloc(STACKS * sizeof(int32_t));
    d->stack_frame = xmalloc(STACKS * sizeof(uint32_t));
    for (uint32_t i = 0; i < STACKS; i++) {
        d->stack_prefix[i] = i == 0 || rng_next() % 50 == 0 ? -1 : (int32_t)(rng_next() % i);
        d->stack_frame[i] = (uint32_t)(rng_next() % FRAMES);
    }
    d->sample_stack = xmalloc(SAMPLES * sizeof(uint32_t));
    d->sample_ns = xmalloc(SAMPLES * sizeof(int64_t));
    d->sample_cpu_delta = xmalloc(SAMPLES * sizeof(int64_t));
    for (uint32_t i = 0; i < SAMPLES; i++) {
        d->sample_stack[i] = (uint32_t)(rng_next() % STACKS);
        t += 1000000 + (int64_t)(rng_next() % 20000) - 10000; /* 1 ms interval, jitter */
        d->sample_ns[i] = t;
        d->sample_cpu_delta[i] = rng_next() % 4 ? (int64_t)(rng_next() % 1000) + 500 : 0;
    }
}

static void free_data(struct thread_data *d)
{
    for (uint32_t i = 0; i < FRAMES; i++)
        free(d->function_names[i]);
    free(d->function_names);
    free(d->frame_lines);
    free(d->stack_prefix);
    free(d->stack_frame);
    free(d->sample_stack);
    free(d->sample_ns);
    free(d->sample_cpu_delta);
}

static double now_s(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Writes {"schema":{name0:0,name1:1,...},"data":[ ... and leaves "data" open. */
static void begin_table(struct json_writer *w, const char *key, const char *const *columns,
                        int count)
{
    json_writer_object_begin(w, key);
    json_writer_object_begin(w, "schema");
    for (int i = 0; i < count; i++)
        json_writer_int(w, columns[i], i);
    json_writer_object_end(w);
    json_writer_array_begin(w, "data");
}

static void end_table(struct json_writer *w)
{
    json_writer_array_end(w);
    json_writer_object_end(w);
}

static void write_samples(struct json_writer *w, const struct thread_data *d)
{
    static const char *const columns[] = {"stack", "time", "eventDelay", "threadCPUDelta"};

    begin_table(w, "samples", columns, 4);
    for (uint32_t i = 0; i < SAMPLES; i++) {
        json_writer_array_begin(w, NULL);
        json_writer_uint(w, NULL, d->sample_stack[i]);
        json_writer_time_ms(w, NULL, d->sample_ns[i]);
        json_writer_int(w, NULL, 0);
        json_writer_int(w, NULL, d->sample_cpu_delta[i]);
        json_writer_array_end(w);
    }
    end_table(w);
}

static int write_thread(struct json_writer *w, const struct thread_data *d)
{
    static const char *const stack_columns[] = {"prefix", "frame"};
    static const char *const frame_columns[] = {"location",       "relevantForJS", "innerWindowID",
                                                "implementation", "line",          "column",
                                                "category",       "subcategory"};
    static const char *const marker_columns[] = {"name",  "startTime", "endTime",
                                                 "phase", "category",  "data"};
    struct json_unique_strings *us = NULL;
    int r;

    r = json_unique_strings_new(&us);
    if (r < 0)
        return r;
    json_writer_object_begin(w, NULL);
    json_writer_string(w, "name", "GeckoMain");
    json_writer_string(w, "processType", "default");
    json_writer_int(w, "pid", 4242);
    json_writer_int(w, "tid", 4242);
    json_writer_time_ms(w, "registerTime", 0);
    json_writer_null(w, "unregisterTime");
    write_samples(w, d);
    begin_table(w, "markers", marker_columns, 6);
    end_table(w);
    begin_table(w, "stackTable", stack_columns, 2);
    for (uint32_t i = 0; i < STACKS; i++) {
        json_writer_array_begin(w, NULL);
        if (d->stack_prefix[i] < 0)
            json_writer_null(w, NULL);
        else
            json_writer_int(w, NULL, d->stack_prefix[i]);
        json_writer_uint(w, NULL, d->stack_frame[i]);
        json_writer_array_end(w);
    }
    end_table(w);
    begin_table(w, "frameTable", frame_columns, 8);
    for (uint32_t i = 0; i < FRAMES; i++) {
        const char *name = d->function_names[i];
        uint32_t index;

        r = json_unique_strings_index(us, name, strlen(name), &index);
        if (r < 0)
            break;
        json_writer_array_begin(w, NULL);
        json_writer_uint(w, NULL, index);
        json_writer_bool(w, NULL, false);
        json_writer_int(w, NULL, 0);
        json_writer_null(w, NULL);
        if (d->frame_lines[i])
            json_writer_int(w, NULL, d->frame_lines[i]);
        else
            json_writer_null(w, NULL);
        json_writer_null(w, NULL);
        json_writer_int(w, NULL, 1);
        json_writer_int(w, NULL, 0);
        json_writer_array_end(w);
    }
    end_table(w);
    json_unique_strings_write(us, w, "stringTable");
    json_writer_object_end(w);
    json_unique_strings_free(us);
    if (r < 0)
        return r;
    return json_writer_finish(w);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

int main(void)
{
    struct thread_data d;
    double mbps[REPEATS], samples_mbps[REPEATS];
    size_t bytes = 0, samples_bytes = 0;

    make_data(&d);
    printf("%-8s %12s %10s %12s %14s\n", "run", "bytes", "seconds", "MB/s", "samples MB/s");
    for (int i = 0; i < REPEATS; i++) {
        struct json_writer *w = NULL;
        double t0, t1;
        int r;

        if (json_writer_new_memory(&w) < 0)
            return 1;
        t0 = now_s();
        r = write_thread(w, &d);
        t1 = now_s();
        if (r < 0) {
            fprintf(stderr, "bench-json: writer error %d\n", r);
            return 1;
        }
        bytes = json_writer_length(w);
        if (t1 <= t0) {
            fprintf(stderr, "bench-json: no time measured for a write: no rate\n");
            return 1;
        }
        mbps[i] = (double)bytes / (t1 - t0) / 1e6;
        json_writer_free(w);

        /* The samples table alone: the hot path. */
        if (json_writer_new_memory(&w) < 0)
            return 1;
        t0 = now_s();
        json_writer_object_begin(w, NULL);
        write_samples(w, &d);
        json_writer_object_end(w);
        r = json_writer_finish(w);
        t1 = now_s();
        if (r < 0)
            return 1;
        samples_bytes = json_writer_length(w);
        if (t1 <= t0) {
            fprintf(stderr, "bench-json: no time measured for the samples table: no rate\n");
            return 1;
        }
        samples_mbps[i] = (double)samples_bytes / (t1 - t0) / 1e6;
        json_writer_free(w);
        printf("%-8d %12zu %10.4f %12.1f %14.1f\n", i + 1, bytes, (double)bytes / mbps[i] / 1e6,
               mbps[i], samples_mbps[i]);
    }
    qsort(mbps, REPEATS, sizeof(double), cmp_double);
    qsort(samples_mbps, REPEATS, sizeof(double), cmp_double);
    printf("thread: %zu bytes (%d samples, %d stacks, %d frames); samples table %zu bytes\n", bytes,
           SAMPLES, STACKS, FRAMES, samples_bytes);
    printf("MB/s min %.1f median %.1f max %.1f; samples table median %.1f\n", mbps[0],
           mbps[REPEATS / 2], mbps[REPEATS - 1], samples_mbps[REPEATS / 2]);
    printf("BENCH json.write_MBps %.1f MB/s\n", mbps[REPEATS / 2]);
    printf("BENCH json.samples_MBps %.1f MB/s\n", samples_mbps[REPEATS / 2]);
    free_data(&d);
    return 0;
}
