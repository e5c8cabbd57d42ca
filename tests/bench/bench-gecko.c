/* tests/bench/bench-gecko.c - speed of prof_gecko_write_process() alone, on synthetic buffers.
 *
 * Two buffers of 8 MiB (256 KiB chunks, the 64-children gather benchmark's settings), filled
 * with deterministic entries (fixed times, no clock, no symbolization through libdw):
 *   markers  700000 text markers "flood" / "m <seq>" (the buffer wraps, ~238k survive) and a
 *            shallow sample every 1000 markers: bench-gather.py part 1's `bench-fleet fill`;
 *   samples  4 threads of 30-deep stacks out of 64 leaves with labels, same-samples, counters
 *            and a fake symbolizer: a busy, sampled process.
 * Each is written RUNS times as the child's gather thread does (memory writer, then one
 * copy), timed with the thread's CPU clock. Prints `BENCH gecko.<case>_MBps` (MB = 1e6 bytes
 * of JSON per CPU second). With an output directory argument, also writes each profile to
 * DIR/<case>.json, so two builds can be compared byte for byte. Measures, never asserts on
 * time.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buffer/chunk-manager.h"
#include "buffer/chunked-buffer.h"
#include "buffer/json-writer.h"
#include "child/profile/entries.h"
#include "child/profile/gecko.h"
#include "child/profile/libs.h"

#define RUNS        11
#define BUFFER_MIB  8
#define CHUNK_BYTES (256u << 10)
#define START_NS    1000000000ull

#define CHECK(x)                                                                               \
    do {                                                                                       \
        if (!(x)) {                                                                            \
            fprintf(stderr, "bench-gecko: %s:%d: check failed: %s\n", __FILE__, __LINE__, #x); \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static double cpu_s(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static char exe_path[] = "/bench/program", exe_name[] = "program";
static char lib_path[] = "/bench/libbench.so", lib_name[] = "libbench.so";
static struct prof_lib libs_array[] = {
        {.start = 0x400000, .end = 0x500000, .bias = 0x400000, .path = exe_path, .name = exe_name},
        {.start = 0x7f0000000000,
         .end = 0x7f0000100000,
         .bias = 0x7f0000000000,
         .path = lib_path,
         .name = lib_name},
};
static const struct prof_libs libs = {libs_array, 2};

static int fake_resolve(void *userdata, const struct prof_frame_request *requests, size_t count,
                        struct prof_frame_result *results)
{
    static char names[64][48];

    (void)userdata;
    for (size_t i = 0; i < 64; i++)
        (void)snprintf(names[i], sizeof(names[i]), "bench_function_%zu(int, char const*)", i);
    for (size_t i = 0; i < count; i++) {
        uint64_t v = requests[i].vaddr;

        results[i].function = v % 17 == 0 ? NULL : names[(v >> 4) % 64];
        results[i].file = "bench.c";
        results[i].line = (uint32_t)(v % 1000);
    }
    return 0;
}

static void fill_markers(struct buf_chunked_buffer *b)
{
    uint64_t t = START_NS + 1000000;
    char text[32];

    for (long seq = 0; seq < 700000; seq++) {
        struct prof_marker m = {.tid = 100, .category = 7, .phase = PROF_PHASE_INSTANT};

        t += 170 + (uint64_t)(seq % 7) * 61;
        m.start_ns = t;
        m.name = (struct prof_string){"flood", 5};
        m.payload_kind = PROF_PAYLOAD_TEXT;
        m.text.len = (size_t)snprintf(text, sizeof(text), "m %ld", seq);
        m.text.data = text;
        CHECK(prof_entry_put_marker(b, &m) == 0);
        if (seq % 1000 == 999) {
            uint64_t frames[6] = {0x400100 + (uint64_t)(seq % 5) * 16,
                                  0x400200,
                                  0x400300,
                                  0x7f0000000400,
                                  0x7f0000000500,
                                  0x400010};
            struct prof_sample s = {.tid = 100,
                                    .time_ns = t,
                                    .cpu_delta_ns = 600000 + (uint64_t)seq % 1000,
                                    .frame_count = 6,
                                    .frames = frames};

            CHECK(prof_entry_put_sample(b, &s) == 0);
        }
    }
}

static void fill_samples(struct buf_chunked_buffer *b)
{
    uint64_t t = START_NS + 1000000;
    uint64_t frames[32];
    struct prof_label labels[2] = {
            {.name = {"Startup::Work", 13}, .category = 7, .native_depth = 3},
            {.name = {"inner", 5}, .category = 3, .native_depth = 0},
    };

    for (uint32_t i = 0; i < 200000; i++) {
        int32_t tid = 100 + (int32_t)(i % 4);
        uint32_t leaf = (i * 2654435761u) >> 26; /* 0..63 */

        t += 250;
        if (i % 5 == 4) {
            CHECK(prof_entry_put_same_sample(b, tid, t) == 0);
        } else {
            struct prof_sample s = {.tid = tid,
                                    .time_ns = t,
                                    .cpu_delta_ns = 999000 + i % 2000,
                                    .frame_count = 30,
                                    .frames = frames,
                                    .label_count = i / 256 % 3 == 0 ? 2 : 0,
                                    .labels = labels};

            frames[0] = (leaf % 2 ? 0x7f0000001000 : 0x401000) + leaf * 64;
            for (uint32_t d = 1; d < 30; d++)
                frames[d] = 0x402000 + (d % 10) * 0x100 + (d < 4 ? leaf % 4 : 0) * 8;
            CHECK(prof_entry_put_sample(b, &s) == 0);
        }
        if (i % 100 == 0) {
            struct prof_counter_sample c = {0, t, (int64_t)(i % 7) * 4096 - 8192, 3};

            CHECK(prof_entry_put_counter(b, &c) == 0);
        }
        if (i % 50 == 0) {
            struct prof_marker m = {.tid = tid,
                                    .category = 2,
                                    .phase = PROF_PHASE_INTERVAL,
                                    .start_ns = t - 100000,
                                    .end_ns = t,
                                    .name = {"Step", 4}};

            CHECK(prof_entry_put_marker(b, &m) == 0);
        }
    }
}

static void run_case(const char *name, void (*fill)(struct buf_chunked_buffer *),
                     const char *out_dir)
{
    static const struct prof_thread_info threads[] = {
            {100, "main", START_NS, 0, true},
            {101, "worker 1", START_NS + 5000, 0, false},
            {102, "worker 2", START_NS + 6000, 0, false},
            {103, "worker 3", START_NS + 7000, 0, false},
    };
    static const struct prof_counter_info counters[] = {{0, "malloc", "Memory", "bytes"}};
    struct prof_symbolizer symbolizer = {fake_resolve, NULL};
    struct prof_process_info info = {
            .pid = 100,
            .ppid = 1,
            .name = "bench",
            .product = "bench-gecko",
            .process_type = "tab",
            .start_ns = START_NS,
            .start_epoch_ms = 1.7e12,
            .interval_ns = 1000000,
            .stackwalk = "dwarf",
            .threads = threads,
            .thread_count = 4,
            .counters = counters,
            .counter_count = 1,
            .libs = &libs,
    };
    struct buf_chunk_manager *manager = NULL;
    struct buf_chunked_buffer *buffer = NULL;
    double times[RUNS];
    size_t bytes = 0;

    CHECK(buf_chunk_manager_local_new((uint64_t)BUFFER_MIB << 20, CHUNK_BYTES, &manager) == 0);
    CHECK(buf_chunked_buffer_new(manager, info.pid, &buffer) == 0);
    fill(buffer);
    for (int run = 0; run < RUNS; run++) {
        struct json_writer *w = NULL;
        char *json = NULL;
        double t0 = cpu_s();

        CHECK(json_writer_new_memory(&w) == 0);
        CHECK(prof_gecko_write_process(w, NULL, &info, buffer, &symbolizer, NULL) == 0);
        CHECK(json_writer_finish(w) == 0);
        CHECK(json_writer_copy_to(w, &json) == 0);
        w = json_writer_free(w);
        bytes = strlen(json);
        times[run] = cpu_s() - t0;
        if (run == 0 && out_dir) {
            char path[4096];
            FILE *f;

            (void)snprintf(path, sizeof(path), "%s/%s.json", out_dir, name);
            f = fopen(path, "w");
            CHECK(f && fwrite(json, 1, bytes, f) == bytes && fclose(f) == 0);
        }
        free(json);
    }
    qsort(times, RUNS, sizeof(times[0]), cmp_double);
    CHECK(times[0] > 0); /* a rate needs CPU time measured: never an inf */
    printf("%-8s %10.1f MB %8.1f ms median %8.1f ms best\n", name, (double)bytes / 1e6,
           times[RUNS / 2] * 1e3, times[0] * 1e3);
    printf("BENCH gecko.%s_MBps %.1f MB/s\n", name, (double)bytes / 1e6 / times[RUNS / 2]);
    buffer = buf_chunked_buffer_free(buffer);
    manager = buf_chunk_manager_free(manager);
}

int main(int argc, char **argv)
{
    const char *out_dir = argc > 1 && argv[1][0] ? argv[1] : NULL;
    const char *only = argc > 2 ? argv[2] : NULL;

    if (!only || !strcmp(only, "markers"))
        run_case("markers", fill_markers, out_dir);
    if (!only || !strcmp(only, "samples"))
        run_case("samples", fill_samples, out_dir);
    return 0;
}
