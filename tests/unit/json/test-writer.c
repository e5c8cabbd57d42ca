/* Unit tests for buffer/json-writer: exact output of every API path, escaping, splicing, the
 * fd writer, the failure latch, unique strings, and random documents checked by an
 * independent parser (Python's json module, with the values compared token by token).
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json/json-internal.h"
#include "json/writer.h"
#include "testlib.h"

/* Allocation failure injection. The test links with -Wl,--wrap=malloc,--wrap=calloc,
 * --wrap=realloc (tests/unit/buffer/meson.build), so the writer's allocations come here.
 * alloc_fail_in = n lets n allocations succeed and fails the next one, then disarms. */
void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);

static int alloc_fail_in = -1;

static int alloc_should_fail(void)
{
    if (alloc_fail_in < 0)
        return 0;
    return alloc_fail_in-- == 0;
}

void *__wrap_malloc(size_t size)
{
    return alloc_should_fail() ? NULL : __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return alloc_should_fail() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
    return alloc_should_fail() ? NULL : __real_realloc(p, size);
}

/* The kernel's side, wrapped too (-Wl,--wrap=mmap,--wrap=mmap64,--wrap=madvise): mmap_fail
 * fails every mapping (ENOMEM), madvise_fail every advice (EINVAL, as a kernel without
 * transparent huge pages does), so that each path runs whatever this machine's kernel does;
 * the counts say which advice the writer gave, and where. */
void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
void *__real_mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __real_madvise(void *addr, size_t len, int advice);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
void *__wrap_mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __wrap_madvise(void *addr, size_t len, int advice);

static bool mmap_fail, madvise_fail;
static int mmap_refused, huge_advice, huge_misaligned;

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (mmap_fail) {
        mmap_refused++;
        errno = ENOMEM;
        return MAP_FAILED;
    }
    return __real_mmap(addr, len, prot, flags, fd, off);
}

void *__wrap_mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (mmap_fail) {
        mmap_refused++;
        errno = ENOMEM;
        return MAP_FAILED;
    }
    return __real_mmap64(addr, len, prot, flags, fd, off);
}

int __wrap_madvise(void *addr, size_t len, int advice)
{
    if (advice == MADV_HUGEPAGE) {
        huge_advice++;
        if ((uintptr_t)addr % JSON_WRITER_BIG_CHUNK_BYTES || len != JSON_WRITER_BIG_CHUNK_BYTES)
            huge_misaligned++;
    }
    if (madvise_fail) {
        errno = EINVAL;
        return -1;
    }
    return __real_madvise(addr, len, advice);
}

/* Helpers. */

static struct json_writer *new_memory(void)
{
    struct json_writer *w = NULL;

    assert_int_equal(json_writer_new_memory(&w), 0);
    assert_non_null(w);
    return w;
}

/* Finishes w, checks its whole output and frees it. */
static void expect_output(struct json_writer *w, const char *expected)
{
    char *s = NULL;

    assert_int_equal(json_writer_finish(w), 0);
    assert_int_equal(json_writer_copy_to(w, &s), 0);
    assert_string_equal(s, expected);
    assert_int_equal(json_writer_length(w), strlen(expected));
    free(s);
    json_writer_free(w);
}

static char *read_file(const char *path, size_t *ret_len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0, n;

    assert_non_null(f);
    do {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            buf = realloc(buf, cap + 1);
            assert_non_null(buf);
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    (void)fclose(f);
    buf[len] = '\0';
    *ret_len = len;
    return buf;
}

static void write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");

    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

struct strbuf {
    char *p;
    size_t len, cap;
};

static void sb_reserve(struct strbuf *sb, size_t more)
{
    if (sb->len + more + 1 > sb->cap) {
        sb->cap = (sb->len + more + 1) * 2;
        sb->p = realloc(sb->p, sb->cap);
        assert_non_null(sb->p);
    }
}

static void sb_add(struct strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(struct strbuf *sb, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    sb_reserve(sb, (size_t)n);
    va_start(ap, fmt);
    (void)vsnprintf(sb->p + sb->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb->len += (size_t)n;
}

static void sb_hex(struct strbuf *sb, const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        sb_add(sb, "%02x", p[i]);
}

/* Reference model of the writer's string rules, written independently of its table-driven
 * code: decode each sequence to a code point and apply Unicode's range rules. Stores the
 * bytes that the JSON string must decode to in out (at most 3 * len bytes). */
static size_t ref_sanitize(const uint8_t *s, size_t len, uint8_t *out)
{
    size_t o = 0;

    for (size_t i = 0; i < len;) {
        uint8_t c = s[i];
        size_t n = c < 0x80 ? 1 : c < 0xc0 ? 0 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : c < 0xf8 ? 4 : 0;

        if (n == 1) {
            out[o++] = c;
            i++;
            continue;
        }
        if (n && i + n <= len) {
            uint32_t cp = c & (0x7fu >> n);
            uint32_t min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
            int ok = 1;

            for (size_t k = 1; k < n; k++) {
                if ((s[i + k] & 0xc0) != 0x80)
                    ok = 0;
                cp = cp << 6 | (s[i + k] & 0x3fu);
            }
            if (ok && cp >= min && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff)) {
                memcpy(out + o, s + i, n);
                o += n;
                i += n;
                continue;
            }
        }
        memcpy(out + o, "\xef\xbf\xbd", 3);
        o += 3;
        i++;
    }
    return o;
}

/* The exact JSON text (with quotes) the writer must produce for len bytes at s. */
static char *ref_json_string(const char *s, size_t len)
{
    uint8_t *clean = malloc(3 * len + 1);
    char *out = malloc(6 * 3 * len + 3);
    size_t n, o = 0;

    assert_non_null(clean);
    assert_non_null(out);
    n = ref_sanitize((const uint8_t *)s, len, clean);
    out[o++] = '"';
    for (size_t i = 0; i < n; i++) {
        uint8_t c = clean[i];

        switch (c) {
        case '"':
            o += (size_t)sprintf(out + o, "\\\"");
            break;
        case '\\':
            o += (size_t)sprintf(out + o, "\\\\");
            break;
        case '\b':
            o += (size_t)sprintf(out + o, "\\b");
            break;
        case '\f':
            o += (size_t)sprintf(out + o, "\\f");
            break;
        case '\n':
            o += (size_t)sprintf(out + o, "\\n");
            break;
        case '\r':
            o += (size_t)sprintf(out + o, "\\r");
            break;
        case '\t':
            o += (size_t)sprintf(out + o, "\\t");
            break;
        default:
            if (c < 0x20)
                o += (size_t)sprintf(out + o, "\\u%04x", c);
            else
                out[o++] = (char)c;
        }
    }
    out[o++] = '"';
    out[o] = '\0';
    free(clean);
    return out;
}

/* Expected text of json_writer_time_ms(), computed with the C library's division. */
static void ref_time_ms(int64_t ns, char *out, size_t size)
{
    lldiv_t d = lldiv(ns, 1000000); /* truncates toward zero; no overflow for INT64_MIN */
    size_t n;

    n = (size_t)snprintf(out, size, "%s%lld.%06lld", ns < 0 ? "-" : "", llabs(d.quot),
                         llabs(d.rem));
    while (out[n - 1] == '0')
        out[--n] = '\0';
    if (out[n - 1] == '.')
        out[--n] = '\0';
}

static size_t encode_utf8(uint32_t cp, uint8_t *out)
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xc0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xe0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
        out[2] = (uint8_t)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (uint8_t)(0xf0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
    out[3] = (uint8_t)(0x80 | (cp & 0x3f));
    return 4;
}

/* Random bytes mixing ASCII, escapes, valid UTF-8 and every kind of invalid sequence. At most
 * max bytes; never a NUL byte when no_nul is set (for keys). */
static size_t random_string(struct test_rng *rng, uint8_t *buf, size_t max, int no_nul)
{
    size_t len = 0, target = (size_t)test_rng_range(rng, 0, max);

    while (len + 5 <= target) {
        uint8_t tmp[5];
        size_t n = 0;
        uint32_t cp;

        switch (test_rng_range(rng, 0, 9)) {
        case 0:
        case 1:
        case 2:
            tmp[n++] = (uint8_t)test_rng_range(rng, 0x20, 0x7e);
            break;
        case 3:
            tmp[n++] = (uint8_t)test_rng_range(rng, no_nul ? 1 : 0, 0x1f);
            break;
        case 4:
            tmp[n++] = "\"\\\x7f/"[test_rng_range(rng, 0, 3)];
            break;
        case 5: /* valid, any length */
            do {
                cp = (uint32_t)test_rng_range(rng, 0x80, 0x10ffff);
            } while (cp >= 0xd800 && cp <= 0xdfff);
            n = encode_utf8(cp, tmp);
            break;
        case 6: /* a stray byte */
            tmp[n++] = (uint8_t)test_rng_range(rng, 0x80, 0xff);
            break;
        case 7: /* truncated sequence */
            cp = (uint32_t)test_rng_range(rng, 0x800, 0x10ffff);
            n = encode_utf8(cp, tmp) - (size_t)test_rng_range(rng, 1, 2);
            break;
        case 8: /* surrogate */
            n = encode_utf8((uint32_t)test_rng_range(rng, 0xd800, 0xdfff), tmp);
            break;
        default: /* overlong, or above U+10FFFF */
            switch (test_rng_range(rng, 0, 3)) {
            case 0:
                tmp[0] = (uint8_t)test_rng_range(rng, 0xc0, 0xc1);
                tmp[1] = (uint8_t)test_rng_range(rng, 0x80, 0xbf);
                n = 2;
                break;
            case 1:
                memcpy(tmp, "\xe0\x80\xaf", 3);
                tmp[1] = (uint8_t)test_rng_range(rng, 0x80, 0x9f);
                n = 3;
                break;
            case 2:
                memcpy(tmp, "\xf0\x8f\xbf\xbf", 4);
                n = 4;
                break;
            default:
                tmp[0] = (uint8_t)test_rng_range(rng, 0xf4, 0xff);
                tmp[1] = (uint8_t)test_rng_range(rng, 0x90, 0xbf);
                tmp[2] = 0x80;
                tmp[3] = 0x80;
                n = 4;
            }
        }
        memcpy(buf + len, tmp, n);
        len += n;
    }
    return len;
}

/* Independent checker: Python parses the file strictly (UTF-8, no NaN) and prints one token
 * per line: { } [ ] k:<hex> s:<hex> num:<text> b:0/1 n. Numbers keep their exact decimal
 * text (Decimal for fractions). */
static const char python_checker[] =
        "import sys, json, decimal\n"
        "data = open(sys.argv[1], 'rb').read().decode('utf-8')\n"
        "class Obj(list): pass\n"
        "def bad(x): raise ValueError('constant ' + x)\n"
        "doc = json.loads(data, parse_float=decimal.Decimal, parse_constant=bad,\n"
        "                 object_pairs_hook=Obj)\n"
        "out = []\n"
        "def h(s): return s.encode('utf-8', 'surrogatepass').hex()\n"
        "def w(o):\n"
        "    if isinstance(o, Obj):\n"
        "        out.append('{')\n"
        "        for k, v in o:\n"
        "            out.append('k:' + h(k)); w(v)\n"
        "        out.append('}')\n"
        "    elif isinstance(o, list):\n"
        "        out.append('[')\n"
        "        for v in o: w(v)\n"
        "        out.append(']')\n"
        "    elif isinstance(o, str): out.append('s:' + h(o))\n"
        "    elif o is True: out.append('b:1')\n"
        "    elif o is False: out.append('b:0')\n"
        "    elif o is None: out.append('n')\n"
        "    else: out.append('num:' + str(o))\n"
        "w(doc)\n"
        "sys.stdout.write('\\n'.join(out) + '\\n')\n";

static int have_python(void)
{
    return system("python3 -c 'import json, decimal' >/dev/null 2>&1") == 0;
}

/* Runs the checker on json and compares its tokens with expected (one per line). Expected
 * lines "d:<%.17g>" match a num: line that strtod reads back as the same double. */
static void python_check(const char *json, size_t len, const char *expected)
{
    char *dir = test_tmpdir("json");
    char script[512], doc[512], cmd[1200];
    struct strbuf got = {0};
    const char *e = expected, *g;
    size_t line = 1;
    FILE *p;
    char buf[65536];
    size_t n;

    assert_non_null(dir);
    (void)snprintf(script, sizeof(script), "%s/check.py", dir);
    (void)snprintf(doc, sizeof(doc), "%s/doc.json", dir);
    write_file(script, python_checker, strlen(python_checker));
    write_file(doc, json, len);
    (void)snprintf(cmd, sizeof(cmd), "python3 %s %s", script, doc);
    p = popen(cmd, "r");
    assert_non_null(p);
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) {
        sb_reserve(&got, n);
        memcpy(got.p + got.len, buf, n);
        got.len += n;
    }
    assert_int_equal(pclose(p), 0); /* the parser accepted the document */
    sb_reserve(&got, 0);
    got.p[got.len] = '\0';
    g = got.p;
    while (*e && *g) {
        const char *ee = strchr(e, '\n'), *ge = strchr(g, '\n');

        assert_non_null(ee);
        assert_non_null(ge);
        if (strncmp(e, "d:", 2) == 0 && strncmp(g, "num:", 4) == 0) {
            double want = strtod(e + 2, NULL), have = strtod(g + 4, NULL);

            if (want != have)
                fail_msg("token %zu: double %.*s read back as %.*s", line, (int)(ee - e), e,
                         (int)(ge - g), g);
        } else if (ee - e != ge - g || memcmp(e, g, (size_t)(ee - e)) != 0) {
            fail_msg("token %zu: expected %.*s, parsed %.*s", line, (int)(ee - e), e, (int)(ge - g),
                     g);
        }
        e = ee + 1;
        g = ge + 1;
        line++;
    }
    if (*e || *g)
        fail_msg("token count differs at token %zu", line);
    free(got.p);
    test_rmtree(dir);
    free(dir);
}

/* Exact output of small documents. */

static void test_every_value_kind(void **state)
{
    struct json_writer *w = new_memory();

    (void)state;
    json_writer_object_begin(w, NULL);
    json_writer_int(w, "i", -42);
    json_writer_uint(w, "u", 18446744073709551615u);
    json_writer_double(w, "d", 0.25);
    json_writer_bool(w, "t", true);
    json_writer_bool(w, "f", false);
    json_writer_null(w, "n");
    json_writer_string(w, "s", "hi");
    json_writer_string_len(w, "z", "a\0b", 3);
    json_writer_time_ms(w, "ms", 1500000);
    json_writer_array_begin(w, "a");
    json_writer_array_begin(w, NULL);
    json_writer_array_end(w);
    json_writer_object_begin(w, NULL);
    json_writer_object_end(w);
    json_writer_int(w, NULL, 0);
    json_writer_string(w, NULL, "");
    json_writer_array_end(w);
    json_writer_object_begin(w, "o");
    json_writer_object_begin(w, "");
    json_writer_object_end(w);
    json_writer_object_end(w);
    json_writer_object_end(w);
    expect_output(w, "{\"i\":-42,\"u\":18446744073709551615,\"d\":0.25,\"t\":true,\"f\":false,"
                     "\"n\":null,\"s\":\"hi\",\"z\":\"a\\u0000b\",\"ms\":1.5,"
                     "\"a\":[[],{},0,\"\"],\"o\":{\"\":{}}}");
}

static void test_root_scalars(void **state)
{
    struct json_writer *w;

    (void)state;
    w = new_memory();
    json_writer_int(w, NULL, 7);
    expect_output(w, "7");
    w = new_memory();
    json_writer_null(w, NULL);
    expect_output(w, "null");
    w = new_memory();
    json_writer_string(w, NULL, "x");
    expect_output(w, "\"x\"");
    w = new_memory();
    json_writer_array_begin(w, NULL);
    json_writer_array_end(w);
    expect_output(w, "[]");
}

static void test_keys_are_escaped(void **state)
{
    struct json_writer *w = new_memory();

    (void)state;
    json_writer_object_begin(w, NULL);
    json_writer_int(w, "a\"b\\c\n\x01", 1);
    json_writer_int(w, "\xff", 2);
    json_writer_object_end(w);
    expect_output(w, "{\"a\\\"b\\\\c\\n\\u0001\":1,\"\xef\xbf\xbd\":2}");
}

static void test_integers(void **state)
{
    (void)state;
    for (int bit = 0; bit < 64; bit++) {
        uint64_t base = (uint64_t)1 << bit;
        uint64_t pow10 = 1;

        for (int k = 0; k < bit % 20; k++)
            pow10 *= 10;
        uint64_t values[] = {base - 1, base, base + 1, pow10 - 1, pow10, pow10 + 1};

        for (size_t i = 0; i < ARRAY_SIZE(values); i++) {
            struct json_writer *w = new_memory();
            char expected[128];

            json_writer_array_begin(w, NULL);
            json_writer_uint(w, NULL, values[i]);
            json_writer_int(w, NULL, (int64_t)values[i]);
            json_writer_int(w, NULL, -(int64_t)(values[i] >> 1));
            json_writer_array_end(w);
            (void)snprintf(expected, sizeof(expected), "[%" PRIu64 ",%" PRId64 ",%" PRId64 "]",
                           values[i], (int64_t)values[i], -(int64_t)(values[i] >> 1));
            expect_output(w, expected);
        }
    }
    {
        struct json_writer *w = new_memory();

        json_writer_array_begin(w, NULL);
        json_writer_int(w, NULL, INT64_MIN);
        json_writer_int(w, NULL, INT64_MAX);
        json_writer_uint(w, NULL, UINT64_MAX);
        json_writer_uint(w, NULL, 0);
        json_writer_array_end(w);
        expect_output(w, "[-9223372036854775808,9223372036854775807,18446744073709551615,0]");
    }
}

static void test_time_ms_table(void **state)
{
    static const struct {
        int64_t ns;
        const char *text;
    } cases[] = {
            {0, "0"},
            {1, "0.000001"},
            {999, "0.000999"},
            {1000, "0.001"},
            {100000, "0.1"},
            {1000000, "1"},
            {1500000, "1.5"},
            {-1500000, "-1.5"},
            {-1, "-0.000001"},
            {-1000000, "-1"},
            {123456789, "123.456789"},
            {4567123456000, "4567123.456"},
            {INT64_MAX, "9223372036854.775807"},
            {INT64_MIN, "-9223372036854.775808"},
            {INT64_MIN + 1, "-9223372036854.775807"},
    };

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct json_writer *w = new_memory();
        char ref[64];

        json_writer_time_ms(w, NULL, cases[i].ns);
        ref_time_ms(cases[i].ns, ref, sizeof(ref));
        assert_string_equal(ref, cases[i].text); /* the reference agrees with the table */
        expect_output(w, cases[i].text);
    }
}

static void test_time_ms_random(void **state)
{
    struct test_rng rng;

    (void)state;
    test_rng_init(&rng, test_seed());
    for (int i = 0; i < 20000; i++) {
        int64_t ns = (int64_t)(test_rng_next(&rng) >> test_rng_range(&rng, 0, 63));
        struct json_writer *w = new_memory();
        char ref[64];

        if (test_rng_range(&rng, 0, 1))
            ns = -ns;
        if (i % 3 == 0)
            ns -= ns % 1000; /* trailing zeros to trim */
        json_writer_time_ms(w, NULL, ns);
        ref_time_ms(ns, ref, sizeof(ref));
        expect_output(w, ref);
    }
}

static void test_doubles(void **state)
{
    static const struct {
        double value;
        const char *text;
    } cases[] = {
            {0.0, "0"},
            {-0.0, "-0"},
            {1.5, "1.5"},
            {0.1, "0.1"},
            {-2.5, "-2.5"},
            {1e20, "1e+20"},
            {1.0 / 3, "0.3333333333333333"},
            {0.1 + 0.2, "0.30000000000000004"},
            {DBL_MAX, "1.7976931348623157e+308"},
            {4567.123456, "4567.123456"},
    };
    struct test_rng rng;

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct json_writer *w = new_memory();

        json_writer_double(w, NULL, cases[i].value);
        expect_output(w, cases[i].text);
    }
    {
        struct json_writer *w = new_memory();

        json_writer_array_begin(w, NULL);
        json_writer_double(w, NULL, NAN);
        json_writer_double(w, NULL, INFINITY);
        json_writer_double(w, NULL, -INFINITY);
        json_writer_array_end(w);
        expect_output(w, "[null,null,null]");
    }
    /* Random bit patterns read back exactly. */
    test_rng_init(&rng, test_seed());
    for (int i = 0; i < 20000; i++) {
        uint64_t bits = test_rng_next(&rng);
        double v, back;
        struct json_writer *w = new_memory();
        char *s = NULL;

        memcpy(&v, &bits, sizeof(v));
        json_writer_double(w, NULL, v);
        assert_int_equal(json_writer_finish(w), 0);
        assert_int_equal(json_writer_copy_to(w, &s), 0);
        if (!isfinite(v)) {
            assert_string_equal(s, "null");
        } else {
            back = strtod(s, NULL);
            assert_true(back == v);
            assert_true(strlen(s) <= 24);
        }
        free(s);
        json_writer_free(w);
    }
}

static void test_doubles_ignore_locale(void **state)
{
    static const char *const locales[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8",
                                          "ru_RU.UTF-8"};
    const char *set = NULL;

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(locales) && !set; i++)
        set = setlocale(LC_NUMERIC, locales[i]);
    if (!set || strcmp(localeconv()->decimal_point, ".") == 0) {
        /* No locale with a decimal comma is installed. cmocka 1.1 reports skip() as
         * "not ok # SKIP", which meson counts as a failure, so pass with a note. */
        (void)setlocale(LC_NUMERIC, "C");
        print_message("# no decimal-comma locale installed: locale check not run\n");
        return;
    }
    {
        struct json_writer *w = new_memory();

        json_writer_array_begin(w, NULL);
        json_writer_double(w, NULL, 1.5);
        json_writer_double(w, NULL, 0.1 + 0.2);
        json_writer_array_end(w);
        (void)setlocale(LC_NUMERIC, "C");
        expect_output(w, "[1.5,0.30000000000000004]");
    }
}

/* Escaping. */

static void test_escape_every_control_byte(void **state)
{
    (void)state;
    for (unsigned c = 0; c < 0x80; c++) {
        struct json_writer *w = new_memory();
        char in[1] = {(char)c}, expected[16];

        json_writer_string_len(w, NULL, in, 1);
        switch (c) {
        case '\b':
            strcpy(expected, "\"\\b\"");
            break;
        case '\t':
            strcpy(expected, "\"\\t\"");
            break;
        case '\n':
            strcpy(expected, "\"\\n\"");
            break;
        case '\f':
            strcpy(expected, "\"\\f\"");
            break;
        case '\r':
            strcpy(expected, "\"\\r\"");
            break;
        case '"':
            strcpy(expected, "\"\\\"\"");
            break;
        case '\\':
            strcpy(expected, "\"\\\\\"");
            break;
        default:
            if (c < 0x20)
                (void)snprintf(expected, sizeof(expected), "\"\\u%04x\"", c);
            else
                (void)snprintf(expected, sizeof(expected), "\"%c\"", c);
        }
        expect_output(w, expected);
    }
}

static void test_escape_invalid_utf8(void **state)
{
#define FFFD "\xef\xbf\xbd"
    static const struct {
        const char *in, *out;
    } cases[] = {
            {"\x80", FFFD},
            {"a\377b", "a" FFFD "b"},                  /* octal: "\xffb" would be one escape */
            {"\xc0\xaf", FFFD FFFD},                   /* overlong '/' */
            {"\xc1\xbf", FFFD FFFD},                   /* overlong */
            {"\xc3\xa9", "\xc3\xa9"},                  /* é */
            {"\xc3", FFFD},                            /* truncated at the end */
            {"\303a", FFFD "a"},                       /* truncated before ASCII */
            {"\xe2\x82", FFFD FFFD},                   /* truncated € */
            {"\xe2\x82\xac", "\xe2\x82\xac"},          /* € */
            {"\xe2\x82\"", FFFD FFFD "\\\""},          /* truncated before '"' */
            {"\xe0\x80\xaf", FFFD FFFD FFFD},          /* overlong */
            {"\xe0\xa0\x80", "\xe0\xa0\x80"},          /* U+0800 */
            {"\xed\x9f\xbf", "\xed\x9f\xbf"},          /* U+D7FF */
            {"\xed\xa0\x80", FFFD FFFD FFFD},          /* U+D800 */
            {"\xed\xbf\xbf", FFFD FFFD FFFD},          /* U+DFFF */
            {"\xee\x80\x80", "\xee\x80\x80"},          /* U+E000 */
            {"\xf0\x8f\xbf\xbf", FFFD FFFD FFFD FFFD}, /* overlong */
            {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},  /* U+1F600 */
            {"\xf0\x9f\x98", FFFD FFFD FFFD},          /* truncated */
            {"\xf4\x8f\xbf\xbf", "\xf4\x8f\xbf\xbf"},  /* U+10FFFF */
            {"\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD}, /* U+110000 */
            {"\xf5\x80\x80\x80", FFFD FFFD FFFD FFFD},
            {"\xf8\x88\x80\x80\x80", FFFD FFFD FFFD FFFD FFFD},
            {"\xfe\xff", FFFD FFFD},
    };
#undef FFFD

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct json_writer *w = new_memory();
        char expected[64];
        char *ref = ref_json_string(cases[i].in, strlen(cases[i].in));

        (void)snprintf(expected, sizeof(expected), "\"%s\"", cases[i].out);
        assert_string_equal(ref, expected); /* the model agrees with the table */
        free(ref);
        json_writer_string(w, NULL, cases[i].in);
        expect_output(w, expected);
    }
}

/* Random byte strings, exact against the model; long ones cross chunk boundaries. */
static void test_random_strings_exact(void **state)
{
    struct test_rng rng;
    uint8_t *buf = malloc(300000);

    (void)state;
    assert_non_null(buf);
    test_rng_init(&rng, test_seed());
    for (int i = 0; i < 3000; i++) {
        size_t max = i % 100 == 0 ? 300000 : 200;
        size_t len = random_string(&rng, buf, max, 0);
        struct json_writer *w = new_memory();
        char *expected = ref_json_string((const char *)buf, len);

        /* A prefix of random length moves the string across a chunk boundary. */
        json_writer_array_begin(w, NULL);
        json_writer_string_len(w, NULL, (const char *)buf, len);
        json_writer_array_end(w);
        {
            char *s = NULL;

            assert_int_equal(json_writer_finish(w), 0);
            assert_int_equal(json_writer_copy_to(w, &s), 0);
            assert_int_equal(strlen(s), strlen(expected) + 2);
            assert_memory_equal(s + 1, expected, strlen(expected));
            free(s);
        }
        json_writer_free(w);
        free(expected);
    }
    free(buf);
}

/* A string that fills chunks exactly up to their ends, with escapes at every offset. */
static void test_strings_across_chunk_ends(void **state)
{
    char *in = malloc(3 * JSON_WRITER_CHUNK_BYTES);

    (void)state;
    assert_non_null(in);
    for (size_t pad = 0; pad < 40; pad++) {
        struct json_writer *w = new_memory();
        size_t len = 3 * JSON_WRITER_CHUNK_BYTES;
        char *expected, *s = NULL;

        for (size_t i = 0; i < len; i++)
            in[i] = "ab\n\xe2\x82\xac\"c\xf0\x9f\x98\x80"[(i + pad) % 12];
        json_writer_array_begin(w, NULL);
        for (size_t i = 0; i < pad; i++)
            json_writer_int(w, NULL, 0);
        json_writer_string_len(w, NULL, in, len - pad);
        json_writer_array_end(w);
        expected = ref_json_string(in, len - pad);
        assert_int_equal(json_writer_finish(w), 0);
        assert_int_equal(json_writer_copy_to(w, &s), 0);
        assert_memory_equal(s + 1 + 2 * pad, expected, strlen(expected));
        free(s);
        free(expected);
        json_writer_free(w);
    }
    free(in);
}

/* Splicing. */

static void test_splice_text(void **state)
{
    struct json_writer *w;

    (void)state;
    w = new_memory();
    json_writer_splice_text(w, NULL, "{\"a\":1}", 7);
    expect_output(w, "{\"a\":1}");

    w = new_memory();
    json_writer_array_begin(w, NULL);
    json_writer_splice_text(w, NULL, "[1,2]", 5);
    json_writer_int(w, NULL, 3);
    json_writer_splice_text(w, NULL, "\"x\"", 3);
    json_writer_splice_text(w, NULL, "{}", 2);
    json_writer_array_end(w);
    expect_output(w, "[[1,2],3,\"x\",{}]");

    w = new_memory();
    json_writer_object_begin(w, NULL);
    json_writer_splice_text(w, "k", "null", 4);
    json_writer_int(w, "b", 2);
    json_writer_splice_text(w, "c", "[true]", 6);
    json_writer_object_end(w);
    expect_output(w, "{\"k\":null,\"b\":2,\"c\":[true]}");
}

static void test_splice_text_large(void **state)
{
    size_t len = 5 * JSON_WRITER_CHUNK_BYTES + 17;
    char *text = malloc(len), *expected = malloc(len + 8);
    struct json_writer *w = new_memory();

    (void)state;
    assert_non_null(text);
    assert_non_null(expected);
    text[0] = '"';
    memset(text + 1, 'x', len - 2);
    text[len - 1] = '"';
    json_writer_array_begin(w, NULL);
    json_writer_int(w, NULL, 1);
    json_writer_splice_text(w, NULL, text, len);
    json_writer_array_end(w);
    memcpy(expected, "[1,", 3);
    memcpy(expected + 3, text, len);
    memcpy(expected + 3 + len, "]", 2);
    expect_output(w, expected);
    free(text);
    free(expected);
}

struct piece_list {
    const char *data[256];
    size_t count;
};

static int collect_piece(const char *data, size_t len, void *userdata)
{
    struct piece_list *pl = userdata;

    (void)len;
    assert_true(pl->count < ARRAY_SIZE(pl->data));
    pl->data[pl->count++] = data;
    return 0;
}

static void write_small(struct json_writer *w)
{
    json_writer_object_begin(w, NULL);
    json_writer_array_begin(w, "x");
    json_writer_int(w, NULL, 1);
    json_writer_int(w, NULL, 2);
    json_writer_array_end(w);
    json_writer_object_end(w);
}

static void test_splice_writer_small(void **state)
{
    struct json_writer *w = new_memory(), *other = new_memory();

    (void)state;
    json_writer_object_begin(w, NULL);
    json_writer_array_begin(w, "list");
    write_small(other);
    json_writer_splice_writer(w, NULL, other); /* first element */
    assert_int_equal(json_writer_length(other), 0);
    json_writer_int(w, NULL, 5);
    write_small(other);                        /* reusable */
    json_writer_splice_writer(w, NULL, other); /* middle */
    json_writer_int(w, NULL, 6);
    json_writer_array_end(w);
    json_writer_string(other, NULL, "s");
    json_writer_splice_writer(w, "k", other); /* in an object, with a key */
    json_writer_object_end(w);
    assert_int_equal(json_writer_error(other), 0);
    expect_output(w, "{\"list\":[{\"x\":[1,2]},5,{\"x\":[1,2]},6],\"k\":\"s\"}");
    json_writer_free(other);
}

/* Writes 0..n-1 as an array value. */
static void write_ints(struct json_writer *w, const char *key, int n)
{
    json_writer_array_begin(w, key);
    for (int i = 0; i < n; i++)
        json_writer_int(w, NULL, i);
    json_writer_array_end(w);
}

/* A big writer's chunks are moved: the same buffers show up in the destination. */
static void test_splice_writer_moves_chunks(void **state)
{
    (void)state;
    /* First element, after one or two elements, and as an object's property. */
    for (int where = 0; where < 4; where++) {
        struct json_writer *w = new_memory(), *other = new_memory(), *ref = new_memory();
        struct piece_list before = {0}, after = {0};
        const char *key = where == 3 ? "big" : NULL;
        char *got = NULL, *want = NULL;

        write_ints(other, NULL, 100000);
        assert_true(json_writer_length(other) > 3 * JSON_WRITER_CHUNK_BYTES);
        assert_int_equal(json_writer_each_chunk(other, collect_piece, &before), 0);
        /* w and ref get the same content; w by splicing. */
        for (int pass = 0; pass < 2; pass++) {
            struct json_writer *dst = pass ? ref : w;

            if (key)
                json_writer_object_begin(dst, NULL);
            else
                json_writer_array_begin(dst, NULL);
            for (int i = 0; i < where; i++)
                json_writer_int(dst, key ? (i ? "b" : "a") : NULL, i);
            if (pass) {
                write_ints(dst, key, 100000);
            } else {
                json_writer_splice_writer(dst, key, other);
            }
            json_writer_string(dst, key ? "z" : NULL, "after");
            if (key)
                json_writer_object_end(dst);
            else
                json_writer_array_end(dst);
        }
        assert_int_equal(json_writer_finish(w), 0);
        assert_int_equal(json_writer_finish(ref), 0);
        assert_int_equal(json_writer_copy_to(w, &got), 0);
        assert_int_equal(json_writer_copy_to(ref, &want), 0);
        assert_string_equal(got, want);
        assert_int_equal(json_writer_each_chunk(w, collect_piece, &after), 0);
        for (size_t i = 0; i < before.count; i++) {
            int found = 0;

            for (size_t j = 0; j < after.count; j++)
                found |= after.data[j] == before.data[i];
            assert_true(found);
        }
        assert_int_equal(json_writer_length(other), 0);
        assert_int_equal(json_writer_error(other), 0);
        free(got);
        free(want);
        json_writer_free(w);
        json_writer_free(ref);
        json_writer_free(other);
    }
}

static void test_splice_writer_errors(void **state)
{
    struct json_writer *w, *other;
    int fds[2];

    (void)state;
    /* Incomplete: an open container, or no value. */
    w = new_memory();
    other = new_memory();
    json_writer_array_begin(other, NULL);
    json_writer_splice_writer(w, NULL, other);
    assert_int_equal(json_writer_error(w), -EINVAL);
    json_writer_free(w);
    w = new_memory();
    json_writer_free(other);
    other = new_memory();
    json_writer_splice_writer(w, NULL, other);
    assert_int_equal(json_writer_error(w), -EINVAL);
    json_writer_free(w);
    /* Itself. */
    w = new_memory();
    json_writer_splice_writer(w, NULL, w);
    assert_int_equal(json_writer_error(w), -EINVAL);
    json_writer_free(w);
    /* An fd writer as the source. */
    assert_int_equal(pipe(fds), 0);
    w = new_memory();
    json_writer_free(other);
    assert_int_equal(json_writer_new_fd(fds[1], &other), 0);
    json_writer_int(other, NULL, 1);
    json_writer_splice_writer(w, NULL, other);
    assert_int_equal(json_writer_error(w), -EINVAL);
    json_writer_free(w);
    json_writer_free(other);
    (void)close(fds[0]);
    (void)close(fds[1]);
    /* The source's latched error propagates and the source is left alone. */
    w = new_memory();
    other = new_memory();
    json_writer_array_end(other);
    json_writer_splice_writer(w, NULL, other);
    assert_int_equal(json_writer_error(w), -EINVAL);
    assert_int_equal(json_writer_error(other), -EINVAL);
    json_writer_free(w);
    json_writer_free(other);
}

/* Memory writer output access. */

struct concat {
    char *buf;
    size_t len;
    int calls, stop_after;
};

static int concat_piece(const char *data, size_t len, void *userdata)
{
    struct concat *c = userdata;

    assert_true(len > 0);
    if (c->stop_after && c->calls == c->stop_after)
        return -ECANCELED;
    c->calls++;
    memcpy(c->buf + c->len, data, len);
    c->len += len;
    return 0;
}

static void test_each_chunk_and_copy(void **state)
{
    struct json_writer *w = new_memory();
    struct concat c = {0};
    char *s = NULL;
    size_t len;
    int fds[2];

    (void)state;
    write_ints(w, NULL, 200000);
    assert_int_equal(json_writer_finish(w), 0);
    len = json_writer_length(w);
    c.buf = malloc(len);
    assert_non_null(c.buf);
    assert_int_equal(json_writer_each_chunk(w, concat_piece, &c), 0);
    assert_true(c.calls > 1);
    assert_int_equal(c.len, len);
    assert_int_equal(json_writer_copy_to(w, &s), 0);
    assert_int_equal(strlen(s), len);
    assert_memory_equal(s, c.buf, len);
    /* A negative return stops the walk and is passed on. */
    c.len = 0;
    c.calls = 0;
    c.stop_after = 2;
    assert_int_equal(json_writer_each_chunk(w, concat_piece, &c), -ECANCELED);
    assert_int_equal(c.calls, 2);
    free(s);
    free(c.buf);
    json_writer_free(w);
    /* Not for an fd writer. */
    assert_int_equal(pipe(fds), 0);
    assert_int_equal(json_writer_new_fd(fds[1], &w), 0);
    assert_int_equal(json_writer_copy_to(w, &s), -EINVAL);
    assert_int_equal(json_writer_each_chunk(w, concat_piece, &c), -EINVAL);
    json_writer_free(w);
    (void)close(fds[0]);
    (void)close(fds[1]);
    /* Empty writer: empty string. */
    w = new_memory();
    s = NULL;
    assert_int_equal(json_writer_copy_to(w, &s), 0);
    assert_string_equal(s, "");
    free(s);
    json_writer_free(w);
    assert_null(json_writer_free(NULL));
}

/* Misuse and the failure latch. */

static void test_misuse_is_einval(void **state)
{
    struct json_writer *w;
    size_t len;

    (void)state;
    /* Each case on a fresh writer, which must then ignore everything. */
    for (int kind = 0; kind < 15; kind++) {
        w = new_memory();
        switch (kind) {
        case 0: /* key inside an array */
            json_writer_array_begin(w, NULL);
            json_writer_int(w, "k", 1);
            break;
        case 1: /* no key inside an object */
            json_writer_object_begin(w, NULL);
            json_writer_int(w, NULL, 1);
            break;
        case 2: /* key at the root */
            json_writer_int(w, "k", 1);
            break;
        case 3: /* wrong end */
            json_writer_array_begin(w, NULL);
            json_writer_object_end(w);
            break;
        case 4:
            json_writer_object_begin(w, NULL);
            json_writer_array_end(w);
            break;
        case 5: /* end at the root */
            json_writer_array_end(w);
            break;
        case 6: /* a second root value */
            json_writer_int(w, NULL, 1);
            json_writer_int(w, NULL, 2);
            break;
        case 7: /* too deep */
            for (int i = 0; i <= JSON_WRITER_MAX_DEPTH; i++)
                json_writer_array_begin(w, NULL);
            break;
        case 8: /* NULL string */
            json_writer_string(w, NULL, NULL);
            break;
        case 9:
            json_writer_string_len(w, NULL, NULL, 3);
            break;
        case 10: /* empty splice */
            json_writer_splice_text(w, NULL, "", 0);
            break;
        case 11:
            json_writer_splice_text(w, NULL, NULL, 4);
            break;
        case 12: /* key in an array on the container path */
            json_writer_array_begin(w, NULL);
            json_writer_object_begin(w, "k");
            break;
        case 13: /* no key on an object's second element */
            json_writer_object_begin(w, NULL);
            json_writer_int(w, "a", 1);
            json_writer_string(w, NULL, "x");
            break;
        default: /* key inside a non-empty array */
            json_writer_array_begin(w, NULL);
            json_writer_int(w, NULL, 1);
            json_writer_null(w, "k");
        }
        assert_int_equal(json_writer_error(w), -EINVAL);
        len = json_writer_length(w);
        json_writer_int(w, NULL, 1);
        json_writer_string(w, NULL, "more");
        json_writer_array_begin(w, NULL);
        json_writer_array_end(w);
        json_writer_object_end(w);
        json_writer_splice_text(w, NULL, "1", 1);
        assert_int_equal(json_writer_length(w), len);
        assert_int_equal(json_writer_error(w), -EINVAL);
        assert_int_equal(json_writer_finish(w), -EINVAL);
        json_writer_free(w);
    }
    /* finish with an open container, or with no value at all. */
    w = new_memory();
    json_writer_object_begin(w, NULL);
    assert_int_equal(json_writer_finish(w), -EINVAL);
    json_writer_free(w);
    w = new_memory();
    assert_int_equal(json_writer_finish(w), -EINVAL);
    json_writer_free(w);
    /* Writing after a successful finish. */
    w = new_memory();
    json_writer_int(w, NULL, 1);
    assert_int_equal(json_writer_finish(w), 0);
    assert_int_equal(json_writer_finish(w), 0);
    json_writer_int(w, NULL, 2);
    assert_int_equal(json_writer_error(w), -EINVAL);
    json_writer_free(w);
    /* Bad arguments at the boundary. */
    assert_int_equal(json_writer_new_memory(NULL), -EINVAL);
    assert_int_equal(json_writer_new_fd(-1, &w), -EINVAL);
}

static void test_depth_limit(void **state)
{
    struct json_writer *w = new_memory();
    char expected[2 * JSON_WRITER_MAX_DEPTH + 1];

    (void)state;
    /* MAX_DEPTH levels of alternating objects and arrays, with keys where needed. */
    for (int i = 0; i < JSON_WRITER_MAX_DEPTH; i++) {
        if (i % 2)
            json_writer_array_begin(w, "k");
        else
            json_writer_object_begin(w, NULL);
    }
    assert_int_equal(json_writer_error(w), 0);
    for (int i = JSON_WRITER_MAX_DEPTH - 1; i >= 0; i--) {
        if (i % 2)
            json_writer_array_end(w);
        else
            json_writer_object_end(w);
    }
    assert_int_equal(json_writer_finish(w), 0);
    json_writer_free(w);
    /* Exactly MAX_DEPTH nested arrays are fine. */
    w = new_memory();
    for (int i = 0; i < JSON_WRITER_MAX_DEPTH; i++)
        json_writer_array_begin(w, NULL);
    for (int i = 0; i < JSON_WRITER_MAX_DEPTH; i++)
        json_writer_array_end(w);
    memset(expected, '[', JSON_WRITER_MAX_DEPTH);
    memset(expected + JSON_WRITER_MAX_DEPTH, ']', JSON_WRITER_MAX_DEPTH);
    expected[2 * JSON_WRITER_MAX_DEPTH] = '\0';
    expect_output(w, expected);
}

/* The fd writer. */

/* Writes a document mixing every call, including both kinds of splice, driven by seed. */
static void write_mixed(struct json_writer *w, uint64_t seed)
{
    struct test_rng rng;
    uint8_t buf[300];

    test_rng_init(&rng, seed);
    json_writer_object_begin(w, NULL);
    json_writer_array_begin(w, "rows");
    for (int i = 0; i < 30000; i++) {
        json_writer_array_begin(w, NULL);
        json_writer_int(w, NULL, (int64_t)test_rng_range(&rng, 0, 100000));
        json_writer_time_ms(w, NULL, (int64_t)test_rng_next(&rng));
        json_writer_null(w, NULL);
        json_writer_array_end(w);
        if (i % 1000 == 0) {
            struct json_writer *sub = new_memory();

            write_ints(sub, NULL, (int)test_rng_range(&rng, 1, 30000));
            json_writer_splice_writer(w, NULL, sub);
            json_writer_free(sub);
            json_writer_splice_text(w, NULL, "{\"t\":[1]}", 9);
        }
        if (i % 7 == 0) {
            size_t len = random_string(&rng, buf, sizeof(buf), 0);

            json_writer_string_len(w, NULL, (const char *)buf, len);
        }
    }
    json_writer_array_end(w);
    json_writer_double(w, "d", 0.5);
    json_writer_bool(w, "b", true);
    json_writer_object_end(w);
}

static void test_fd_writer_matches_memory(void **state)
{
    char *dir = test_tmpdir("json-fd"), path[512];
    struct json_writer *mem = new_memory(), *fdw = NULL;
    char *want = NULL, *got;
    size_t got_len;
    int fd;

    (void)state;
    assert_non_null(dir);
    (void)snprintf(path, sizeof(path), "%s/out.json", dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(json_writer_new_fd(fd, &fdw), 0);
    write_mixed(mem, test_seed());
    write_mixed(fdw, test_seed());
    assert_int_equal(json_writer_finish(mem), 0);
    assert_int_equal(json_writer_finish(fdw), 0);
    assert_int_equal(json_writer_length(fdw), json_writer_length(mem));
    assert_true(json_writer_length(mem) > 10 * JSON_WRITER_CHUNK_BYTES);
    json_writer_free(fdw);
    assert_int_equal(close(fd), 0); /* still open: the writer never closes it */
    assert_int_equal(json_writer_copy_to(mem, &want), 0);
    got = read_file(path, &got_len);
    assert_int_equal(got_len, json_writer_length(mem));
    assert_memory_equal(got, want, got_len);
    free(got);
    free(want);
    json_writer_free(mem);
    test_rmtree(dir);
    free(dir);
}

static int count_chunk(const char *data, size_t len, void *userdata)
{
    size_t *counts = userdata; /* [chunks, largest] */

    (void)data;
    counts[0]++;
    if (len > counts[1])
        counts[1] = len;
    return 0;
}

/* A document of about `rows` rows of integers and times, with a writer of up to 60000 ints
 * spliced in every 5000 rows, as one string (caller frees). */
static char *mixed_document(int rows, uint64_t seed, size_t *ret_chunks, size_t *ret_largest)
{
    struct json_writer *w = new_memory();
    struct test_rng rng;
    size_t counts[2] = {0, 0};
    char *s = NULL;

    test_rng_init(&rng, seed);
    json_writer_array_begin(w, NULL);
    for (int i = 0; i < rows; i++) {
        json_writer_int(w, NULL, (int64_t)test_rng_next(&rng));
        json_writer_time_ms(w, NULL, (int64_t)test_rng_range(&rng, 0, 1u << 30));
        if (i % 5000 == 4999) {
            struct json_writer *sub = new_memory();

            write_ints(sub, NULL, (int)test_rng_range(&rng, 1, 60000));
            json_writer_splice_writer(w, NULL, sub);
            json_writer_free(sub);
        }
    }
    json_writer_array_end(w);
    assert_int_equal(json_writer_finish(w), 0);
    assert_int_equal(json_writer_each_chunk(w, count_chunk, counts), 0);
    assert_int_equal(json_writer_copy_to(w, &s), 0);
    json_writer_free(w);
    *ret_chunks = counts[0];
    *ret_largest = counts[1];
    return s;
}

/* A memory writer's chunks after its first JSON_WRITER_SMALL_CHUNKS are huge-page sized,
 * aligned and advised so; the output is byte-identical to one made of small malloc'd chunks
 * only, at every size, whether mapping works, mmap fails, or the advice is refused (then the
 * writer stops trying: one refusal, small chunks from there on). */
static void test_big_chunks_same_bytes(void **state)
{
    static const int rows[] = {0, 1, 3000, 4999, 5000, 20000, 70000, 320000};
    static const struct {
        bool mmap_fails, madvise_fails;
    } modes[] = {{false, false}, {false, true}, {true, false}};
    unsigned saved = json__writer_chunk_ways(0);
    uint64_t seed = test_seed();

    (void)state;
    for (size_t r = 0; r < ARRAY_SIZE(rows); r++) {
        size_t ref_chunks, ref_largest;
        char *ref;

        (void)json__writer_chunk_ways(0); /* the reference: small malloc'd chunks only */
        huge_advice = 0;
        ref = mixed_document(rows[r], seed + r, &ref_chunks, &ref_largest);
        assert_true(ref_largest <= JSON_WRITER_CHUNK_BYTES);
        assert_int_equal(huge_advice, 0);
        for (size_t m = 0; m < ARRAY_SIZE(modes); m++) {
            bool big = strlen(ref) > 6 * (size_t)JSON_WRITER_BIG_CHUNK_BYTES;
            size_t chunks, largest;
            char *s;

            (void)json__writer_chunk_ways(JSON__WRITER_CHUNK_MMAP);
            mmap_fail = modes[m].mmap_fails;
            madvise_fail = modes[m].madvise_fails;
            huge_advice = huge_misaligned = 0;
            s = mixed_document(rows[r], seed + r, &chunks, &largest);
            mmap_fail = madvise_fail = false;
            assert_int_equal(strlen(s), strlen(ref));
            assert_memory_equal(s, ref, strlen(ref));
            free(s);
            assert_int_equal(huge_misaligned, 0);
            if (modes[m].mmap_fails || modes[m].madvise_fails) {
                assert_true(largest <= JSON_WRITER_CHUNK_BYTES);
                assert_int_equal(chunks, ref_chunks);
                assert_true(huge_advice <= (modes[m].madvise_fails ? 1 : 0));
                if (big && modes[m].madvise_fails)
                    assert_int_equal(huge_advice, 1);
                continue;
            }
            assert_true(largest <= JSON_WRITER_BIG_CHUNK_BYTES);
            if (big) {
                /* ~20 MB, like a child's 8 MiB buffer: 300+ small chunks before; now the
                 * spliced writers' small chunks are most of them. */
                assert_true(largest > JSON_WRITER_BIG_CHUNK_BYTES / 2);
                assert_true(chunks <= ref_chunks / 2);
                assert_true(huge_advice > 0);
            }
        }
        free(ref);
    }
    (void)json__writer_chunk_ways(saved);
}

static void test_fd_writer_closed_pipe(void **state)
{
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    struct json_writer *w = NULL;
    int fds[2];
    size_t len;

    (void)state;
    assert_int_equal(sigaction(SIGPIPE, &ign, &old), 0);
    assert_int_equal(pipe(fds), 0);
    (void)close(fds[0]);
    assert_int_equal(json_writer_new_fd(fds[1], &w), 0);
    json_writer_array_begin(w, NULL);
    for (int i = 0; i < 100000 && !json_writer_error(w); i++)
        json_writer_int(w, NULL, i);
    assert_int_equal(json_writer_error(w), -EPIPE);
    len = json_writer_length(w);
    json_writer_int(w, NULL, 1);
    json_writer_array_end(w);
    json_writer_string(w, NULL, "x");
    assert_int_equal(json_writer_length(w), len);
    assert_int_equal(json_writer_finish(w), -EPIPE);
    json_writer_free(w);
    (void)close(fds[1]);
    assert_int_equal(sigaction(SIGPIPE, &old, NULL), 0);
}

static void test_fd_writer_bad_fd(void **state)
{
    struct json_writer *w = NULL;
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);

    (void)state;
    assert_true(fd >= 0);
    assert_int_equal(close(fd), 0);
    assert_int_equal(json_writer_new_fd(fd, &w), 0);
    json_writer_string(w, NULL, "lost");
    assert_int_equal(json_writer_error(w), 0); /* still buffered */
    assert_int_equal(json_writer_finish(w), -EBADF);
    assert_int_equal(json_writer_finish(w), -EBADF);
    json_writer_free(w);
}

/* A socket whose peer is gone gives -EPIPE even with SIGPIPE at its default (fatal) action:
 * a profiled program must not die because the daemon went away. */
static void test_fd_writer_socket_no_sigpipe(void **state)
{
    struct sigaction dfl = {.sa_handler = SIG_DFL}, old;
    struct json_writer *w = NULL;
    int sv[2];

    (void)state;
    assert_int_equal(sigaction(SIGPIPE, &dfl, &old), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    (void)close(sv[1]);
    assert_int_equal(json_writer_new_fd(sv[0], &w), 0);
    write_ints(w, NULL, 100);
    assert_int_equal(json_writer_finish(w), -EPIPE);
    json_writer_free(w);
    (void)close(sv[0]);
    assert_int_equal(sigaction(SIGPIPE, &old, NULL), 0);
}

/* Out of memory. */

static void test_enomem(void **state)
{
    struct json_writer *w = NULL, *other;
    char *s = NULL;
    size_t len;
    int fds[2];

    (void)state;
    /* Creation fails cleanly. */
    alloc_fail_in = 0;
    assert_int_equal(json_writer_new_memory(&w), -ENOMEM);
    assert_null(w);
    assert_int_equal(pipe(fds), 0);
    for (int i = 0; i < 2; i++) {
        alloc_fail_in = i; /* the writer, then its chunk */
        assert_int_equal(json_writer_new_fd(fds[1], &w), -ENOMEM);
        assert_null(w);
    }
    alloc_fail_in = -1;
    (void)close(fds[0]);
    (void)close(fds[1]);

    /* The first chunk, a later small one, then a big one (its mmap failing too): the error
     * is latched, the rest ignored. */
    for (int i = 0; i < 3; i++) {
        /* i == 2: into the last small chunk; the next one is big. */
        size_t fill = i == 1 ? 2 * JSON_WRITER_CHUNK_BYTES
                             : (JSON_WRITER_SMALL_CHUNKS - 1) * JSON_WRITER_CHUNK_BYTES;

        w = new_memory();
        json_writer_array_begin(w, NULL);
        if (i > 0)
            for (int k = 0; json_writer_length(w) < fill; k++)
                json_writer_int(w, NULL, k);
        mmap_fail = i == 2;
        mmap_refused = 0;
        alloc_fail_in = 0;
        for (int k = 0; k < 100000 && !json_writer_error(w); k++)
            json_writer_string(w, NULL, "filler");
        alloc_fail_in = -1;
        mmap_fail = false;
        assert_int_equal(mmap_refused, i == 2 ? 1 : 0);
        assert_int_equal(json_writer_error(w), -ENOMEM);
        len = json_writer_length(w);
        json_writer_string(w, NULL, "more");
        json_writer_array_end(w);
        assert_int_equal(json_writer_length(w), len);
        assert_int_equal(json_writer_finish(w), -ENOMEM);
        assert_int_equal(json_writer_copy_to(w, &s), -ENOMEM);
        assert_null(s);
        json_writer_free(w);
    }

    /* copy_to itself. */
    w = new_memory();
    json_writer_int(w, NULL, 1);
    alloc_fail_in = 0;
    assert_int_equal(json_writer_copy_to(w, &s), -ENOMEM);
    assert_null(s);
    assert_int_equal(json_writer_error(w), 0); /* reading does not latch */
    json_writer_free(w);

    /* Splices. */
    w = new_memory();
    other = new_memory();
    write_small(other);
    alloc_fail_in = 0;
    json_writer_splice_writer(w, NULL, other);
    alloc_fail_in = -1;
    assert_int_equal(json_writer_error(w), 0); /* moved: nothing to allocate */
    json_writer_free(w);
    json_writer_free(other);
    w = new_memory();
    alloc_fail_in = 0;
    json_writer_splice_text(w, NULL, "[1]", 3); /* copied: needs a chunk */
    alloc_fail_in = -1;
    assert_int_equal(json_writer_error(w), -ENOMEM);
    json_writer_free(w);
}

static void test_unique_strings_enomem(void **state)
{
    struct json_unique_strings *us = NULL;
    char buf[32];
    uint32_t index;

    (void)state;
    alloc_fail_in = 0;
    assert_int_equal(json_unique_strings_new(&us), -ENOMEM);
    assert_null(us);
    assert_int_equal(json_unique_strings_new(&us), 0);
    /* Fail every allocation an insertion may make (slots, entries, arena), across growth:
     * a failed insertion leaves the table as it was. */
    for (uint32_t i = 0; i < 2000; i++) {
        int len = snprintf(buf, sizeof(buf), "s%u", i);

        for (int k = 0;; k++) {
            uint32_t count = json_unique_strings_count(us);
            int r;

            alloc_fail_in = k;
            r = json_unique_strings_index(us, buf, (size_t)len, &index);
            alloc_fail_in = -1;
            if (r == 0)
                break;
            assert_int_equal(r, -ENOMEM);
            assert_int_equal(json_unique_strings_count(us), count);
        }
        assert_int_equal(index, i);
    }
    for (uint32_t i = 0; i < 2000; i++) {
        int len = snprintf(buf, sizeof(buf), "s%u", i);

        assert_int_equal(json_unique_strings_index(us, buf, (size_t)len, &index), 0);
        assert_int_equal(index, i);
    }
    json_unique_strings_free(us);
}

/* Random documents against Python. */

struct gen {
    struct test_rng *rng;
    struct strbuf *expect; /* tokens, one per line, in the checker's format */
    int budget;            /* values left */
};

static const struct {
    const char *json, *tokens;
} splice_texts[] = {
        {"[1,2]", "[\nnum:1\nnum:2\n]\n"},
        {"{\"a\":[true,null]}", "{\nk:61\n[\nb:1\nn\n]\n}\n"},
        {"\"x\"", "s:78\n"},
        {"-12", "num:-12\n"},
        {" [ ] ", "[\n]\n"},
        {"{}", "{\n}\n"},
        {"0.5", "num:0.5\n"},
};

static void gen_value(struct gen *g, struct json_writer *w, const char *key, int depth);

static void gen_key(struct gen *g, char *key, size_t size)
{
    size_t len = random_string(g->rng, (uint8_t *)key, size - 1, 1);
    uint8_t clean[3 * 64];

    key[len] = '\0';
    sb_add(g->expect, "k:");
    sb_hex(g->expect, clean, ref_sanitize((const uint8_t *)key, len, clean));
    sb_add(g->expect, "\n");
}

static void gen_value(struct gen *g, struct json_writer *w, const char *key, int depth)
{
    struct test_rng *rng = g->rng;
    uint64_t kind = test_rng_range(rng, 0, depth >= 12 || g->budget <= 0 ? 8 : 12);

    g->budget--;
    switch (kind) {
    case 0: {
        int64_t v = (int64_t)(test_rng_next(rng) >> test_rng_range(rng, 0, 63));

        if (test_rng_range(rng, 0, 1))
            v = -v;
        json_writer_int(w, key, v);
        sb_add(g->expect, "num:%" PRId64 "\n", v);
        break;
    }
    case 1: {
        uint64_t v = test_rng_next(rng) >> test_rng_range(rng, 0, 63);

        json_writer_uint(w, key, v);
        sb_add(g->expect, "num:%" PRIu64 "\n", v);
        break;
    }
    case 2: {
        uint64_t bits = test_rng_next(rng);
        double v;

        memcpy(&v, &bits, sizeof(v));
        if (test_rng_range(rng, 0, 1))
            v = (double)(int64_t)bits / 1e9;
        json_writer_double(w, key, v);
        if (isfinite(v))
            sb_add(g->expect, "d:%.17g\n", v);
        else
            sb_add(g->expect, "n\n");
        break;
    }
    case 3: {
        int64_t ns = (int64_t)test_rng_next(rng);
        char ref[64];

        if (test_rng_range(rng, 0, 1))
            ns >>= test_rng_range(rng, 0, 63);
        json_writer_time_ms(w, key, ns);
        ref_time_ms(ns, ref, sizeof(ref));
        sb_add(g->expect, "num:%s\n", ref);
        break;
    }
    case 4: {
        bool b = test_rng_range(rng, 0, 1);

        json_writer_bool(w, key, b);
        sb_add(g->expect, "b:%d\n", b);
        break;
    }
    case 5:
        json_writer_null(w, key);
        sb_add(g->expect, "n\n");
        break;
    case 6:
    case 7: {
        uint8_t buf[200], clean[600];
        size_t len = random_string(rng, buf, sizeof(buf), 0);

        json_writer_string_len(w, key, (const char *)buf, len);
        sb_add(g->expect, "s:");
        sb_hex(g->expect, clean, ref_sanitize(buf, len, clean));
        sb_add(g->expect, "\n");
        break;
    }
    case 8: {
        size_t i = (size_t)test_rng_range(rng, 0, ARRAY_SIZE(splice_texts) - 1);

        json_writer_splice_text(w, key, splice_texts[i].json, strlen(splice_texts[i].json));
        sb_add(g->expect, "%s", splice_texts[i].tokens);
        break;
    }
    case 9: {
        struct json_writer *sub = new_memory();

        gen_value(g, sub, NULL, depth + 1);
        assert_int_equal(json_writer_finish(sub), 0);
        json_writer_splice_writer(w, key, sub);
        json_writer_free(sub);
        break;
    }
    case 10:
    case 11: {
        int n = (int)test_rng_range(rng, 0, 12);

        json_writer_array_begin(w, key);
        sb_add(g->expect, "[\n");
        for (int i = 0; i < n; i++)
            gen_value(g, w, NULL, depth + 1);
        json_writer_array_end(w);
        sb_add(g->expect, "]\n");
        break;
    }
    default: {
        int n = (int)test_rng_range(rng, 0, 12);

        json_writer_object_begin(w, key);
        sb_add(g->expect, "{\n");
        for (int i = 0; i < n; i++) {
            char k[40];

            gen_key(g, k, sizeof(k));
            gen_value(g, w, k, depth + 1);
        }
        json_writer_object_end(w);
        sb_add(g->expect, "}\n");
    }
    }
}

static void test_random_documents_python(void **state)
{
    struct test_rng rng;

    (void)state;
    if (!have_python())
        fail_msg("python3 with json and decimal is needed as the independent parser");
    test_rng_init(&rng, test_seed());
    for (int round = 0; round < 6; round++) {
        struct strbuf expect = {0};
        struct gen g = {.rng = &rng, .expect = &expect, .budget = 200 << (2 * (round % 3))};
        struct json_writer *w = new_memory();
        char *s = NULL;

        /* Root: an array of documents, so one Python run checks many. */
        json_writer_array_begin(w, NULL);
        sb_add(&expect, "[\n");
        while (g.budget > 0)
            gen_value(&g, w, NULL, 1);
        json_writer_array_end(w);
        sb_add(&expect, "]\n");
        assert_int_equal(json_writer_finish(w), 0);
        assert_int_equal(json_writer_copy_to(w, &s), 0);
        python_check(s, json_writer_length(w), expect.p);
        free(s);
        free(expect.p);
        json_writer_free(w);
    }
}

/* Unique strings. */

static void test_unique_strings_dedup(void **state)
{
    struct json_unique_strings *us = NULL;
    struct json_writer *w = new_memory();
    uint32_t a, b, c, d, e, again;

    (void)state;
    assert_int_equal(json_unique_strings_new(&us), 0);
    assert_int_equal(json_unique_strings_count(us), 0);
    assert_int_equal(json_unique_strings_index(us, "main", 4, &a), 0);
    assert_int_equal(json_unique_strings_index(us, "foo (in libc.so.6)", 18, &b), 0);
    assert_int_equal(json_unique_strings_index(us, "", 0, &c), 0);
    assert_int_equal(json_unique_strings_index(us, "a\0b", 3, &d), 0);
    assert_int_equal(json_unique_strings_index(us, "a\0c", 3, &e), 0);
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    assert_int_equal(c, 2);
    assert_int_equal(d, 3);
    assert_int_equal(e, 4);
    assert_int_equal(json_unique_strings_index(us, "main", 4, &again), 0);
    assert_int_equal(again, a);
    assert_int_equal(json_unique_strings_index(us, NULL, 0, &again), 0);
    assert_int_equal(again, c);
    assert_int_equal(json_unique_strings_index(us, "mai", 3, &again), 0);
    assert_int_equal(again, 5);
    assert_int_equal(json_unique_strings_count(us), 6);
    assert_int_equal(json_unique_strings_index(us, NULL, 1, &again), -EINVAL);
    json_writer_object_begin(w, NULL);
    json_unique_strings_write(us, w, "stringTable");
    json_writer_object_end(w);
    expect_output(w, "{\"stringTable\":[\"main\",\"foo (in libc.so.6)\",\"\",\"a\\u0000b\","
                     "\"a\\u0000c\",\"mai\"]}");
    assert_null(json_unique_strings_free(us));
    assert_null(json_unique_strings_free(NULL));
}

static void test_unique_strings_growth(void **state)
{
    struct json_unique_strings *us = NULL;
    const uint32_t n = 100000;
    char buf[64];

    (void)state;
    assert_int_equal(json_unique_strings_new(&us), 0);
    /* Two passes: the first adds, the second must find the same indexes. */
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < n; i++) {
            uint32_t index = UINT32_MAX;
            int len = snprintf(buf, sizeof(buf), "function_%u (in lib%u.so)", i, i % 7);

            assert_int_equal(json_unique_strings_index(us, buf, (size_t)len, &index), 0);
            assert_int_equal(index, i);
        }
        assert_int_equal(json_unique_strings_count(us), n);
    }
    /* Long strings (own arena blocks) are stored too. */
    {
        size_t len = 100000;
        char *big = malloc(len);
        uint32_t i1, i2;

        assert_non_null(big);
        memset(big, 'q', len);
        assert_int_equal(json_unique_strings_index(us, big, len, &i1), 0);
        big[len - 1] = 'r';
        assert_int_equal(json_unique_strings_index(us, big, len, &i2), 0);
        assert_int_equal(i1, n);
        assert_int_equal(i2, n + 1);
        big[len - 1] = 'q';
        assert_int_equal(json_unique_strings_index(us, big, len, &i2), 0);
        assert_int_equal(i2, n);
        free(big);
    }
    /* Written in index order. */
    {
        struct json_writer *w = new_memory();
        char *s = NULL, *p;

        json_unique_strings_write(us, w, NULL);
        assert_int_equal(json_writer_finish(w), 0);
        assert_int_equal(json_writer_copy_to(w, &s), 0);
        p = s;
        assert_true(*p++ == '[');
        for (uint32_t i = 0; i < n; i++) {
            int len = snprintf(buf, sizeof(buf), "\"function_%u (in lib%u.so)\",", i, i % 7);

            assert_memory_equal(p, buf, (size_t)len);
            p += len;
        }
        free(s);
        json_writer_free(w);
    }
    json_unique_strings_free(us);
}

/* Raw rows give the bytes of the value functions, across chunk boundaries, for numbers,
 * times and strings with escapes and broken UTF-8; misuse latches -EINVAL. */
static void test_raw_values(void **state)
{
    static const char *const strings[] = {"",
                                          "plain",
                                          "a \"q\" \\ b",
                                          "\n\t\x01\x7f",
                                          "caf\xc3\xa9",
                                          "bad \xc3\x28 \xff \xed\xa0\x80 end",
                                          "trunc \xe2\x82"};
    struct json_writer *raw = new_memory(), *ref = new_memory();
    char *got = NULL, *want = NULL;

    (void)state;
    json_writer_array_begin(raw, NULL);
    json_writer_array_begin(ref, NULL);
    for (uint64_t i = 0; i < 20000; i++) {
        const char *str = strings[i % ARRAY_SIZE(strings)];
        size_t len = strlen(str);
        int64_t ns = (int64_t)(i * 7919u) * (i % 3 ? 1 : -1) * 1000 + (int64_t)(i % 1000);
        char *p = json_writer_raw_begin(raw, NULL,
                                        4 * JSON_RAW_NUMBER_BYTES + 8 + JSON_RAW_STRING_BYTES(len));

        assert_non_null(p);
        *p++ = '[';
        p = json_raw_uint(p, i * 0x9e3779b97f4a7c15u);
        *p++ = ',';
        p = json_raw_int(p, i % 2 ? (int64_t)i : INT64_MIN + (int64_t)i);
        *p++ = ',';
        p = json_raw_time_ms(p, ns);
        *p++ = ',';
        p = json_raw_string(p, str, len);
        *p++ = ']';
        json_writer_raw_end(raw, p);

        json_writer_array_begin(ref, NULL);
        json_writer_uint(ref, NULL, i * 0x9e3779b97f4a7c15u);
        json_writer_int(ref, NULL, i % 2 ? (int64_t)i : INT64_MIN + (int64_t)i);
        json_writer_time_ms(ref, NULL, ns);
        json_writer_string_len(ref, NULL, str, len);
        json_writer_array_end(ref);
    }
    /* A raw value under a key. */
    json_writer_object_begin(raw, NULL);
    {
        char *p = json_writer_raw_begin(raw, "k\"ey", 8);

        assert_non_null(p);
        memcpy(p, "null", 4);
        json_writer_raw_end(raw, p + 4);
    }
    json_writer_object_end(raw);
    json_writer_object_begin(ref, NULL);
    json_writer_null(ref, "k\"ey");
    json_writer_object_end(ref);
    json_writer_array_end(raw);
    json_writer_array_end(ref);
    assert_int_equal(json_writer_finish(raw), 0);
    assert_int_equal(json_writer_finish(ref), 0);
    assert_true(json_writer_length(raw) > 2 * JSON_WRITER_CHUNK_BYTES);
    assert_int_equal(json_writer_copy_to(raw, &got), 0);
    assert_int_equal(json_writer_copy_to(ref, &want), 0);
    assert_string_equal(got, want);
    free(got);
    free(want);
    json_writer_free(raw);
    json_writer_free(ref);

    /* Too much room asked for, a key in an array, and after an error: NULL. */
    raw = new_memory();
    json_writer_array_begin(raw, NULL);
    assert_null(json_writer_raw_begin(raw, NULL, JSON_WRITER_RAW_MAX_BYTES + 1));
    assert_int_equal(json_writer_error(raw), -EINVAL);
    assert_null(json_writer_raw_begin(raw, NULL, 8));
    json_writer_free(raw);
    raw = new_memory();
    json_writer_array_begin(raw, NULL);
    assert_null(json_writer_raw_begin(raw, "key", 8));
    assert_int_equal(json_writer_error(raw), -EINVAL);
    json_writer_free(raw);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_every_value_kind),
            cmocka_unit_test(test_raw_values),
            cmocka_unit_test(test_root_scalars),
            cmocka_unit_test(test_keys_are_escaped),
            cmocka_unit_test(test_integers),
            cmocka_unit_test(test_time_ms_table),
            cmocka_unit_test(test_time_ms_random),
            cmocka_unit_test(test_doubles),
            cmocka_unit_test(test_doubles_ignore_locale),
            cmocka_unit_test(test_escape_every_control_byte),
            cmocka_unit_test(test_escape_invalid_utf8),
            cmocka_unit_test(test_random_strings_exact),
            cmocka_unit_test(test_strings_across_chunk_ends),
            cmocka_unit_test(test_splice_text),
            cmocka_unit_test(test_splice_text_large),
            cmocka_unit_test(test_splice_writer_small),
            cmocka_unit_test(test_splice_writer_moves_chunks),
            cmocka_unit_test(test_splice_writer_errors),
            cmocka_unit_test(test_each_chunk_and_copy),
            cmocka_unit_test(test_misuse_is_einval),
            cmocka_unit_test(test_depth_limit),
            cmocka_unit_test(test_fd_writer_matches_memory),
            cmocka_unit_test(test_big_chunks_same_bytes),
            cmocka_unit_test(test_fd_writer_closed_pipe),
            cmocka_unit_test(test_fd_writer_bad_fd),
            cmocka_unit_test(test_fd_writer_socket_no_sigpipe),
            cmocka_unit_test(test_enomem),
            cmocka_unit_test(test_unique_strings_enomem),
            cmocka_unit_test(test_random_documents_python),
            cmocka_unit_test(test_unique_strings_dedup),
            cmocka_unit_test(test_unique_strings_growth),
    };
    return cmocka_run_group_tests_name("buffer-json-writer", tests, NULL, NULL);
}
