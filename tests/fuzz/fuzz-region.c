/* Fuzz target: a shared chunk region (its description, crash record and chunks) as the daemon or
 * `fleetprof recover` reads what a dead (or hostile) child left (buf_region_read_each). Every block
 * handed to the callback must lie inside the input, which the callback checks by reading it whole.
 */
#include <stdint.h>
#include <stdlib.h>

#include "buffer/region.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct bounds {
    const uint8_t *lo, *hi;
};

static int read_block(struct buf_entry_reader *r, uint64_t index, void *userdata)
{
    const struct bounds *b = userdata;
    uint8_t byte;

    (void)index;
    for (int i = 0; i < 2; i++)
        if (r->len[i] > 0 && (r->span[i] < b->lo || r->span[i] + r->len[i] > b->hi))
            abort();
    while (buf_entry_reader_remaining(r) > 0)
        if (buf_entry_reader_read(r, &byte, 1) != 0)
            abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct bounds b = {data, data + size};
    struct buf_region_stats st;
    struct buf_region_crash crash;
    const uint8_t *meta;
    size_t meta_len;

    if (buf_region_read_meta(data, size, &meta, &meta_len) == 0 &&
        (meta < data || meta_len > size || meta + meta_len > data + size))
        abort();
    if (buf_region_read_crash(data, size, &crash) == 0 &&
        crash.frame_count > BUF_REGION_CRASH_FRAMES)
        abort();
    (void)buf_region_read_each(data, size, read_block, &b, &st);
    if (st.blocks > size || st.chunks > st.slots)
        abort(); /* every block takes at least 2 bytes; a chunk needs a slot */
    return 0;
}
