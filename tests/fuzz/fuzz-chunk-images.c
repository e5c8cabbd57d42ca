/* Fuzz target: chunk images from untrusted memory (buf_chunk_images_read_each), as the
 * daemon or a recovery tool would read the chunks of a crashed child. Every block handed to
 * the callback must lie inside the input, which the callback checks by reading it whole. */
#include <stdint.h>
#include <stdlib.h>

#include "buffer/chunk.h"

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
    struct buf_images_stats st;

    (void)buf_chunk_images_read_each(data, size, read_block, &b, &st);
    if (st.blocks > size)
        abort(); /* every block takes at least 2 bytes of input */
    return 0;
}
