/* Fuzz target: chunk images from untrusted memory (buf_chunk_images_read_each), as the
 * daemon or a recovery tool would read the chunks of a crashed child. Every block handed to
 * the callback must lie inside the input, which the callback checks by reading it whole. */
#include <stdint.h>
#include <stdlib.h>

#include "block-walk.h"
#include "buffer/chunk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct block_bounds b = {data, data + size};
    struct buf_images_stats st;

    (void)buf_chunk_images_read_each(data, size, block_read_within, &b, &st);
    if (st.blocks > size)
        abort(); /* every block takes at least 2 bytes of input */
    return 0;
}
