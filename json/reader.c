/* json/reader.c - the tools' JSON reader: one buffer, 8-byte nodes, in-place strings.
 *
 * The parser is iterative. Finished values wait on a scratch stack; when a container closes,
 * its children (already complete, their own children already placed) are moved from the top
 * of the scratch stack into the node array, where they are contiguous. A container node then
 * holds the index of its first child and its count: no per-value allocation, no pointers.
 *
 *   node:  a (u32)                          b (u32)
 *          string/number: offset in text    type (bits 0-2) | bytes << 3
 *          array: index of first element    type | count << 3
 *          object: index of first key       type | members << 3   (key, value, key, value...)
 */
#include "json/reader.h"

#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/grow.h"
#include "json/writer.h"

#define TYPE_BITS 3
#define TYPE_MASK ((1u << TYPE_BITS) - 1)

struct json_value {
    uint32_t a; /* offset into text (string, number) or index of the first child in nodes */
    uint32_t b; /* type | length << TYPE_BITS */
};

struct json_doc {
    char *text;               /* owned: the input, strings unescaped in place; len + 1 bytes */
    size_t text_len;          /* bytes of input */
    struct json_value *nodes; /* owned: every value; the root is the last one */
    size_t node_count;
    unsigned depth; /* deepest container nesting */
};

/* A container being parsed: its children so far are scratch[base..]. */
struct frame {
    size_t base;
    enum json_type type; /* JSON_ARRAY or JSON_OBJECT */
};

struct value_vec {
    struct json_value *v; /* owned */
    size_t n, cap;
};

struct parser {
    char *text; /* borrowed from the document being built */
    size_t len, pos;
    unsigned long line;       /* 1-based line of pos; only whitespace holds newlines */
    size_t line_start;        /* offset of the first byte of that line */
    struct value_vec nodes;   /* becomes the document's node array */
    struct value_vec scratch; /* finished values whose container is still open */
    struct frame *frames;     /* owned; max_depth entries */
    size_t n_frames;
    unsigned max_depth, depth_seen;
    struct json_read_error *err; /* borrowed, may be NULL */
};

static struct json_value make_value(enum json_type type, uint32_t a, size_t len)
{
    struct json_value v = {.a = a, .b = (uint32_t)type | (uint32_t)(len << TYPE_BITS)};

    return v;
}

static enum json_type vtype(const struct json_value *v)
{
    return (enum json_type)(v->b & TYPE_MASK);
}

static size_t vlen(const struct json_value *v)
{
    return v->b >> TYPE_BITS;
}

__attribute__((format(printf, 5, 0))) static void set_error(struct json_read_error *err,
                                                            unsigned long line,
                                                            unsigned long column, size_t offset,
                                                            const char *fmt, va_list ap)
{
    if (!err)
        return;
    err->line = line;
    err->column = column;
    err->offset = offset;
    (void)vsnprintf(err->message, sizeof(err->message), fmt, ap);
}

/* Records a syntax error at offset, which is always on the parser's current line (newlines
 * are only allowed in whitespace, and skip_ws() is where the line count moves). */
__attribute__((format(printf, 3, 4))) static int fail(struct parser *p, size_t offset,
                                                      const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    set_error(p->err, p->line, (unsigned long)(offset - p->line_start + 1), offset, fmt, ap);
    va_end(ap);
    return -EBADMSG;
}

__attribute__((format(printf, 2, 3))) static void fail_nopos(struct json_read_error *err,
                                                             const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    set_error(err, 0, 0, 0, fmt, ap);
    va_end(ap);
}

/* "'x'" for printable ASCII, "byte 0xNN" otherwise, "end of input" past the end. */
static const char *describe(const struct parser *p, size_t offset, char *buf, size_t size)
{
    unsigned char c;

    if (offset >= p->len)
        return "end of input";
    c = (unsigned char)p->text[offset];
    if (c > 0x20 && c < 0x7f)
        (void)snprintf(buf, size, "'%c'", c);
    else
        (void)snprintf(buf, size, "byte 0x%02x", c);
    return buf;
}

static int vec_push(struct value_vec *vec, struct json_value v)
{
    if (FLEETPROF_GROW(vec->v, vec->cap, vec->n + 1) < 0)
        return -ENOMEM;
    vec->v[vec->n++] = v;
    return 0;
}

static void skip_ws(struct parser *p)
{
    while (p->pos < p->len) {
        char c = p->text[p->pos];

        if (c == '\n') {
            p->line++;
            p->line_start = p->pos + 1;
        } else if (c != ' ' && c != '\t' && c != '\r') {
            break;
        }
        p->pos++;
    }
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The 4 hex digits at s (at least 4 readable bytes) as a code unit, or -1. */
static long hex4(const char *s)
{
    long v = 0;

    for (int i = 0; i < 4; i++) {
        int d = hex_digit(s[i]);

        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t utf8_encode(char *out, unsigned long cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Parses the string whose opening quote is at p->pos, unescaping it in place: the output never
 * gets ahead of the input (every escape is at least as long as its UTF-8), so dst <= src. The
 * result is NUL-terminated where it ends, at the latest on its closing quote, which has then
 * been read. */
static int parse_string(struct parser *p, struct json_value *ret)
{
    char *t = p->text;
    size_t open = p->pos, src = open + 1, dst = open + 1;

    while (src < p->len) {
        unsigned char c = (unsigned char)t[src];

        if (c == '"')
            break;
        if (c < 0x20)
            return fail(p, src, "control character 0x%02x in a string (it must be escaped)", c);
        if (c != '\\') {
            t[dst++] = (char)c;
            src++;
            continue;
        }
        if (src + 1 >= p->len)
            return fail(p, open, "unterminated string");
        switch (t[src + 1]) {
        case '"':
        case '\\':
        case '/':
            t[dst++] = t[src + 1];
            break;
        case 'b':
            t[dst++] = '\b';
            break;
        case 'f':
            t[dst++] = '\f';
            break;
        case 'n':
            t[dst++] = '\n';
            break;
        case 'r':
            t[dst++] = '\r';
            break;
        case 't':
            t[dst++] = '\t';
            break;
        case 'u': {
            long cp = src + 5 < p->len ? hex4(t + src + 2) : -1, lo;

            if (cp < 0)
                return fail(p, src, "invalid \\u escape (expected 4 hexadecimal digits)");
            src += 6;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                /* A high surrogate needs a low one right after it; alone, it is U+FFFD. */
                lo = src + 5 < p->len && t[src] == '\\' && t[src + 1] == 'u' ? hex4(t + src + 2)
                                                                             : -1;
                if (lo >= 0xdc00 && lo <= 0xdfff) {
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    src += 6;
                } else {
                    cp = 0xfffd;
                }
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                cp = 0xfffd;
            }
            dst += utf8_encode(t + dst, (unsigned long)cp);
            continue;
        }
        default: {
            char d[16];

            return fail(p, src, "invalid escape in a string: backslash followed by %s",
                        describe(p, src + 1, d, sizeof(d)));
        }
        }
        src += 2;
    }
    if (src >= p->len)
        return fail(p, open, "unterminated string");
    if (dst - (open + 1) > JSON_READ_MAX_ITEMS)
        return fail(p, open, "string longer than %zu bytes", JSON_READ_MAX_ITEMS);
    t[dst] = '\0';
    p->pos = src + 1;
    *ret = make_value(JSON_STRING, (uint32_t)(open + 1), dst - (open + 1));
    return 0;
}

static bool is_digit_at(const struct parser *p, size_t i)
{
    return i < p->len && p->text[i] >= '0' && p->text[i] <= '9';
}

/* RFC 8259: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? ; the text stays where it is. */
static int parse_number(struct parser *p, struct json_value *ret)
{
    size_t start = p->pos, i = p->pos;

    if (p->text[i] == '-')
        i++;
    if (!is_digit_at(p, i))
        return fail(p, i, "invalid number: expected a digit after '-'");
    if (p->text[i] == '0') {
        i++;
        if (is_digit_at(p, i))
            return fail(p, start, "invalid number: leading zeros are not allowed");
    } else {
        while (is_digit_at(p, i))
            i++;
    }
    if (i < p->len && p->text[i] == '.') {
        i++;
        if (!is_digit_at(p, i))
            return fail(p, i, "invalid number: expected a digit after the decimal point");
        while (is_digit_at(p, i))
            i++;
    }
    if (i < p->len && (p->text[i] == 'e' || p->text[i] == 'E')) {
        i++;
        if (i < p->len && (p->text[i] == '+' || p->text[i] == '-'))
            i++;
        if (!is_digit_at(p, i))
            return fail(p, i, "invalid number: expected a digit in the exponent");
        while (is_digit_at(p, i))
            i++;
    }
    if (i - start > JSON_READ_MAX_ITEMS)
        return fail(p, start, "number longer than %zu bytes", JSON_READ_MAX_ITEMS);
    p->pos = i;
    *ret = make_value(JSON_NUMBER, (uint32_t)start, i - start);
    return 0;
}

static int parse_literal(struct parser *p, struct json_value *ret)
{
    static const struct {
        const char *text;
        enum json_type type;
    } literals[] = {{"true", JSON_TRUE}, {"false", JSON_FALSE}, {"null", JSON_NULL}};

    for (size_t i = 0; i < sizeof(literals) / sizeof(literals[0]); i++) {
        size_t n = strlen(literals[i].text);

        if (p->len - p->pos >= n && !memcmp(p->text + p->pos, literals[i].text, n)) {
            p->pos += n;
            *ret = make_value(literals[i].type, 0, 0);
            return 0;
        }
    }
    return fail(p, p->pos, "invalid literal (expected true, false or null)");
}

/* Inside an object, before a member: the key and its colon. */
static int parse_key(struct parser *p)
{
    struct json_value key;
    char d[16];
    int r;

    skip_ws(p);
    if (p->pos >= p->len || p->text[p->pos] != '"')
        return fail(p, p->pos, "expected a string key in an object, found %s",
                    describe(p, p->pos, d, sizeof(d)));
    r = parse_string(p, &key);
    if (r < 0)
        return r;
    r = vec_push(&p->scratch, key);
    if (r < 0)
        return r;
    skip_ws(p);
    if (p->pos >= p->len || p->text[p->pos] != ':')
        return fail(p, p->pos, "expected ':' after an object key, found %s",
                    describe(p, p->pos, d, sizeof(d)));
    p->pos++;
    return 0;
}

/* Moves the top container's children from scratch into the node array and leaves the
 * container itself on scratch. */
static int close_container(struct parser *p)
{
    const struct frame *f = &p->frames[p->n_frames - 1];
    size_t n = p->scratch.n - f->base;
    size_t count = f->type == JSON_OBJECT ? n / 2 : n;
    size_t first = p->nodes.n;
    int r;

    if (count > JSON_READ_MAX_ITEMS)
        return fail(p, p->pos - 1, "%s with more than %zu %s",
                    f->type == JSON_OBJECT ? "object" : "array", JSON_READ_MAX_ITEMS,
                    f->type == JSON_OBJECT ? "members" : "elements");
    if (first + n > UINT32_MAX)
        return fail(p, p->pos - 1, "more than %u values in the document", UINT32_MAX);
    if (FLEETPROF_GROW(p->nodes.v, p->nodes.cap, p->nodes.n + n) < 0)
        return -ENOMEM;
    if (n)
        memcpy(p->nodes.v + first, p->scratch.v + f->base, n * sizeof(struct json_value));
    p->nodes.n += n;
    p->scratch.n = f->base;
    r = vec_push(&p->scratch, make_value(f->type, n ? (uint32_t)first : 0, count));
    p->n_frames--;
    return r;
}

enum parse_state { EXPECT_VALUE, AFTER_VALUE, DONE };

/* Expects a value at p->pos (after whitespace). Opens containers, pushes scalars. */
static int parse_value(struct parser *p, enum parse_state *state)
{
    struct json_value v;
    char d[16];
    char c;
    int r;

    skip_ws(p);
    if (p->pos >= p->len)
        return fail(p, p->pos,
                    p->n_frames ? "unexpected end of input: expected a value"
                                : "empty document: expected a JSON value");
    c = p->text[p->pos];
    switch (c) {
    case '{':
    case '[':
        if (p->n_frames >= p->max_depth)
            return fail(p, p->pos, "nesting deeper than %u levels", p->max_depth);
        p->frames[p->n_frames].base = p->scratch.n;
        p->frames[p->n_frames].type = c == '{' ? JSON_OBJECT : JSON_ARRAY;
        p->n_frames++;
        if (p->n_frames > p->depth_seen)
            p->depth_seen = (unsigned)p->n_frames;
        p->pos++;
        skip_ws(p);
        if (p->pos < p->len && p->text[p->pos] == (c == '{' ? '}' : ']')) {
            p->pos++;
            *state = AFTER_VALUE;
            return close_container(p);
        }
        *state = EXPECT_VALUE;
        return c == '{' ? parse_key(p) : 0;
    case '"':
        r = parse_string(p, &v);
        break;
    case '-':
    case '0':
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6':
    case '7':
    case '8':
    case '9':
        r = parse_number(p, &v);
        break;
    case 't':
    case 'f':
    case 'n':
        r = parse_literal(p, &v);
        break;
    default:
        return fail(p, p->pos, "unexpected %s: expected a JSON value",
                    describe(p, p->pos, d, sizeof(d)));
    }
    if (r < 0)
        return r;
    *state = AFTER_VALUE;
    return vec_push(&p->scratch, v);
}

/* After a value: a separator, the end of a container, or the end of the document. */
static int parse_after(struct parser *p, enum parse_state *state)
{
    const struct frame *f;
    char close, d[16];

    skip_ws(p);
    if (!p->n_frames) {
        if (p->pos < p->len)
            return fail(p, p->pos, "unexpected %s after the JSON value",
                        describe(p, p->pos, d, sizeof(d)));
        *state = DONE;
        return 0;
    }
    f = &p->frames[p->n_frames - 1];
    close = f->type == JSON_OBJECT ? '}' : ']';
    if (p->pos < p->len && p->text[p->pos] == ',') {
        p->pos++;
        *state = EXPECT_VALUE;
        return f->type == JSON_OBJECT ? parse_key(p) : 0;
    }
    if (p->pos < p->len && p->text[p->pos] == close) {
        p->pos++;
        return close_container(p);
    }
    if (f->type == JSON_OBJECT)
        return fail(p, p->pos, "expected ',' or '}' after an object member, found %s",
                    describe(p, p->pos, d, sizeof(d)));
    return fail(p, p->pos, "expected ',' or ']' after an array element, found %s",
                describe(p, p->pos, d, sizeof(d)));
}

/* Takes ownership of text (malloc'd, len + 1 bytes): it becomes the document's, or is freed. */
static int parse_owned(char *text, size_t len, unsigned max_depth, struct json_doc **ret_doc,
                       struct json_read_error *ret_error)
{
    struct parser p = {.text = text, .len = len, .line = 1, .err = ret_error};
    enum parse_state state = EXPECT_VALUE;
    struct json_doc *doc;
    int r = 0;

    text[len] = '\0';
    p.max_depth = max_depth && max_depth < JSON_READ_MAX_DEPTH ? max_depth : JSON_READ_MAX_DEPTH;
    p.frames = malloc(p.max_depth * sizeof(*p.frames));
    doc = calloc(1, sizeof(*doc));
    if (!p.frames || !doc) {
        r = -ENOMEM;
        goto err_free;
    }
    if (len >= 2 && (unsigned char)text[0] == 0x1f && (unsigned char)text[1] == 0x8b) {
        r = fail(&p, 0, "gzip-compressed data (decompress it first, e.g. with gunzip)");
        goto err_free;
    }
    if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3))
        p.pos = p.line_start = 3;
    while (state != DONE && r >= 0)
        r = state == EXPECT_VALUE ? parse_value(&p, &state) : parse_after(&p, &state);
    if (r < 0)
        goto err_free;
    /* The root is alone on scratch: it goes last into the node array. */
    r = vec_push(&p.nodes, p.scratch.v[0]);
    if (r < 0)
        goto err_free;
    (void)FLEETPROF_RESIZE(p.nodes.v, p.nodes.n); /* to fit; on failure it stays larger */
    doc->text = text;
    doc->text_len = len;
    doc->nodes = p.nodes.v;
    doc->node_count = p.nodes.n;
    doc->depth = p.depth_seen;
    free(p.scratch.v);
    free(p.frames);
    *ret_doc = doc;
    return 0;

err_free:
    if (r == -ENOMEM)
        fail_nopos(ret_error, "out of memory");
    free(p.nodes.v);
    free(p.scratch.v);
    free(p.frames);
    free(doc);
    free(text);
    return r;
}

int json_doc_parse(const char *text, size_t len, unsigned max_depth, struct json_doc **ret_doc,
                   struct json_read_error *ret_error)
{
    char *copy;

    if (!ret_doc || (!text && len)) {
        fail_nopos(ret_error, "invalid argument");
        return -EINVAL;
    }
    if (len > JSON_READ_MAX_BYTES) {
        fail_nopos(ret_error, "input larger than %zu bytes", JSON_READ_MAX_BYTES);
        return -EFBIG;
    }
    copy = malloc(len + 1);
    if (!copy) {
        fail_nopos(ret_error, "out of memory");
        return -ENOMEM;
    }
    if (len)
        memcpy(copy, text, len);
    return parse_owned(copy, len, max_depth, ret_doc, ret_error);
}

int json_doc_read_file(const char *path, unsigned max_depth, struct json_doc **ret_doc,
                       struct json_read_error *ret_error)
{
    struct stat st;
    char *buf = NULL;
    size_t len = 0, cap;
    int fd, r;

    if (!path || !ret_doc) {
        fail_nopos(ret_error, "invalid argument");
        return -EINVAL;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        r = -errno;
        goto err;
    }
    if (fstat(fd, &st) < 0) {
        r = -errno;
        goto err_close;
    }
    if (S_ISDIR(st.st_mode)) {
        r = -EISDIR;
        goto err_close;
    }
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > JSON_READ_MAX_BYTES) {
        r = -EFBIG;
        goto err_close;
    }
    /* One spare byte for the NUL, and one more so that a regular file read to its stat size
     * needs no realloc to notice its end. */
    cap = S_ISREG(st.st_mode) ? (size_t)st.st_size + 2 : (size_t)64 * 1024;
    buf = malloc(cap);
    if (!buf) {
        r = -ENOMEM;
        goto err_close;
    }
    for (;;) {
        ssize_t n;

        if (cap - len < 2) {
            if (len > JSON_READ_MAX_BYTES) {
                r = -EFBIG;
                goto err_free;
            }
            if (FLEETPROF_GROW(buf, cap, len + 2) < 0) {
                r = -ENOMEM;
                goto err_free;
            }
        }
        n = read(fd, buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r = -errno;
            goto err_free;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    (void)close(fd);
    if (len > JSON_READ_MAX_BYTES) {
        free(buf);
        fail_nopos(ret_error, "file larger than %zu bytes", JSON_READ_MAX_BYTES);
        return -EFBIG;
    }
    return parse_owned(buf, len, max_depth, ret_doc, ret_error);

err_free:
    free(buf);
err_close:
    (void)close(fd);
err:
    if (r == -EFBIG)
        fail_nopos(ret_error, "file larger than %zu bytes", JSON_READ_MAX_BYTES);
    else
        fail_nopos(ret_error, "%s", strerror(-r));
    return r;
}

struct json_doc *json_doc_free(struct json_doc *doc)
{
    if (doc) {
        free(doc->text);
        free(doc->nodes);
        free(doc);
    }
    return NULL;
}

const struct json_value *json_doc_root(const struct json_doc *doc)
{
    return &doc->nodes[doc->node_count - 1];
}

size_t json_doc_size(const struct json_doc *doc)
{
    return doc->text_len;
}

unsigned json_doc_depth(const struct json_doc *doc)
{
    return doc->depth;
}

enum json_type json_value_type(const struct json_value *v)
{
    return v ? vtype(v) : JSON_NONE;
}

size_t json_value_len(const struct json_value *v)
{
    if (!v)
        return 0;
    switch (vtype(v)) {
    case JSON_NUMBER:
    case JSON_STRING:
    case JSON_ARRAY:
    case JSON_OBJECT:
        return vlen(v);
    default:
        return 0;
    }
}

const struct json_value *json_array_at(const struct json_doc *doc, const struct json_value *v,
                                       size_t i)
{
    if (!v || vtype(v) != JSON_ARRAY || i >= vlen(v))
        return NULL;
    return &doc->nodes[v->a + i];
}

const struct json_value *json_object_get(const struct json_doc *doc, const struct json_value *v,
                                         const char *key)
{
    size_t klen;

    if (!v || !key || vtype(v) != JSON_OBJECT)
        return NULL;
    klen = strlen(key);
    for (size_t i = vlen(v); i-- > 0;) {
        const struct json_value *k = &doc->nodes[v->a + 2 * i];

        if (vlen(k) == klen && !memcmp(doc->text + k->a, key, klen))
            return k + 1;
    }
    return NULL;
}

const struct json_value *json_object_key_at(const struct json_doc *doc, const struct json_value *v,
                                            size_t i)
{
    if (!v || vtype(v) != JSON_OBJECT || i >= vlen(v))
        return NULL;
    return &doc->nodes[v->a + 2 * i];
}

const struct json_value *json_object_value_at(const struct json_doc *doc,
                                              const struct json_value *v, size_t i)
{
    const struct json_value *k = json_object_key_at(doc, v, i);

    return k ? k + 1 : NULL;
}

const char *json_value_string(const struct json_doc *doc, const struct json_value *v,
                              size_t *ret_len)
{
    if (!v || vtype(v) != JSON_STRING)
        return NULL;
    if (ret_len)
        *ret_len = vlen(v);
    return doc->text + v->a;
}

const char *json_value_number_text(const struct json_doc *doc, const struct json_value *v,
                                   size_t *ret_len)
{
    if (!v || vtype(v) != JSON_NUMBER)
        return NULL;
    *ret_len = vlen(v);
    return doc->text + v->a;
}

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void init_c_locale(void)
{
    c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

int json_value_double(const struct json_doc *doc, const struct json_value *v, double *ret)
{
    char small[64], *buf = small, *end;
    const char *text;
    size_t len;
    double d;
    int r = 0;

    text = json_value_number_text(doc, v, &len);
    if (!text)
        return -EINVAL;
    if (len >= sizeof(small)) {
        buf = malloc(len + 1);
        if (!buf)
            return -ENOMEM;
    }
    memcpy(buf, text, len);
    buf[len] = '\0';
    (void)pthread_once(&c_locale_once, init_c_locale);
    errno = 0;
    d = c_locale ? strtod_l(buf, &end, c_locale) : strtod(buf, &end);
    /* ERANGE also reports underflow to a denormal or zero; only overflow is an error. */
    if (errno == ERANGE && (d > 1.0 || d < -1.0))
        r = -ERANGE;
    if (buf != small)
        free(buf);
    if (r == 0)
        *ret = d;
    return r;
}

int json_value_int64(const struct json_doc *doc, const struct json_value *v, int64_t *ret)
{
    char buf[32], *end;
    const char *text;
    size_t len;
    double d;
    long long ll;
    int r;

    text = json_value_number_text(doc, v, &len);
    if (!text)
        return -EINVAL;
    if (!memchr(text, '.', len) && !memchr(text, 'e', len) && !memchr(text, 'E', len)) {
        if (len >= sizeof(buf))
            return -ERANGE; /* more than 31 digits */
        memcpy(buf, text, len);
        buf[len] = '\0';
        errno = 0;
        ll = strtoll(buf, &end, 10);
        if (errno == ERANGE)
            return -ERANGE;
        *ret = ll;
        return 0;
    }
    r = json_value_double(doc, v, &d);
    if (r < 0)
        return r;
    if (d > 9007199254740992.0 || d < -9007199254740992.0)
        return -ERANGE;
    if (d != (double)(int64_t)d)
        return -EINVAL;
    *ret = (int64_t)d;
    return 0;
}

bool json_value_is_true(const struct json_value *v)
{
    return v && vtype(v) == JSON_TRUE;
}

bool json_value_equal(const struct json_doc *doc_a, const struct json_value *a,
                      const struct json_doc *doc_b, const struct json_value *b)
{
    if (!a || !b)
        return a == b;
    if (vtype(a) != vtype(b) || json_value_len(a) != json_value_len(b))
        return false;
    switch (vtype(a)) {
    case JSON_NUMBER:
    case JSON_STRING:
        return !memcmp(doc_a->text + a->a, doc_b->text + b->a, vlen(a));
    case JSON_ARRAY:
        for (size_t i = 0; i < vlen(a); i++)
            if (!json_value_equal(doc_a, &doc_a->nodes[a->a + i], doc_b, &doc_b->nodes[b->a + i]))
                return false;
        return true;
    case JSON_OBJECT:
        for (size_t i = 0; i < 2 * vlen(a); i++)
            if (!json_value_equal(doc_a, &doc_a->nodes[a->a + i], doc_b, &doc_b->nodes[b->a + i]))
                return false;
        return true;
    default:
        return true;
    }
}

void json_value_write(const struct json_doc *doc, const struct json_value *v, struct json_writer *w,
                      const char *key)
{
    if (json_writer_error(w))
        return; /* stop walking a big document as soon as the writer has failed */
    switch (json_value_type(v)) {
    case JSON_NONE:
    case JSON_NULL:
        json_writer_null(w, key);
        break;
    case JSON_FALSE:
    case JSON_TRUE:
        json_writer_bool(w, key, vtype(v) == JSON_TRUE);
        break;
    case JSON_NUMBER:
        json_writer_splice_text(w, key, doc->text + v->a, vlen(v));
        break;
    case JSON_STRING:
        json_writer_string_len(w, key, doc->text + v->a, vlen(v));
        break;
    case JSON_ARRAY:
        json_writer_array_begin(w, key);
        for (size_t i = 0; i < vlen(v); i++)
            json_value_write(doc, &doc->nodes[v->a + i], w, NULL);
        json_writer_array_end(w);
        break;
    case JSON_OBJECT:
        json_writer_object_begin(w, key);
        for (size_t i = 0; i < vlen(v); i++) {
            const struct json_value *k = &doc->nodes[v->a + 2 * i];

            json_value_write(doc, k + 1, w, doc->text + k->a);
        }
        json_writer_object_end(w);
        break;
    }
}
