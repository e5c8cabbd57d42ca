/* tests/lib/json-check.c - a strict JSON validator for tests and fuzz targets (RFC 8259:
 * no trailing commas, valid UTF-8, valid escapes, bounded depth). Written independently of
 * json/writer.c, whose output it checks. */
#include "json-check.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct parser {
    const uint8_t *p, *end;
    int depth;
};

static void skip_ws(struct parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static bool digit(struct parser *ps)
{
    return ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9';
}

static bool parse_number(struct parser *ps)
{
    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    if (!digit(ps))
        return false;
    if (*ps->p == '0') {
        ps->p++;
    } else {
        while (digit(ps))
            ps->p++;
    }
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        if (!digit(ps))
            return false;
        while (digit(ps))
            ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
            ps->p++;
        if (!digit(ps))
            return false;
        while (digit(ps))
            ps->p++;
    }
    return true;
}

static bool is_hex(uint8_t c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* One UTF-8 scalar value starting at a byte >= 0x80, decoded the long way. */
static bool parse_utf8(struct parser *ps)
{
    uint8_t c = *ps->p;
    size_t n = c >= 0xf0 && c < 0xf8   ? 4
               : c >= 0xe0 && c < 0xf0 ? 3
               : c >= 0xc0 && c < 0xe0 ? 2
                                       : 0;
    uint32_t cp, min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;

    if (n == 0 || (size_t)(ps->end - ps->p) < n)
        return false;
    cp = c & (0x7fu >> n);
    for (size_t i = 1; i < n; i++) {
        if ((ps->p[i] & 0xc0) != 0x80)
            return false;
        cp = cp << 6 | (ps->p[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return false;
    ps->p += n;
    return true;
}

static bool parse_string(struct parser *ps)
{
    ps->p++; /* the opening quote */
    while (ps->p < ps->end) {
        uint8_t c = *ps->p;

        if (c == '"') {
            ps->p++;
            return true;
        }
        if (c < 0x20)
            return false;
        if (c == '\\') {
            ps->p++;
            if (ps->p >= ps->end)
                return false;
            c = *ps->p++;
            if (c == 'u') {
                if (ps->end - ps->p < 4)
                    return false;
                for (int i = 0; i < 4; i++)
                    if (!is_hex(ps->p[i]))
                        return false;
                ps->p += 4;
            } else if (!strchr("\"\\/bfnrt", c) || c == '\0') {
                return false;
            }
        } else if (c >= 0x80) {
            if (!parse_utf8(ps))
                return false;
        } else {
            ps->p++;
        }
    }
    return false;
}

static bool literal(struct parser *ps, const char *word)
{
    size_t n = strlen(word);

    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return false;
    ps->p += n;
    return true;
}

static bool parse_value(struct parser *ps);

static bool parse_container(struct parser *ps, bool object)
{
    uint8_t close = object ? '}' : ']';

    if (++ps->depth > 512)
        return false;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        ps->depth--;
        return true;
    }
    for (;;) {
        skip_ws(ps);
        if (object) {
            if (ps->p >= ps->end || *ps->p != '"' || !parse_string(ps))
                return false;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p++ != ':')
                return false;
        }
        if (!parse_value(ps))
            return false;
        skip_ws(ps);
        if (ps->p >= ps->end)
            return false;
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p++ != close)
            return false;
        ps->depth--;
        return true;
    }
}

static bool parse_value(struct parser *ps)
{
    skip_ws(ps);
    if (ps->p >= ps->end)
        return false;
    switch (*ps->p) {
    case '{':
        return parse_container(ps, true);
    case '[':
        return parse_container(ps, false);
    case '"':
        return parse_string(ps);
    case 't':
        return literal(ps, "true");
    case 'f':
        return literal(ps, "false");
    case 'n':
        return literal(ps, "null");
    default:
        return parse_number(ps);
    }
}

bool test_json_valid(const char *text, size_t len)
{
    struct parser ps = {(const uint8_t *)text, (const uint8_t *)text + len, 0};

    if (!parse_value(&ps))
        return false;
    skip_ws(&ps);
    return ps.p == ps.end;
}
