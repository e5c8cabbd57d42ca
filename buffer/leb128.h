/* buffer/leb128.h - unsigned LEB128 (protobuf "varint") encoding and decoding.
 *
 * Block sizes in chunks and frame lengths on the wire use it. A u64 takes at most
 * BUF_ULEB128_MAX_BYTES bytes; a tenth byte may carry only the top bit. Decoding never
 * reads past the given length, so it is safe on bytes from another process.
 */
#ifndef FLEETPROF_BUFFER_LEB128_H
#define FLEETPROF_BUFFER_LEB128_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define BUF_ULEB128_MAX_BYTES 10

/* Number of bytes buf_uleb128_encode() writes for value (1..10). */
size_t buf_uleb128_size(uint64_t value);

/* Writes value at out (at least buf_uleb128_size(value) bytes); returns the byte count. */
size_t buf_uleb128_encode(uint64_t value, uint8_t *out);

/* Decodes one value from the len bytes at p. Returns the bytes consumed (1..10) and stores
 * the value in *ret_value; -EAGAIN if p ends before the last byte (nothing stored);
 * -EOVERFLOW if the encoding does not fit 64 bits or is longer than 10 bytes. */
ssize_t buf_uleb128_decode(const uint8_t *p, size_t len, uint64_t *ret_value);

/* Byte-at-a-time decoder, for values that straddle two chunks or two reads.
 * Zero-initialise it (or call buf_uleb128_decoder_init) before the first byte. */
struct buf_uleb128_decoder {
    uint64_t value; /* accumulated so far */
    unsigned shift; /* bits consumed: 7 per byte */
};

void buf_uleb128_decoder_init(struct buf_uleb128_decoder *d);

/* Feeds one byte. Returns 1 when the value is complete (stored in *ret_value, and the
 * decoder is reset for the next value), 0 when more bytes are needed, -EOVERFLOW when the
 * encoding cannot be a u64 (the decoder must then be re-initialised). */
int buf_uleb128_decoder_feed(struct buf_uleb128_decoder *d, uint8_t byte, uint64_t *ret_value);

#endif /* FLEETPROF_BUFFER_LEB128_H */
