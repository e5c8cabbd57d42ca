/* json/reader.h - a JSON reader for the tools: one whole document, parsed once, read-only.
 *
 * Built for Gecko profiles of hundreds of MB. The document keeps the input text (one buffer)
 * and one array of 8-byte nodes; strings are unescaped in place inside the text (an escape is
 * never shorter than what it stands for) and NUL-terminated there, numbers keep their original
 * text so that they can be written back exactly. Memory is about 2.5x the file for a typical
 * profile (mostly small numbers). The input is untrusted: every error is reported with its
 * line and column, nesting is bounded, and the parser is iterative (no recursion).
 * Used by `fleetprof summary` and `fleetprof merge`; fuzzed by tests/fuzz/fuzz-json-read.c.
 *
 * Limits: input below 4 GiB; a string, an array or an object below 2^29 bytes or elements.
 * RFC 8259 with three leniencies: a leading UTF-8 byte order mark is skipped; bytes of a
 * string are not checked to be UTF-8 (json_value_write() replaces invalid ones by U+FFFD); a
 * \u escape of a lone surrogate decodes to U+FFFD. Duplicate keys are kept; a lookup finds
 * the last one, like JavaScript's JSON.parse and Python's json.
 *
 * Thread-safety: a document is immutable once parsed; any number of threads may read it.
 */
#ifndef FLEETPROF_JSON_READER_H
#define FLEETPROF_JSON_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Default nesting limit (containers inside containers) when 0 is passed as max_depth. */
#define JSON_READ_MAX_DEPTH 512

/* Largest input, and largest string (bytes) or container (elements or members). */
#define JSON_READ_MAX_BYTES ((size_t)UINT32_MAX - 1)
#define JSON_READ_MAX_ITEMS ((size_t)(1u << 29) - 1)

enum json_type {
    JSON_NONE = 0, /* no value: what the accessors report for NULL (a missing key) */
    JSON_NULL,
    JSON_FALSE,
    JSON_TRUE,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
};

struct json_doc;   /* opaque */
struct json_value; /* opaque; valid until its document is freed */
struct json_writer;

/* Where and why parsing failed. line and column are 1-based (column counts bytes from the
 * start of the line); both are 0 for errors without a position (I/O, out of memory). */
struct json_read_error {
    unsigned long line;
    unsigned long column;
    size_t offset;     /* byte offset of the error in the input */
    char message[160]; /* one lowercase sentence, no position, no trailing period */
};

/* Parses the len bytes at text (borrowed; copied, so it may be freed right after). max_depth
 * bounds the nesting (0 means JSON_READ_MAX_DEPTH). On success returns 0 and stores the
 * document in *ret_doc (caller frees it). Otherwise returns -EBADMSG (not JSON, or beyond a
 * limit: see ret_error), -EFBIG (len > JSON_READ_MAX_BYTES) or -ENOMEM, and fills *ret_error
 * when it is not NULL; *ret_doc is untouched. */
int json_doc_parse(const char *text, size_t len, unsigned max_depth, struct json_doc **ret_doc,
                   struct json_read_error *ret_error);

/* Same, reading the whole file at path (a regular file, a pipe, /dev/stdin...). Also returns
 * the negative errno of open()/read() (-ENOENT, -EACCES, -EISDIR, ...), with ret_error's
 * message set to strerror's text and line 0. */
int json_doc_read_file(const char *path, unsigned max_depth, struct json_doc **ret_doc,
                       struct json_read_error *ret_error);

/* Accepts NULL; always returns NULL. */
struct json_doc *json_doc_free(struct json_doc *doc);

/* The root value (never NULL for a parsed document). */
const struct json_value *json_doc_root(const struct json_doc *doc);

/* Bytes of input the document was parsed from. */
size_t json_doc_size(const struct json_doc *doc);

/* Deepest nesting of containers in the document: 0 for a scalar root, 1 for [] or [1]. */
unsigned json_doc_depth(const struct json_doc *doc);

/* Accessors. Every one accepts a NULL value (and then returns JSON_NONE, 0, NULL, false or
 * -EINVAL), so lookups chain: json_object_get(d, json_object_get(d, root, "meta"), "version"). */

enum json_type json_value_type(const struct json_value *v);

/* Elements of an array, members of an object, bytes of a string or of a number's text;
 * 0 for anything else. */
size_t json_value_len(const struct json_value *v);

/* The i-th element of an array; NULL if v is not an array or i is out of range. */
const struct json_value *json_array_at(const struct json_doc *doc, const struct json_value *v,
                                       size_t i);

/* The value of the last member named key (NUL-terminated, borrowed); NULL if v is not an
 * object or has no such member. Linear in the number of members. */
const struct json_value *json_object_get(const struct json_doc *doc, const struct json_value *v,
                                         const char *key);

/* The i-th member's key (a string value) and value, in document order; NULL if v is not an
 * object or i is out of range. */
const struct json_value *json_object_key_at(const struct json_doc *doc, const struct json_value *v,
                                            size_t i);
const struct json_value *json_object_value_at(const struct json_doc *doc,
                                              const struct json_value *v, size_t i);

/* A string's unescaped bytes, NUL-terminated (they may also contain NUL: use *ret_len, which
 * may be NULL). Borrowed from the document. NULL if v is not a string. */
const char *json_value_string(const struct json_doc *doc, const struct json_value *v,
                              size_t *ret_len);

/* A number's text exactly as written in the input, NOT NUL-terminated: *ret_len bytes
 * (ret_len must not be NULL). NULL if v is not a number. */
const char *json_value_number_text(const struct json_doc *doc, const struct json_value *v,
                                   size_t *ret_len);

/* A number as a double (strtod, locale-independent). Returns 0, -EINVAL (not a number) or
 * -ERANGE (overflows a double); *ret untouched on failure. */
int json_value_double(const struct json_doc *doc, const struct json_value *v, double *ret);

/* A number as an int64_t: an integer text, or a fraction/exponent text whose value is an
 * integer of magnitude at most 2^53 (what JavaScript would write). Returns 0, -EINVAL (not a
 * number, or not an integer) or -ERANGE; *ret untouched on failure. */
int json_value_int64(const struct json_doc *doc, const struct json_value *v, int64_t *ret);

/* True only for the literal true. */
bool json_value_is_true(const struct json_value *v);

/* Deep equality: same types, same number texts, same string bytes, same elements in order,
 * same members in order. Values may come from different documents. */
bool json_value_equal(const struct json_doc *doc_a, const struct json_value *a,
                      const struct json_doc *doc_b, const struct json_value *b);

/* Writes v (and everything in it) to w under key (NULL at the root and inside arrays, as for
 * every json_writer function). Numbers are spliced as their original text, so they round-trip
 * exactly; strings go through json_writer_string_len() (invalid UTF-8 becomes U+FFFD); a key
 * is cut at an embedded NUL. Errors are latched in w; containers deeper than the writer's
 * JSON_WRITER_MAX_DEPTH latch -EINVAL there. */
void json_value_write(const struct json_doc *doc, const struct json_value *v, struct json_writer *w,
                      const char *key);

#endif /* FLEETPROF_JSON_READER_H */
