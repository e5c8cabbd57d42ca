/* Fuzz target: a shared chunk region (its description, crash record and chunks) as the daemon or
 * `fleetprof recover` reads what a dead (or hostile) child left (buf_region_read_each). Every block
 * handed to the callback must lie inside the input, which the callback checks by reading it whole.
 * Also the check the daemon makes of a live child's header page before it writes evictions
 * there (buf_region_header_check): it must agree with the readers' own header check; and the
 * exec record (buf_region_read_exec): what it gives is a string cut to the caller's room;
 * and its CPU (buf_region_read_exec_cpu), given only by a region's header that exec'd.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "block-walk.h"
#include "buffer/region.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct block_bounds b = {data, data + size};
    struct buf_region_stats st;
    struct buf_region_crash crash;
    const uint8_t *meta;
    size_t meta_len;

    if (size >= sizeof(struct buf_region_header)) {
        struct buf_region_header h, h2;

        memcpy(&h, data, sizeof(h));
        if ((buf_region_header_check(&h, size) == 0) !=
            (buf_region_read_header(data, size, &h2) == 0))
            abort();
    }
    if (buf_region_read_meta(data, size, &meta, &meta_len) == 0 &&
        (meta < data || meta_len > size || meta + meta_len > data + size))
        abort();
    if (buf_region_read_crash(data, size, &crash) == 0 &&
        crash.frame_count > BUF_REGION_CRASH_FRAMES)
        abort();
    {
        char into[64];
        uint64_t exec_ns = 0;

        into[sizeof(into) - 1] = 'x';
        if (buf_region_read_exec(data, size, &exec_ns, into, sizeof(into) - 1) == 0 &&
            (exec_ns == 0 || strlen(into) >= sizeof(into) - 1 || into[sizeof(into) - 1] != 'x'))
            abort();
    }
    {
        /* The exec record's CPU: only from a region's header that says it exec'd. */
        struct buf_region_header h;
        uint64_t cpu = 0;
        int r = buf_region_read_exec_cpu(data, size, &cpu);

        if (r != 0 && r != -ENOENT && r != -EBADMSG)
            abort();
        if (r == 0) {
            memcpy(&h, data, sizeof(h));
            if (h.magic != BUF_REGION_MAGIC || h.exec_ns == 0)
                abort();
        }
    }
    (void)buf_region_read_each(data, size, block_read_within, &b, &st);
    if (st.blocks > size || st.chunks > st.slots)
        abort(); /* every block takes at least 2 bytes; a chunk needs a slot */
    return 0;
}
