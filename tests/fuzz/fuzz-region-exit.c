/* Fuzz target: the exit profile the daemon builds from a short-lived child's chunk region
 * (prof_region_exit_profile(), ChunkManagerUpdate.exit_in_region). The input is the region
 * file a hostile child hands over with Hello: the daemon copies only the parts in use (header,
 * current description, slots up to their last block) into a compact image, then checks that
 * copy like a dead child's (region header, slots, blocks, the ProcessDescription with its
 * exit fields). Whatever the bytes, the build fails with an error or writes one valid JSON
 * value; the scratch image is reused from one input to the next, as the daemon reuses it.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "json-check.h"
#include "json/writer.h"
#include "profile/gecko.h"
#include "profile/region-image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Names every other address, so that both the named and the "module+0x..." paths run. */
static int resolve_some(void *userdata, const struct prof_frame_request *requests, size_t count,
                        struct prof_frame_result *results)
{
    (void)userdata;
    (void)requests;
    for (size_t i = 0; i < count; i++)
        results[i] = (struct prof_frame_result){i % 2 ? "fuzz_function" : NULL, NULL, 0};
    return 0;
}

static uint8_t *scratch; /* kept across inputs, as the daemon keeps its own */
static size_t scratch_cap;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct prof_symbolizer symbolizer = {resolve_some, NULL};
    struct json_writer *w = NULL;
    int fd = memfd_create("fuzz-region-exit", MFD_CLOEXEC);
    char *json = NULL;
    int r;

    if (fd < 0)
        return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        (void)close(fd);
        return 0;
    }
    if (json_writer_new_memory(&w) < 0) {
        (void)close(fd);
        return 0;
    }
    r = prof_region_exit_profile(fd, (uint64_t)64 << 20, &scratch, &scratch_cap, NULL, &symbolizer,
                                 w, NULL);
    if (r == 0 && json_writer_finish(w) == 0 && json_writer_copy_to(w, &json) == 0) {
        if (!test_json_valid(json, json_writer_length(w)))
            abort();
        free(json);
    }
    json_writer_free(w);
    (void)close(fd);
    return 0;
}
