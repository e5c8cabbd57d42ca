/* json/writer.h - streaming, chunked JSON writer and per-thread unique-string table.
 *
 * Writes Gecko profiles (hundreds of MB) without ever building one huge string: output goes
 * into a list of fixed-size chunks (memory writer) or through one chunk to a file descriptor
 * (fd writer). Whatever bytes a caller passes, the output is valid UTF-8 and, once
 * json_writer_finish() returns 0, one complete JSON value. The first error is latched and
 * turns every later call into a cheap no-op, so callers check once at the end. Used by the
 * child's gather thread (one process profile) and by the daemon (the fleet profile, splicing
 * child JSON into it). Modelled on Gecko's SpliceableChunkedJSONWriter and UniqueJSONStrings.
 *
 * Thread-safety: none. A writer (and a unique-string table) belongs to one thread at a time;
 * it may be handed to another thread, never shared. No function is async-signal-safe.
 */
#ifndef FLEETPROF_JSON_WRITER_H
#define FLEETPROF_JSON_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Containers (objects and arrays) may nest this deep; one more is -EINVAL. */
#define JSON_WRITER_MAX_DEPTH 64

/* Size of an fd writer's one chunk and of a memory writer's small chunks, header included
 * (one malloc each). A memory writer's first JSON_WRITER_SMALL_CHUNKS chunks are small; the
 * later ones are JSON_WRITER_BIG_CHUNK_BYTES (one transparent huge page), mmap'd. */
#define JSON_WRITER_CHUNK_BYTES     (64 * 1024)
#define JSON_WRITER_SMALL_CHUNKS    8
#define JSON_WRITER_BIG_CHUNK_BYTES (2 * 1024 * 1024)

struct json_writer; /* opaque */

/* Creates a writer that keeps its output in memory, in a list of chunks: small ones, then
 * big ones where transparent huge pages can back them (no chunk is allocated before the first
 * byte; every chunk is given back when the writer is freed). On success returns 0 and stores
 * the writer in *ret (caller owns it); otherwise -EINVAL (ret NULL) or -ENOMEM, *ret
 * untouched. */
int json_writer_new_memory(struct json_writer **ret);

/* Creates a writer that buffers one chunk and writes each full chunk to fd (borrowed: it must
 * stay open until json_writer_finish(), and is never closed by the writer). The fd should be
 * blocking: -EAGAIN from a non-blocking fd is latched like any other write error. Writes to a
 * socket use MSG_NOSIGNAL; for a pipe whose reader went away the caller must ignore SIGPIPE
 * to get -EPIPE instead of the signal. Returns 0, -EINVAL (fd < 0, ret NULL) or -ENOMEM. */
int json_writer_new_fd(int fd, struct json_writer **ret);

/* Frees the writer and its chunks. Unflushed bytes of an fd writer are dropped, so call
 * json_writer_finish() first. Accepts NULL; always returns NULL. */
struct json_writer *json_writer_free(struct json_writer *w);

/* Returns 0, or the first error latched: -ENOMEM, a write error of an fd writer (-EPIPE,
 * -EBADF, -EIO, ...), or -EINVAL for misuse (see below). Once set it never changes. */
int json_writer_error(const struct json_writer *w);

/* Values and containers.
 *
 * key is NULL at the root and inside arrays, and a NUL-terminated property name (escaped like a
 * string, borrowed for the call) inside objects; anything else latches -EINVAL. The root holds
 * exactly one value: a second one latches -EINVAL. Opening a container deeper than
 * JSON_WRITER_MAX_DEPTH, closing the wrong kind of container or one that is not open latch
 * -EINVAL. Running out of memory latches -ENOMEM; an fd writer latches its write error. These
 * functions return nothing: check json_writer_error() or json_writer_finish() when it suits.
 * After an error they do nothing. w must not be NULL. */
void json_writer_object_begin(struct json_writer *w, const char *key);
void json_writer_object_end(struct json_writer *w);
void json_writer_array_begin(struct json_writer *w, const char *key);
void json_writer_array_end(struct json_writer *w);

void json_writer_int(struct json_writer *w, const char *key, int64_t value);
void json_writer_uint(struct json_writer *w, const char *key, uint64_t value);
/* The shortest of %.15g and %.17g that reads back as the same double, always with '.' as the
 * decimal point whatever the locale; NaN and infinities are written as null. */
void json_writer_double(struct json_writer *w, const char *key, double value);
void json_writer_bool(struct json_writer *w, const char *key, bool value);
void json_writer_null(struct json_writer *w, const char *key);

/* A millisecond time from integer nanoseconds: the exact decimal value of ns / 1e6 with at
 * most 6 decimals and no trailing zeros ("1.5", "2", "0.000001", "-1.5"). Exact for every
 * int64_t; no floating point is involved. */
void json_writer_time_ms(struct json_writer *w, const char *key, int64_t ns);

/* A string from the NUL-terminated s (borrowed; NULL latches -EINVAL), or from len bytes at s
 * (which may contain NUL). '"', '\\' and control bytes are escaped; valid UTF-8 is copied as
 * is; each byte of an invalid UTF-8 sequence (bad lead byte, truncated sequence, overlong
 * form, surrogate, above U+10FFFF) becomes U+FFFD. */
void json_writer_string(struct json_writer *w, const char *key, const char *s);
void json_writer_string_len(struct json_writer *w, const char *key, const char *s, size_t len);

/* Raw values: for hot loops that write many small values of one shape (the rows of a
 * profile's samples and markers) with one call instead of one per field.
 *
 * json_writer_raw_begin() does what every value function does first (state checks, the
 * comma, the key) and returns where the caller may store up to max_bytes (at most
 * JSON_WRITER_RAW_MAX_BYTES, else -EINVAL is latched); it returns NULL if w is, or just
 * became, in error: then store nothing and do not call json_writer_raw_end(). The caller
 * stores exactly one complete JSON value there, valid UTF-8 (the json_raw_* helpers below
 * write the same bytes as the value functions), then passes the end of what it stored to
 * json_writer_raw_end(). No other call on w may come in between. */
#define JSON_WRITER_RAW_MAX_BYTES 8192
char *json_writer_raw_begin(struct json_writer *w, const char *key, size_t max_bytes);
void json_writer_raw_end(struct json_writer *w, char *end);

/* Each helper stores one value at p, which must have room for it, and returns its end.
 * Numbers need JSON_RAW_NUMBER_BYTES; a string of len bytes JSON_RAW_STRING_BYTES(len). The
 * bytes are those of json_writer_uint(), _int(), _time_ms() and _string_len(). */
#define JSON_RAW_NUMBER_BYTES      32
#define JSON_RAW_STRING_BYTES(len) (2 + 6 * (size_t)(len))
char *json_raw_uint(char *p, uint64_t value);
char *json_raw_int(char *p, int64_t value);
char *json_raw_time_ms(char *p, int64_t ns);
char *json_raw_string(char *p, const char *s, size_t len);

/* Splicing.
 *
 * json_writer_splice_text() writes the len bytes at json (borrowed) verbatim as one value: the
 * caller guarantees that they are one complete, valid JSON value (not checked; len 0 latches
 * -EINVAL).
 *
 * json_writer_splice_writer() writes the one complete value held by other, which must be a
 * memory writer whose root value is written (else -EINVAL is latched in w) and not w itself.
 * Into a memory writer, other's chunks are moved (pointer moves, no byte is copied), except
 * that a value small enough to fit in the room left in w's current chunk is copied there so
 * that small splices waste no space. Into an fd writer, other's chunks are written to the fd.
 * Either way other is left empty, with no error and no value, ready for reuse. If other has
 * latched an error, w latches the same error and other is left as it was. */
void json_writer_splice_text(struct json_writer *w, const char *key, const char *json, size_t len);
void json_writer_splice_writer(struct json_writer *w, const char *key, struct json_writer *other);

/* Ends writing: flushes an fd writer's buffered bytes and returns the latched error (0 when
 * everything went well). Latches -EINVAL first if a container is still open or no root value
 * was written. May be called more than once; writing after it latches -EINVAL (the root
 * value is complete). */
int json_writer_finish(struct json_writer *w);

/* Bytes produced so far: buffered and already written for an fd writer. */
size_t json_writer_length(const struct json_writer *w);

/* Copies a memory writer's output into one malloc'd NUL-terminated string stored in
 * *ret_string (caller frees it; json_writer_length() gives its length). Returns 0; the
 * latched error if any (the output would be incomplete); -EINVAL for an fd writer; -ENOMEM.
 * Does not check that the document is complete. */
int json_writer_copy_to(const struct json_writer *w, char **ret_string);

/* Calls cb(data, len, userdata) for each non-empty piece of a memory writer's output, in
 * order, without copying; data is borrowed until the writer is next written to or freed. A
 * negative return from cb stops the walk and is returned. Otherwise returns 0, the latched
 * error, or -EINVAL for an fd writer. */
typedef int (*json_writer_chunk_cb)(const char *data, size_t len, void *userdata);
int json_writer_each_chunk(const struct json_writer *w, json_writer_chunk_cb cb, void *userdata);

/* Unique strings: Gecko's per-thread stringTable. Equal byte strings get the same index,
 * indexes count up from 0 in order of first appearance and never change. The table keeps its
 * own copies. */
struct json_unique_strings; /* opaque */

/* Returns 0 and stores a new empty table in *ret, or -ENOMEM (*ret untouched). */
int json_unique_strings_new(struct json_unique_strings **ret);

/* Accepts NULL; always returns NULL. */
struct json_unique_strings *json_unique_strings_free(struct json_unique_strings *us);

/* Looks up the len bytes at s (borrowed; may contain NUL), adding a copy if new, and stores
 * its index in *ret_index. Returns 0, -EINVAL (s NULL with len > 0), -ENOMEM or -E2BIG (the
 * table is full at UINT32_MAX strings); on failure the table is unchanged. */
int json_unique_strings_index(struct json_unique_strings *us, const char *s, size_t len,
                              uint32_t *ret_index);

/* Number of distinct strings added. */
uint32_t json_unique_strings_count(const struct json_unique_strings *us);

/* Writes all strings, in index order, as one JSON array value under key (same rules as the
 * json_writer value functions; errors are latched in w). */
void json_unique_strings_write(const struct json_unique_strings *us, struct json_writer *w,
                               const char *key);

#endif /* FLEETPROF_JSON_WRITER_H */
