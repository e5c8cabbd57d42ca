/* Benchmark of the chunked buffer: 32-byte puts on one thread (heap chunks, and chunks in a
 * shared region as a crash-surviving child has them: buffer/region.h) and on two contending
 * threads, and read-back throughput, with the runtime's default sizes (256 KiB chunks,
 * 64 MiB local limit). Prints a table and `BENCH <metric> <value> <unit>` lines; the median
 * of several runs is reported. Measures, never asserts: the machine is shared and noisy. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buffer/chunk-manager.h"
#include "buffer/chunked-buffer.h"
#include "buffer/region.h"

#define RUNS          5
#define PUTS          4000000
#define PUTS_PER_TASK 2000000

static double now_s(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
}

static void open_buffer(struct buf_chunk_manager **m, struct buf_chunked_buffer **b)
{
    if (buf_chunk_manager_local_new(BUF_LOCAL_DEFAULT_LIMIT, BUF_CHUNK_DEFAULT_BYTES, m) < 0 ||
        buf_chunked_buffer_new(*m, 1, b) < 0) {
        fprintf(stderr, "bench-buffer: out of memory\n");
        exit(1);
    }
}

/* The same with the chunks in a memfd region (a full buffer: 64 MiB of it mapped). */
static void open_region_buffer(struct buf_region **r, struct buf_chunk_manager **m,
                               struct buf_chunked_buffer **b)
{
    if (buf_region_new(BUF_CHUNK_DEFAULT_BYTES, NULL, r) < 0 ||
        buf_chunk_manager_local_new(BUF_LOCAL_DEFAULT_LIMIT, BUF_CHUNK_DEFAULT_BYTES, m) < 0 ||
        buf_chunk_manager_local_set_region(*m, *r) < 0 || buf_chunked_buffer_new(*m, 1, b) < 0) {
        fprintf(stderr, "bench-buffer: cannot make a region buffer\n");
        exit(1);
    }
}

static double put_run(struct buf_chunked_buffer *b, long *failures)
{
    uint8_t entry[32] = {0};
    double t0 = now_s();

    for (int i = 0; i < PUTS; i++) {
        entry[0] = (uint8_t)i;
        if (buf_chunked_buffer_put_bytes(b, entry, sizeof(entry), NULL) != 0)
            (*failures)++;
    }
    return (now_s() - t0) * 1e9 / PUTS;
}

static void close_buffer(struct buf_chunk_manager **m, struct buf_chunked_buffer **b)
{
    *b = buf_chunked_buffer_free(*b);
    *m = buf_chunk_manager_free(*m);
}

struct task {
    struct buf_chunked_buffer *b;
    long failures;
};

static void *put_task(void *p)
{
    struct task *t = p;
    uint8_t entry[32];

    memset(entry, 0x42, sizeof(entry));
    for (int i = 0; i < PUTS_PER_TASK; i++) {
        entry[0] = (uint8_t)i;
        if (buf_chunked_buffer_put_bytes(t->b, entry, sizeof(entry), NULL) != 0)
            t->failures++;
    }
    return NULL;
}

static int count_bytes(struct buf_entry_reader *r, uint64_t index, void *userdata)
{
    uint64_t *total = userdata;
    uint8_t tmp[64];
    size_t n = buf_entry_reader_remaining(r);

    (void)index;
    (void)buf_entry_reader_read(r, tmp, n < sizeof(tmp) ? n : sizeof(tmp));
    *total += n;
    return 0;
}

int main(void)
{
    double put1[RUNS], put1_region[RUNS], put2[RUNS], read_mbps[RUNS];
    long failures = 0;

    for (int run = 0; run < RUNS; run++) {
        struct buf_chunk_manager *m;
        struct buf_chunked_buffer *b;
        struct buf_region *region;
        struct task tasks[2];
        pthread_t th[2];
        uint64_t total = 0;
        double t0, t1;

        /* One thread, chunks in a shared region (interleaved with the heap runs). */
        open_region_buffer(&region, &m, &b);
        put1_region[run] = put_run(b, &failures);
        close_buffer(&m, &b);
        region = buf_region_free(region);

        /* One thread. */
        open_buffer(&m, &b);
        put1[run] = put_run(b, &failures);

        /* Read back what survived (a full 64 MiB buffer). */
        t0 = now_s();
        (void)buf_chunked_buffer_read_each(b, count_bytes, &total);
        t1 = now_s();
        if (total == 0 || t1 <= t0) {
            /* No rate from nothing read, or from no time measured (never a nan or inf). */
            fprintf(stderr, "bench-buffer: read_each read %llu bytes in %.9f s: no rate\n",
                    (unsigned long long)total, t1 - t0);
            return 1;
        }
        read_mbps[run] = (double)total / 1e6 / (t1 - t0);
        close_buffer(&m, &b);

        /* Two threads contending for one buffer; ns per put over the whole run. */
        open_buffer(&m, &b);
        t0 = now_s();
        for (int i = 0; i < 2; i++) {
            tasks[i] = (struct task){b, 0};
            if (pthread_create(&th[i], NULL, put_task, &tasks[i]) != 0)
                return 1;
        }
        for (int i = 0; i < 2; i++) {
            (void)pthread_join(th[i], NULL);
            failures += tasks[i].failures;
        }
        t1 = now_s();
        put2[run] = (t1 - t0) * 1e9 / (2.0 * PUTS_PER_TASK);
        close_buffer(&m, &b);
    }

    printf("%-34s %12s %12s %12s\n", "buffer benchmark", "median", "best", "unit");
    {
        double p1 = median(put1, RUNS), p2 = median(put2, RUNS), rd = median(read_mbps, RUNS);
        double pr = median(put1_region, RUNS);

        printf("%-34s %12.1f %12.1f %12s\n", "put 32 B, one thread", p1, put1[0], "ns/put");
        printf("%-34s %12.1f %12.1f %12s\n", "put 32 B, one thread, shared region", pr,
               put1_region[0], "ns/put");
        printf("%-34s %12.1f %12.1f %12s\n", "put 32 B, two threads contending", p2, put2[0],
               "ns/put");
        printf("%-34s %12.0f %12.0f %12s\n", "read_each of a full 64 MiB buffer", rd,
               read_mbps[RUNS - 1], "MB/s");
        printf("failed puts: %ld (expected 0)\n", failures);
        printf("BENCH buffer.put_32B_ns %.1f ns\n", p1);
        printf("BENCH buffer.put_32B_region_ns %.1f ns\n", pr);
        printf("BENCH buffer.put_32B_2threads_ns %.1f ns\n", p2);
        printf("BENCH buffer.read_MBps %.0f MB/s\n", rd);
    }
    return failures ? 1 : 0;
}
