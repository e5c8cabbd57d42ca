/* tests/fuzz/fuzz-json-read.c - the tools' JSON reader on arbitrary bytes (a user's file).
 *
 * Differential: an independent recursive validator (RFC 8259 with the reader's documented
 * leniencies: a leading BOM, any byte >= 0x20 in strings) must agree with the reader on
 * whether the input is JSON. On failure the error must be -EBADMSG with a message, and its
 * line and column must match its offset counted on the original bytes. On success every
 * value is read through every accessor, the document is written back with json_value_write()
 * and parsed again, and writing that second document must give the very same bytes (so the
 * write is a fixed point; numbers keep their text, strings survive); structure and number
 * texts must be equal between the two documents. Anything else abort()s.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/reader.h"
#include "json/writer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            (void)fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                       \
        }                                                                                  \
    } while (0)

/* Below the writer's limit, so every accepted document can be written back. */
#define FUZZ_DEPTH 48

/* The independent validator. */

struct validator {
    const uint8_t *p, *end;
};

static void v_ws(struct validator *v)
{
    while (v->p < v->end && (*v->p == ' ' || *v->p == '\t' || *v->p == '\n' || *v->p == '\r'))
        v->p++;
}

static bool v_digit(const struct validator *v)
{
    return v->p < v->end && *v->p >= '0' && *v->p <= '9';
}

static bool v_number(struct validator *v)
{
    if (v->p < v->end && *v->p == '-')
        v->p++;
    if (!v_digit(v))
        return false;
    if (*v->p == '0') {
        v->p++;
        if (v_digit(v))
            return false;
    } else {
        while (v_digit(v))
            v->p++;
    }
    if (v->p < v->end && *v->p == '.') {
        v->p++;
        if (!v_digit(v))
            return false;
        while (v_digit(v))
            v->p++;
    }
    if (v->p < v->end && (*v->p == 'e' || *v->p == 'E')) {
        v->p++;
        if (v->p < v->end && (*v->p == '+' || *v->p == '-'))
            v->p++;
        if (!v_digit(v))
            return false;
        while (v_digit(v))
            v->p++;
    }
    return true;
}

static bool v_string(struct validator *v)
{
    v->p++;
    while (v->p < v->end) {
        uint8_t c = *v->p++;

        if (c == '"')
            return true;
        if (c < 0x20)
            return false;
        if (c != '\\')
            continue;
        if (v->p >= v->end)
            return false;
        c = *v->p++;
        if (c == 'u') {
            if (v->end - v->p < 4)
                return false;
            for (int i = 0; i < 4; i++, v->p++)
                if (!((*v->p >= '0' && *v->p <= '9') || (*v->p >= 'a' && *v->p <= 'f') ||
                      (*v->p >= 'A' && *v->p <= 'F')))
                    return false;
        } else if (!c || !strchr("\"\\/bfnrt", c)) {
            return false;
        }
    }
    return false;
}

static bool v_value(struct validator *v, int depth)
{
    v_ws(v);
    if (v->p >= v->end)
        return false;
    switch (*v->p) {
    case '"':
        return v_string(v);
    case '[':
    case '{': {
        bool object = *v->p == '{';
        uint8_t close = object ? '}' : ']';

        if (depth >= FUZZ_DEPTH)
            return false;
        v->p++;
        v_ws(v);
        if (v->p < v->end && *v->p == close) {
            v->p++;
            return true;
        }
        for (;;) {
            if (object) {
                v_ws(v);
                if (v->p >= v->end || *v->p != '"' || !v_string(v))
                    return false;
                v_ws(v);
                if (v->p >= v->end || *v->p != ':')
                    return false;
                v->p++;
            }
            if (!v_value(v, depth + 1))
                return false;
            v_ws(v);
            if (v->p < v->end && *v->p == ',') {
                v->p++;
                continue;
            }
            if (v->p < v->end && *v->p == close) {
                v->p++;
                return true;
            }
            return false;
        }
    }
    case 't':
        if (v->end - v->p >= 4 && !memcmp(v->p, "true", 4)) {
            v->p += 4;
            return true;
        }
        return false;
    case 'f':
        if (v->end - v->p >= 5 && !memcmp(v->p, "false", 5)) {
            v->p += 5;
            return true;
        }
        return false;
    case 'n':
        if (v->end - v->p >= 4 && !memcmp(v->p, "null", 4)) {
            v->p += 4;
            return true;
        }
        return false;
    default:
        return v_number(v);
    }
}

static bool validate(const uint8_t *data, size_t size)
{
    struct validator v = {.p = data, .end = data + size};

    if (size >= 3 && !memcmp(data, "\xef\xbb\xbf", 3))
        v.p += 3;
    if (!v_value(&v, 0))
        return false;
    v_ws(&v);
    return v.p == v.end;
}

/* Reads every value through the accessors; returns the number of values. */
static size_t walk(const struct json_doc *doc, const struct json_value *v)
{
    size_t len = 0, n = 1;
    const char *s;
    double d;
    int64_t i;

    switch (json_value_type(v)) {
    case JSON_STRING:
        s = json_value_string(doc, v, &len);
        CHECK(s && s[len] == '\0' && len == json_value_len(v));
        break;
    case JSON_NUMBER:
        s = json_value_number_text(doc, v, &len);
        CHECK(s && len > 0 && len == json_value_len(v));
        CHECK(json_value_double(doc, v, &d) != -EINVAL);
        (void)json_value_int64(doc, v, &i);
        break;
    case JSON_ARRAY:
        for (size_t k = 0; k < json_value_len(v); k++)
            n += walk(doc, json_array_at(doc, v, k));
        CHECK(!json_array_at(doc, v, json_value_len(v)));
        break;
    case JSON_OBJECT:
        for (size_t k = 0; k < json_value_len(v); k++) {
            const struct json_value *key = json_object_key_at(doc, v, k);
            const char *ks = json_value_string(doc, key, &len);

            CHECK(json_value_type(key) == JSON_STRING);
            n += walk(doc, json_object_value_at(doc, v, k));
            /* A lookup finds this key or a later duplicate of it. */
            if (ks && strlen(ks) == len)
                CHECK(json_object_get(doc, v, ks) != NULL);
        }
        break;
    case JSON_NULL:
    case JSON_TRUE:
    case JSON_FALSE:
        CHECK(json_value_len(v) == 0);
        break;
    default:
        CHECK(!"a value of no type");
    }
    return n;
}

/* Same structure, types and number texts (strings may differ: invalid UTF-8 is replaced). */
static bool same_shape(const struct json_doc *da, const struct json_value *a,
                       const struct json_doc *db, const struct json_value *b)
{
    size_t la, lb;
    const char *ta, *tb;

    if (json_value_type(a) != json_value_type(b))
        return false;
    switch (json_value_type(a)) {
    case JSON_NUMBER:
        ta = json_value_number_text(da, a, &la);
        tb = json_value_number_text(db, b, &lb);
        return la == lb && !memcmp(ta, tb, la);
    case JSON_ARRAY:
        if (json_value_len(a) != json_value_len(b))
            return false;
        for (size_t k = 0; k < json_value_len(a); k++)
            if (!same_shape(da, json_array_at(da, a, k), db, json_array_at(db, b, k)))
                return false;
        return true;
    case JSON_OBJECT:
        if (json_value_len(a) != json_value_len(b))
            return false;
        for (size_t k = 0; k < json_value_len(a); k++)
            if (!same_shape(da, json_object_value_at(da, a, k), db, json_object_value_at(db, b, k)))
                return false;
        return true;
    default:
        return true;
    }
}

static char *write_doc(const struct json_doc *doc, size_t *ret_len)
{
    struct json_writer *w = NULL;
    char *out = NULL;

    CHECK(json_writer_new_memory(&w) == 0);
    json_value_write(doc, json_doc_root(doc), w, NULL);
    CHECK(json_writer_finish(w) == 0);
    CHECK(json_writer_copy_to(w, &out) == 0);
    *ret_len = json_writer_length(w);
    json_writer_free(w);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct json_read_error err;
    struct json_doc *doc = NULL, *again = NULL;
    bool valid = validate(data, size);
    char *out1, *out2;
    size_t len1, len2;
    int r;

    memset(&err, 0, sizeof(err));
    r = json_doc_parse((const char *)data, size, FUZZ_DEPTH, &doc, &err);
    if (r != 0) {
        unsigned long line = 1, column = 1;

        CHECK(r == -EBADMSG);
        CHECK(!valid);
        CHECK(!doc);
        CHECK(err.message[0] != '\0');
        CHECK(err.offset <= size);
        for (size_t i = 0; i < err.offset; i++) {
            column++;
            if (data[i] == '\n') {
                line++;
                column = 1;
            }
        }
        if (line == 1 && size >= 3 && !memcmp(data, "\xef\xbb\xbf", 3))
            column -= 3; /* columns count from after a byte order mark */
        CHECK(err.line == line);
        CHECK(err.column == column);
        return 0;
    }
    CHECK(valid);
    CHECK(json_doc_depth(doc) <= FUZZ_DEPTH);
    CHECK(json_doc_size(doc) == size);
    (void)walk(doc, json_doc_root(doc));

    out1 = write_doc(doc, &len1);
    CHECK(json_doc_parse(out1, len1, FUZZ_DEPTH, &again, &err) == 0);
    CHECK(same_shape(doc, json_doc_root(doc), again, json_doc_root(again)));
    out2 = write_doc(again, &len2);
    CHECK(len1 == len2 && !memcmp(out1, out2, len1));
    free(out1);
    free(out2);
    json_doc_free(again);
    json_doc_free(doc);
    return 0;
}
