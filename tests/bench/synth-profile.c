/* tests/bench/synth-profile.c - synthetic profiles for the benchmarks: timing helpers, a
 * table-driven fake symbolizer, buffer set-up and the write. See synth-profile.h.
 */
#include "tests/bench/synth-profile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buffer/chunk-manager.h"
#include "buffer/chunked-buffer.h"
#include "json/writer.h"
#include "profile/libs.h"

#define SYNTH_CHUNK_BYTES (256u << 10)

_Noreturn void synth_check_failed(const char *file, int line, const char *expr)
{
    fprintf(stderr, "%s: %s:%d: check failed: %s\n", program_invocation_short_name, file, line,
            expr);
    exit(1);
}

double synth_thread_cpu_s(void)
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

double synth_median(double *values, size_t n)
{
    qsort(values, n, sizeof(values[0]), cmp_double);
    return values[n / 2];
}

int synth_resolve(void *userdata, const struct prof_frame_request *requests, size_t count,
                  struct prof_frame_result *results)
{
    const struct synth_symbols *symbols = userdata;

    for (size_t i = 0; i < count; i++) {
        const struct synth_module_names *m;
        uint64_t v = requests[i].vaddr;
        size_t lib = (size_t)(requests[i].lib - symbols->libs->libs);

        results[i] = (struct prof_frame_result){NULL, NULL, 0};
        if (!requests[i].lib || lib >= symbols->libs->count)
            continue;
        m = &symbols->names[lib];
        if (m->unresolved_every && v % m->unresolved_every == 0)
            continue;
        results[i].function = m->functions[(v >> m->stride_shift) % m->function_count];
        if (m->file) {
            results[i].file = m->file;
            results[i].line = (uint32_t)(v % 1000);
        }
    }
    return 0;
}

void synth_buffer_new(uint64_t limit_bytes, int32_t pid, struct buf_chunk_manager **ret_manager,
                      struct buf_chunked_buffer **ret_buffer)
{
    SYNTH_CHECK(buf_chunk_manager_local_new(limit_bytes, SYNTH_CHUNK_BYTES, ret_manager) == 0);
    SYNTH_CHECK(buf_chunked_buffer_new(*ret_manager, pid, ret_buffer) == 0);
}

void synth_buffer_free(struct buf_chunk_manager *manager, struct buf_chunked_buffer *buffer)
{
    (void)buf_chunked_buffer_free(buffer);
    (void)buf_chunk_manager_free(manager);
}

void synth_write_profile(const struct prof_process_info *info, struct buf_chunked_buffer *buffer,
                         const struct prof_symbolizer *symbolizer, char **ret_json, size_t *ret_len)
{
    struct json_writer *w = NULL;

    SYNTH_CHECK(json_writer_new_memory(&w) == 0);
    SYNTH_CHECK(prof_gecko_write_process(w, NULL, info, buffer, symbolizer, NULL) == 0);
    SYNTH_CHECK(json_writer_finish(w) == 0);
    SYNTH_CHECK(json_writer_copy_to(w, ret_json) == 0);
    (void)json_writer_free(w);
    *ret_len = strlen(*ret_json);
}

void synth_write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "w");

    if (!f)
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
    SYNTH_CHECK(f && fwrite(data, 1, len, f) == len);
    SYNTH_CHECK(fclose(f) == 0);
}
