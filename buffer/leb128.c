/* buffer/leb128.c - see leb128.h. */
#include "buffer/leb128.h"

#include <errno.h>

size_t buf_uleb128_size(uint64_t value)
{
    size_t n = 1;

    while (value >= 0x80) {
        value >>= 7;
        n++;
    }
    return n;
}

size_t buf_uleb128_encode(uint64_t value, uint8_t *out)
{
    size_t n = 0;

    while (value >= 0x80) {
        out[n++] = (uint8_t)(value | 0x80);
        value >>= 7;
    }
    out[n++] = (uint8_t)value;
    return n;
}

void buf_uleb128_decoder_init(struct buf_uleb128_decoder *d)
{
    d->value = 0;
    d->shift = 0;
}

int buf_uleb128_decoder_feed(struct buf_uleb128_decoder *d, uint8_t byte, uint64_t *ret_value)
{
    uint64_t bits = byte & 0x7fu;

    /* The 10th byte (shift 63) may only hold the top bit of a u64. */
    if (d->shift == 63 && bits > 1)
        return -EOVERFLOW;
    if (d->shift > 63)
        return -EOVERFLOW;
    d->value |= bits << d->shift;
    if (byte & 0x80u) {
        d->shift += 7;
        return 0;
    }
    *ret_value = d->value;
    buf_uleb128_decoder_init(d);
    return 1;
}

ssize_t buf_uleb128_decode(const uint8_t *p, size_t len, uint64_t *ret_value)
{
    struct buf_uleb128_decoder d = {0};
    size_t limit = len < BUF_ULEB128_MAX_BYTES ? len : BUF_ULEB128_MAX_BYTES;

    /* Most values on the wire (tags, small lengths) are one byte. */
    if (len > 0 && p[0] < 0x80) {
        *ret_value = p[0];
        return 1;
    }
    for (size_t i = 0; i < limit; i++) {
        int r = buf_uleb128_decoder_feed(&d, p[i], ret_value);

        if (r < 0)
            return r;
        if (r > 0)
            return (ssize_t)(i + 1);
    }
    return len < BUF_ULEB128_MAX_BYTES ? -EAGAIN : -EOVERFLOW;
}
