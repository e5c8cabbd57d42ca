/* Fuzz target: the global controller fed hostile sequences of already-decoded messages
 * (what a misbehaving fleet can send once the codec accepted the bytes): updates with any
 * numbers, Finals, disconnects, exit profiles. After every step the accounting must add
 * up and the limit must hold unless nothing is left to evict; violations abort(). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/controller.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct input {
    const uint8_t *p;
    size_t left;
};

static uint64_t take(struct input *in, unsigned bytes)
{
    uint64_t v = 0;

    for (unsigned i = 0; i < bytes; i++) {
        v <<= 8;
        if (in->left) {
            v |= *in->p++;
            in->left--;
        }
    }
    return v;
}

static void check(const struct ctl *c)
{
    struct ctl_owner_status owners[64];
    struct ctl_totals t;
    uint64_t unreleased = 0, released = 0, chunks = 0;
    size_t n = ctl_get_owners(c, owners, 64);

    ctl_get_totals(c, &t);
    if (n > 64)
        abort(); /* the fuzzer uses at most 16 owners + the daemon */
    for (size_t i = 0; i < n; i++) {
        unreleased += owners[i].unreleased_bytes;
        released += owners[i].released_bytes;
        chunks += owners[i].released_chunks;
    }
    if (unreleased != t.unreleased_bytes || released != t.released_bytes ||
        chunks != t.released_chunks)
        abort();
    if (t.unreleased_bytes + t.released_bytes > t.global_limit && t.released_chunks != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in = {data, size};
    struct ctl *c;
    uint64_t now = 1u << 20, owned_done = 0;

    if (ctl_new((take(&in, 2) + 1) * 4096, &c) < 0)
        return 0;
    while (in.left) {
        unsigned op = (unsigned)take(&in, 1) % 4;
        int32_t owner = (int32_t)(take(&in, 1) % 17) - 1; /* -1 .. 15: includes invalid */
        struct ctl_chunk chunks[8];
        struct ctl_update u = {0};
        struct ctl_actions a;
        const char *why;

        now += take(&in, 2);
        switch (op) {
        case 0:
        case 1:
            u.final = take(&in, 1) == 0xff;
            u.unreleased_bytes = take(&in, 3) << (take(&in, 1) % 24);
            u.released_bytes = take(&in, 3);
            u.oldest_done_ns = take(&in, 1) ? now - take(&in, 2) : 0;
            u.newly_released_count = (size_t)take(&in, 1) % 9;
            for (size_t i = 0; i < u.newly_released_count; i++)
                chunks[i] = (struct ctl_chunk){now - 1000 + take(&in, 2), take(&in, 3)};
            u.newly_released = chunks;
            (void)ctl_update(c, owner, &u, now, &a, &why);
            break;
        case 2:
            ctl_remove(c, owner, now);
            break;
        default:
            owned_done = owned_done > now ? owned_done + 1 : now;
            (void)ctl_add_owned(c, owned_done, take(&in, 2) + 1, now, &a);
            if (take(&in, 1) & 1)
                ctl_remove_owned(c, owned_done - take(&in, 1));
            break;
        }
        check(c);
    }
    ctl_free(c);
    return 0;
}
