/* Fuzz target: the update ring in a child's region header page, as the daemon takes it
 * (buf_region_updates_take): the owner is another process and may write anything there. The
 * input is the reader's state (16 bytes) then the ring's bytes. A take must stay within the
 * ring, hand out at most a ring's worth of chunks, none destroyed by its own counts, and move
 * the read point to what it took; the owner's next publication must then fit (the reader
 * just made room), whatever else the page says.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/region-updates.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct buf_region_updates_take t;
    struct buf_region_updates_reader rd;
    struct buf_region_updates *ring;
    const char *why = NULL;
    uint8_t *page;
    int r;

    if (size < sizeof(rd))
        return 0;
    memcpy(&rd, data, sizeof(rd));
    data += sizeof(rd);
    size -= sizeof(rd);
    /* Exactly the page, so that a step outside it is caught by the sanitizer. */
    page = aligned_alloc(4096, 4096);
    if (!page)
        return 0;
    memset(page, 0, 4096);
    ring = buf_region_updates_of(page);
    memcpy(ring, data, size < sizeof(*ring) ? size : sizeof(*ring));
    r = buf_region_updates_take(ring, &rd, &t, &why);
    if (r < 0 && !why)
        abort(); /* a refusal says why */
    if (r == 1) {
        struct buf_update u = {.kind = BUF_UPDATE_CHANGE};
        struct buf_released_chunk k = {UINT64_MAX, 1};

        if (t.count > BUF_REGION_UPDATES_CAPACITY || rd.read != ring->read ||
            rd.read != ring->written)
            abort();
        for (size_t i = 0; i < t.count; i++)
            if (t.oldest_done_ns && t.chunks[i].done_ns < t.oldest_done_ns)
                abort();
        /* Everything was taken: one chunk fits, unless the owner's half of the page is
         * nonsense the owner itself would never write (magic, capacity). */
        u.newly_released = &k;
        u.newly_released_count = 1;
        if (buf_region_updates_publish(ring, &u) != 0)
            abort();
        if (ring->written != rd.read + 1)
            abort();
    }
    free(page);
    return 0;
}
