/* Unit tests for tools/json-read: values and accessors, numbers kept as their text, string
 * escapes (surrogate pairs, lone surrogates, NUL), every syntax error with its line and column,
 * the depth limit, files, exact round trips through the JSON writer, and random bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "json/reader.h"
#include "json/writer.h"
#include "testlib.h"

/* Helpers. */

static struct json_doc *parse_ok(const char *text)
{
    struct json_read_error err = {0};
    struct json_doc *doc = NULL;
    int r = json_doc_parse(text, strlen(text), 0, &doc, &err);

    if (r != 0)
        fail_msg("parsing %s failed: %d at %lu:%lu: %s", text, r, err.line, err.column,
                 err.message);
    assert_non_null(doc);
    return doc;
}

static void check_error(const char *text, size_t len, unsigned max_depth, unsigned long line,
                        unsigned long column, const char *needle)
{
    struct json_read_error err = {0};
    struct json_doc *doc = NULL;
    int r = json_doc_parse(text, len, max_depth, &doc, &err);

    if (r != -EBADMSG || err.line != line || err.column != column || !strstr(err.message, needle))
        fail_msg("input [%.*s]: got %d at %lu:%lu \"%s\", want -EBADMSG at %lu:%lu \"...%s...\"",
                 (int)(len > 60 ? 60 : len), text, r, err.line, err.column, err.message, line,
                 column, needle);
    assert_null(doc);
}

static void check_string(const char *json, const char *want, size_t want_len)
{
    struct json_doc *doc = parse_ok(json);
    size_t len = 0;
    const char *s = json_value_string(doc, json_doc_root(doc), &len);

    assert_non_null(s);
    assert_int_equal(len, want_len);
    assert_memory_equal(s, want, want_len);
    assert_int_equal(s[len], '\0');
    json_doc_free(doc);
}

/* Writes the document's root with json_value_write() and returns the output (caller frees). */
static char *rewrite(const struct json_doc *doc)
{
    struct json_writer *w = NULL;
    char *out = NULL;

    assert_int_equal(json_writer_new_memory(&w), 0);
    json_value_write(doc, json_doc_root(doc), w, NULL);
    assert_int_equal(json_writer_finish(w), 0);
    assert_int_equal(json_writer_copy_to(w, &out), 0);
    json_writer_free(w);
    return out;
}

/* Values and accessors. */

static void test_scalars(void **state)
{
    static const struct {
        const char *text;
        enum json_type type;
    } cases[] = {{"null", JSON_NULL}, {"true", JSON_TRUE},   {"false", JSON_FALSE},
                 {"0", JSON_NUMBER},  {"\"\"", JSON_STRING}, {" \t\r\n[]\n", JSON_ARRAY},
                 {"{}", JSON_OBJECT}};

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct json_doc *doc = parse_ok(cases[i].text);

        assert_int_equal(json_value_type(json_doc_root(doc)), cases[i].type);
        assert_int_equal(json_value_len(json_doc_root(doc)), cases[i].type == JSON_NUMBER ? 1 : 0);
        assert_int_equal(json_doc_depth(doc), cases[i].type >= JSON_ARRAY ? 1 : 0);
        assert_int_equal(json_doc_size(doc), strlen(cases[i].text));
        json_doc_free(doc);
    }
}

static void test_true_is_true(void **state)
{
    struct json_doc *t = parse_ok("true"), *f = parse_ok("false"), *n = parse_ok("1");

    (void)state;
    assert_true(json_value_is_true(json_doc_root(t)));
    assert_false(json_value_is_true(json_doc_root(f)));
    assert_false(json_value_is_true(json_doc_root(n)));
    json_doc_free(t);
    json_doc_free(f);
    json_doc_free(n);
}

static void test_containers_and_lookup(void **state)
{
    struct json_doc *doc =
            parse_ok("{\"meta\": {\"version\": 36, \"tags\": [\"a\", [], {}, [1, [2, [3]]]]},\n"
                     " \"dup\": 1, \"threads\": [], \"dup\": 2, \"\": \"empty key\"}");
    const struct json_value *root = json_doc_root(doc);
    const struct json_value *meta = json_object_get(doc, root, "meta");
    const struct json_value *tags = json_object_get(doc, meta, "tags");
    const struct json_value *deep;
    size_t len;
    int64_t v;

    (void)state;
    assert_int_equal(json_value_type(root), JSON_OBJECT);
    assert_int_equal(json_value_len(root), 5);
    assert_int_equal(json_doc_depth(doc), 6);
    assert_int_equal(json_value_int64(doc, json_object_get(doc, meta, "version"), &v), 0);
    assert_int_equal(v, 36);
    assert_int_equal(json_value_len(tags), 4);
    assert_string_equal(json_value_string(doc, json_array_at(doc, tags, 0), NULL), "a");
    assert_int_equal(json_value_type(json_array_at(doc, tags, 1)), JSON_ARRAY);
    assert_int_equal(json_value_type(json_array_at(doc, tags, 2)), JSON_OBJECT);
    assert_null(json_array_at(doc, tags, 4));
    deep = json_array_at(doc, json_array_at(doc, json_array_at(doc, tags, 3), 1), 1);
    assert_int_equal(json_value_int64(doc, json_array_at(doc, deep, 0), &v), 0);
    assert_int_equal(v, 3);
    /* The last duplicate wins, as in JavaScript and Python. */
    assert_int_equal(json_value_int64(doc, json_object_get(doc, root, "dup"), &v), 0);
    assert_int_equal(v, 2);
    assert_string_equal(json_value_string(doc, json_object_get(doc, root, ""), NULL), "empty key");
    assert_null(json_object_get(doc, root, "missing"));
    assert_null(json_object_get(doc, root, "dupe"));
    assert_null(json_object_get(doc, tags, "a")); /* not an object */
    /* Iteration in document order. */
    assert_string_equal(json_value_string(doc, json_object_key_at(doc, root, 0), &len), "meta");
    assert_int_equal(len, 4);
    assert_string_equal(json_value_string(doc, json_object_key_at(doc, root, 3), NULL), "dup");
    assert_int_equal(json_value_int64(doc, json_object_value_at(doc, root, 1), &v), 0);
    assert_int_equal(v, 1);
    assert_null(json_object_key_at(doc, root, 5));
    assert_null(json_object_value_at(doc, tags, 0));
    json_doc_free(doc);
}

static void test_null_values_chain(void **state)
{
    struct json_doc *doc = parse_ok("{\"a\": 1}");
    const struct json_value *missing = json_object_get(doc, json_doc_root(doc), "b");
    size_t len = 99;
    double d = 7;
    int64_t i = 7;

    (void)state;
    assert_null(missing);
    assert_int_equal(json_value_type(missing), JSON_NONE);
    assert_int_equal(json_value_len(missing), 0);
    assert_null(json_object_get(doc, missing, "x"));
    assert_null(json_array_at(doc, missing, 0));
    assert_null(json_value_string(doc, missing, &len));
    assert_null(json_value_number_text(doc, missing, &len));
    assert_int_equal(len, 99);
    assert_int_equal(json_value_double(doc, missing, &d), -EINVAL);
    assert_int_equal(json_value_int64(doc, missing, &i), -EINVAL);
    assert_true(d == 7 && i == 7);
    assert_false(json_value_is_true(missing));
    assert_true(json_value_equal(doc, missing, doc, NULL));
    assert_false(json_value_equal(doc, missing, doc, json_doc_root(doc)));
    /* Accessors of the wrong type. */
    assert_null(json_value_string(doc, json_object_get(doc, json_doc_root(doc), "a"), NULL));
    assert_int_equal(json_value_double(doc, json_doc_root(doc), &d), -EINVAL);
    json_doc_free(doc);
}

/* Numbers. */

static void test_numbers_keep_their_text(void **state)
{
    static const char *const texts[] = {
            "0",
            "-0",
            "1.50",
            "1E+2",
            "1e-7",
            "-12.000",
            "0.1",
            "123456789012345678901234567890",
            "1.7976931348623157e309",
            "2.2250738585072014E-308",
            "9007199254740993",
    };

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(texts); i++) {
        char json[128];
        struct json_doc *doc;
        const char *t;
        size_t len;
        char *out;

        (void)snprintf(json, sizeof(json), "[%s]", texts[i]);
        doc = parse_ok(json);
        t = json_value_number_text(doc, json_array_at(doc, json_doc_root(doc), 0), &len);
        assert_non_null(t);
        assert_int_equal(len, strlen(texts[i]));
        assert_memory_equal(t, texts[i], len);
        out = rewrite(doc);
        assert_string_equal(out, json); /* exactly, not through a double */
        free(out);
        json_doc_free(doc);
    }
}

static void test_number_conversions(void **state)
{
    static const struct {
        const char *text;
        int int_r, double_r;
        int64_t int_v;
        double double_v;
    } cases[] = {
            {"42", 0, 0, 42, 42},
            {"-9223372036854775808", 0, 0, INT64_MIN, -9223372036854775808.0},
            {"9223372036854775807", 0, 0, INT64_MAX, 9223372036854775807.0},
            {"9223372036854775808", -ERANGE, 0, 0, 9223372036854775808.0},
            {"1e3", 0, 0, 1000, 1000},
            {"2.0", 0, 0, 2, 2},
            {"-4.5e1", 0, 0, -45, -45},
            {"1.5", -EINVAL, 0, 0, 1.5},
            {"9007199254740992.0", 0, 0, 9007199254740992, 9007199254740992.0},
            {"1e16", -ERANGE, 0, 0, 1e16},
            {"1e300", -ERANGE, 0, 0, 1e300},
            {"1e400", -ERANGE, -ERANGE, 0, 0},
            {"-1e400", -ERANGE, -ERANGE, 0, 0},
            {"1e-400", 0, 0, 0, 0}, /* underflow to 0 is no error */
            {"1702345678901.125", -EINVAL, 0, 0, 1702345678901.125},
            {"0.1000000000000000055511151231257827021181583404541015625000000000000001", -EINVAL, 0,
             0, 0.1},
    };

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct json_doc *doc = parse_ok(cases[i].text);
        const struct json_value *v = json_doc_root(doc);
        int64_t iv = 12345;
        double dv = 12345;

        if (json_value_int64(doc, v, &iv) != cases[i].int_r)
            fail_msg("%s: int64 returned %d", cases[i].text, json_value_int64(doc, v, &iv));
        if (cases[i].int_r == 0)
            assert_true(iv == cases[i].int_v);
        else
            assert_true(iv == 12345);
        assert_int_equal(json_value_double(doc, v, &dv), cases[i].double_r);
        if (cases[i].double_r == 0)
            assert_true(dv == cases[i].double_v);
        json_doc_free(doc);
    }
}

/* Strings. */

static void test_string_escapes(void **state)
{
    (void)state;
    check_string("\"plain\"", "plain", 5);
    check_string("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", "\"\\/\b\f\n\r\t", 8);
    check_string("\"caf\\u00e9 \\u20AC\"", "caf\xc3\xa9 \xe2\x82\xac", 9);
    check_string("\"\\u0041\\u007f\\u0080\\u07ff\\u0800\\uffff\"",
                 "A\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf", 12);
    /* A surrogate pair is one code point: U+1F600 and U+10FFFF. */
    check_string("\"\\ud83d\\ude00\\uDBFF\\uDFFF\"", "\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf", 8);
    /* Lone surrogates become U+FFFD; the character after them is kept. */
    check_string("\"\\ud800x\"", "\xef\xbf\xbdx", 4);
    check_string("\"\\udc00\"", "\xef\xbf\xbd", 3);
    check_string("\"\\ud800\\u0041\"",
                 "\xef\xbf\xbd"
                 "A",
                 4);
    check_string("\"\\ud800\\ud800\\udc00\"", "\xef\xbf\xbd\xf0\x90\x80\x80", 7);
    check_string("\"\\ud800\"", "\xef\xbf\xbd", 3);
    /* NUL inside a string: the length says so. */
    check_string("\"a\\u0000b\"", "a\0b", 3);
    /* Raw UTF-8 and even invalid bytes pass through (the writer cleans them on output). */
    check_string("\"\xe2\x82\xac \xff\"", "\xe2\x82\xac \xff", 5);
}

static void test_strings_as_keys_are_unescaped(void **state)
{
    struct json_doc *doc = parse_ok("{\"a\\nb\": 1, \"\\u00e9\": 2, \"q\\\"\": 3}");
    int64_t v;

    (void)state;
    assert_int_equal(json_value_int64(doc, json_object_get(doc, json_doc_root(doc), "a\nb"), &v),
                     0);
    assert_int_equal(v, 1);
    assert_int_equal(
            json_value_int64(doc, json_object_get(doc, json_doc_root(doc), "\xc3\xa9"), &v), 0);
    assert_int_equal(v, 2);
    assert_int_equal(json_value_int64(doc, json_object_get(doc, json_doc_root(doc), "q\""), &v), 0);
    assert_int_equal(v, 3);
    json_doc_free(doc);
}

/* Errors and their positions. */

static void test_syntax_errors_with_positions(void **state)
{
    static const struct {
        const char *text;
        unsigned long line, column;
        const char *needle;
    } cases[] = {
            {"", 1, 1, "empty document"},
            {"   \n  ", 2, 3, "empty document"},
            {"[1,2", 1, 5, "expected ',' or ']' after an array element, found end of input"},
            {"[1,]", 1, 4, "unexpected ']': expected a JSON value"},
            {"[1 2]", 1, 4, "expected ',' or ']'"},
            {"{\"a\" 1}", 1, 6, "expected ':' after an object key, found '1'"},
            {"{\"a\":1,}", 1, 8, "expected a string key in an object, found '}'"},
            {"{\"a\":1 \"b\":2}", 1, 8, "expected ',' or '}' after an object member"},
            {"{a:1}", 1, 2, "expected a string key"},
            {"{\"a\":}", 1, 6, "expected a JSON value"},
            {"\n\n  [tru]", 3, 4, "invalid literal"},
            {"nul", 1, 1, "invalid literal"},
            {"01", 1, 1, "leading zeros"},
            {"-01", 1, 1, "leading zeros"},
            {"1.", 1, 3, "digit after the decimal point"},
            {"1.e5", 1, 3, "digit after the decimal point"},
            {"-", 1, 2, "expected a digit after '-'"},
            {"-a", 1, 2, "expected a digit after '-'"},
            {"1e", 1, 3, "digit in the exponent"},
            {"1e+", 1, 4, "digit in the exponent"},
            {"+1", 1, 1, "unexpected '+'"},
            {".5", 1, 1, "unexpected '.'"},
            {"NaN", 1, 1, "unexpected 'N'"},
            {"[Infinity]", 1, 2, "unexpected 'I'"},
            {"\"abc", 1, 1, "unterminated string"},
            {"[\n \"abc\\", 2, 2, "unterminated string"},
            {"\"a\nb\"", 1, 3, "control character 0x0a"},
            {"\"a\tb\"", 1, 3, "control character 0x09"},
            {"\"\\x\"", 1, 2, "backslash followed by 'x'"},
            {"\"\\u12\"", 1, 2, "invalid \\u escape"},
            {"\"\\u12G4\"", 1, 2, "invalid \\u escape"},
            {"[1] 2", 1, 5, "unexpected '2' after the JSON value"},
            {"{\"a\":1}\n  x", 2, 3, "after the JSON value"},
            {"[\r\n1,\r\n x]", 3, 2, "unexpected 'x'"},
            {"[1,\n\n\n   @]", 4, 4, "unexpected '@'"},
            {"\x01", 1, 1, "unexpected byte 0x01"},
            {"[\"\xc3\xa9\", \xc3\xa9]", 1, 8, "unexpected byte 0xc3"},
            {"\x1f\x8b\x08\x00", 1, 1, "gzip-compressed"},
            /* Columns count from after a byte order mark. */
            {"\xef\xbb\xbf", 1, 1, "empty document"},
            {"\xef\xbb\xbf[1,", 1, 4, "expected a value"},
    };

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
        check_error(cases[i].text, strlen(cases[i].text), 0, cases[i].line, cases[i].column,
                    cases[i].needle);
    /* A NUL byte in the input is just another unexpected byte. */
    check_error("[1,\0]", 5, 0, 1, 4, "unexpected byte 0x00");
    check_error("\"a\0\"", 4, 0, 1, 3, "control character 0x00");
}

static void test_bom_is_skipped(void **state)
{
    struct json_doc *doc = parse_ok("\xef\xbb\xbf[1]");

    (void)state;
    assert_int_equal(json_value_len(json_doc_root(doc)), 1);
    json_doc_free(doc);
}

static char *nested(unsigned depth, const char *inner)
{
    size_t len = 2 * (size_t)depth + strlen(inner);
    char *s = malloc(len + 1);

    assert_non_null(s);
    memset(s, '[', depth);
    memcpy(s + depth, inner, strlen(inner));
    memset(s + depth + strlen(inner), ']', depth);
    s[len] = '\0';
    return s;
}

static void test_depth_limit(void **state)
{
    const size_t deep_len = (size_t)10 * 1000 * 1000;
    struct json_doc *doc = NULL;
    char *s;

    (void)state;
    s = nested(JSON_READ_MAX_DEPTH, "1");
    assert_int_equal(json_doc_parse(s, strlen(s), 0, &doc, NULL), 0);
    assert_int_equal(json_doc_depth(doc), JSON_READ_MAX_DEPTH);
    doc = json_doc_free(doc);
    free(s);

    s = nested(JSON_READ_MAX_DEPTH + 1, "1");
    check_error(s, strlen(s), 0, 1, JSON_READ_MAX_DEPTH + 1, "nesting deeper than 512 levels");
    /* Asking for more than the maximum gives the maximum: recursion elsewhere relies on it. */
    check_error(s, strlen(s), 100000, 1, JSON_READ_MAX_DEPTH + 1, "deeper than 512");
    free(s);

    /* A smaller limit, objects counting like arrays. */
    assert_int_equal(json_doc_parse("[{\"a\":[1]}]", 11, 3, &doc, NULL), 0);
    doc = json_doc_free(doc);
    check_error("[{\"a\":[[1]]}]", 13, 3, 1, 8, "nesting deeper than 3 levels");

    /* A deep hostile input fails fast, without recursion. */
    s = malloc(deep_len + 1);
    assert_non_null(s);
    memset(s, '[', deep_len);
    s[deep_len] = '\0';
    check_error(s, strlen(s), 0, 1, JSON_READ_MAX_DEPTH + 1, "nesting deeper");
    free(s);
}

static void test_error_pointer_may_be_null_and_doc_untouched(void **state)
{
    static char sentinel;
    struct json_doc *doc = (struct json_doc *)(void *)&sentinel;

    (void)state;
    assert_int_equal(json_doc_parse("[", 1, 0, &doc, NULL), -EBADMSG);
    assert_ptr_equal(doc, (struct json_doc *)(void *)&sentinel);
    assert_int_equal(json_doc_parse(NULL, 1, 0, &doc, NULL), -EINVAL);
    assert_int_equal(json_doc_parse("1", 1, 0, NULL, NULL), -EINVAL);
    doc = NULL;
    assert_int_equal(json_doc_parse(NULL, 0, 0, &doc, NULL), -EBADMSG); /* empty */
    assert_null(json_doc_free(NULL));
}

/* Files. */

static void write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");

    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void test_read_file(void **state)
{
    char *dir = test_tmpdir("json-read");
    char path[4096];
    struct json_read_error err;
    struct json_doc *doc = NULL;
    int64_t v;

    (void)state;
    (void)snprintf(path, sizeof(path), "%s/missing.json", dir);
    assert_int_equal(json_doc_read_file(path, 0, &doc, &err), -ENOENT);
    assert_int_equal(err.line, 0);
    assert_string_equal(err.message, strerror(ENOENT));
    assert_null(doc);

    assert_int_equal(json_doc_read_file(dir, 0, &doc, &err), -EISDIR);
    assert_int_equal(json_doc_read_file("/dev/null", 0, &doc, &err), -EBADMSG);
    assert_true(strstr(err.message, "empty document") != NULL);

    (void)snprintf(path, sizeof(path), "%s/ok.json", dir);
    write_file(path, "{\"answer\": 42}\n", strlen("{\"answer\": 42}\n"));
    assert_int_equal(json_doc_read_file(path, 0, &doc, &err), 0);
    assert_int_equal(json_value_int64(doc, json_object_get(doc, json_doc_root(doc), "answer"), &v),
                     0);
    assert_int_equal(v, 42);
    doc = json_doc_free(doc);

    (void)snprintf(path, sizeof(path), "%s/bad.json", dir);
    write_file(path, "{\n  \"a\": [1, 2,, 3]\n}\n", strlen("{\n  \"a\": [1, 2,, 3]\n}\n"));
    assert_int_equal(json_doc_read_file(path, 0, &doc, &err), -EBADMSG);
    assert_int_equal(err.line, 2);
    assert_int_equal(err.column, 14);
    assert_int_equal(err.offset, 15);
    assert_true(strstr(err.message, "unexpected ','") != NULL);

    test_rmtree(dir);
    free(dir);
}

static void test_read_file_from_a_pipe(void **state)
{
    int fds[2];
    pid_t pid;
    struct json_doc *doc = NULL;
    char path[64];
    int status;

    (void)state;
    assert_int_equal(pipe(fds), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* 200 KiB in small writes: the reader must grow its buffer. */
        (void)close(fds[0]);
        if (write(fds[1], "[", 1) != 1)
            _exit(1);
        for (int i = 0; i < 40000; i++)
            if (write(fds[1], i ? ",1234" : "1234", i ? 5 : 4) < 0)
                _exit(1);
        if (write(fds[1], "]", 1) != 1)
            _exit(1);
        _exit(0);
    }
    (void)close(fds[1]);
    (void)snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[0]);
    assert_int_equal(json_doc_read_file(path, 0, &doc, NULL), 0);
    assert_int_equal(json_value_len(json_doc_root(doc)), 40000);
    json_doc_free(doc);
    (void)close(fds[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Writing back. */

static void test_round_trip_is_exact(void **state)
{
    static const char *const docs[] = {
            "{\"meta\":{\"version\":36,\"startTime\":1702345678901.125,\"interval\":0.5,"
            "\"shutdownTime\":null},\"threads\":[{\"samples\":{\"schema\":{\"stack\":0},\"data\":"
            "[[0,1.000,null],[1,2e-3,0]]}}],\"processes\":[],\"ok\":true,\"no\":false}",
            "[\"a\\nb\",\"\\\"q\\\"\",\"\\\\\",\"caf\xc3\xa9\",\"\\u0001\",{},[],[[]],{\"\":{}}]",
            "-0",
            "\"\"",
    };

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(docs); i++) {
        struct json_doc *doc = parse_ok(docs[i]), *again;
        char *out = rewrite(doc);

        assert_string_equal(out, docs[i]);
        again = parse_ok(out);
        assert_true(json_value_equal(doc, json_doc_root(doc), again, json_doc_root(again)));
        json_doc_free(again);
        json_doc_free(doc);
        free(out);
    }
}

static void test_write_normalizes_escapes(void **state)
{
    struct json_doc *doc = parse_ok("[ \"\\u0041\\/\\ud83d\\ude00\" , \"\xff\" ]");
    char *out = rewrite(doc);

    (void)state;
    /* Escapes come out in the writer's own form; invalid UTF-8 becomes U+FFFD. */
    assert_string_equal(out, "[\"A/\xf0\x9f\x98\x80\",\"\xef\xbf\xbd\"]");
    free(out);
    json_doc_free(doc);
}

static void test_write_under_a_key_and_depth_latch(void **state)
{
    struct json_doc *doc = parse_ok("{\"x\":[1,{\"y\":\"z\"}]}");
    struct json_writer *w = NULL;
    char *out = NULL, *deep;

    (void)state;
    assert_int_equal(json_writer_new_memory(&w), 0);
    json_writer_object_begin(w, NULL);
    json_value_write(doc, json_object_get(doc, json_doc_root(doc), "x"), w, "copy");
    json_value_write(doc, NULL, w, "none");
    json_writer_object_end(w);
    assert_int_equal(json_writer_finish(w), 0);
    assert_int_equal(json_writer_copy_to(w, &out), 0);
    assert_string_equal(out, "{\"copy\":[1,{\"y\":\"z\"}],\"none\":null}");
    free(out);
    json_writer_free(w);
    json_doc_free(doc);

    /* Deeper than the writer allows: latched in the writer, no crash. */
    deep = nested(JSON_WRITER_MAX_DEPTH + 1, "");
    doc = parse_ok(deep);
    assert_int_equal(json_writer_new_memory(&w), 0);
    json_value_write(doc, json_doc_root(doc), w, NULL);
    assert_int_equal(json_writer_finish(w), -EINVAL);
    json_writer_free(w);
    json_doc_free(doc);
    free(deep);
}

static void test_equal(void **state)
{
    struct json_doc *a = parse_ok("{\"k\":[1,\"s\",null,{\"x\":true}]}");
    struct json_doc *b = parse_ok("{ \"k\" : [ 1 , \"s\" , null , { \"x\" : true } ] }");
    struct json_doc *c = parse_ok("{\"k\":[1.0,\"s\",null,{\"x\":true}]}");
    struct json_doc *d = parse_ok("{\"k\":[1,\"s\",null,{\"x\":false}]}");

    (void)state;
    assert_true(json_value_equal(a, json_doc_root(a), b, json_doc_root(b)));
    assert_false(json_value_equal(a, json_doc_root(a), c, json_doc_root(c))); /* texts differ */
    assert_false(json_value_equal(a, json_doc_root(a), d, json_doc_root(d)));
    json_doc_free(a);
    json_doc_free(b);
    json_doc_free(c);
    json_doc_free(d);
}

/* Scale and hostile input. */

static void test_big_array(void **state)
{
    const size_t n = (size_t)2 * 1000 * 1000;
    char *s = malloc(n * 8 + 16);
    size_t len = 0;
    struct json_doc *doc = NULL;
    int64_t v;

    (void)state;
    assert_non_null(s);
    s[len++] = '[';
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(s + len, i ? ",[%zu]" : "[%zu]", i % 1000);
    s[len++] = ']';
    assert_int_equal(json_doc_parse(s, len, 0, &doc, NULL), 0);
    assert_int_equal(json_value_len(json_doc_root(doc)), n);
    assert_int_equal(
            json_value_int64(
                    doc, json_array_at(doc, json_array_at(doc, json_doc_root(doc), n - 1), 0), &v),
            0);
    assert_int_equal(v, (n - 1) % 1000);
    json_doc_free(doc);
    free(s);
}

static void test_random_bytes_never_crash(void **state)
{
    static const char alphabet[] = "[]{},:\"\\u0123456789abcdefEe+-.tnrl \n\t";
    struct test_rng rng;
    char buf[256] = {0};

    (void)state;
    test_rng_init(&rng, test_seed());
    for (int iter = 0; iter < 100000; iter++) {
        size_t len = (size_t)test_rng_range(&rng, 0, sizeof(buf));
        struct json_read_error err;
        struct json_doc *doc = NULL;
        int r;

        for (size_t i = 0; i < len; i++) {
            if (iter % 4)
                buf[i] = alphabet[test_rng_range(&rng, 0, sizeof(alphabet) - 2)];
            else
                buf[i] = (char)(unsigned char)(test_rng_next(&rng) & 0xff);
        }
        r = json_doc_parse(buf, len, 16, &doc, &err);
        if (r == 0) {
            char *out = rewrite(doc);

            free(out);
            json_doc_free(doc);
        } else {
            unsigned long line = 1, col = 1;

            assert_int_equal(r, -EBADMSG);
            assert_true(err.offset <= len);
            /* The position agrees with the offset, counted on the original bytes. */
            for (size_t i = 0; i < err.offset; i++) {
                if (buf[i] == '\n') {
                    line++;
                    col = 1;
                } else {
                    col++;
                }
            }
            if (len >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3) && line == 1)
                col -= 3;
            assert_int_equal(err.line, line);
            assert_int_equal(err.column, col);
            assert_true(err.message[0] != '\0');
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_scalars),
            cmocka_unit_test(test_true_is_true),
            cmocka_unit_test(test_containers_and_lookup),
            cmocka_unit_test(test_null_values_chain),
            cmocka_unit_test(test_numbers_keep_their_text),
            cmocka_unit_test(test_number_conversions),
            cmocka_unit_test(test_string_escapes),
            cmocka_unit_test(test_strings_as_keys_are_unescaped),
            cmocka_unit_test(test_syntax_errors_with_positions),
            cmocka_unit_test(test_bom_is_skipped),
            cmocka_unit_test(test_depth_limit),
            cmocka_unit_test(test_error_pointer_may_be_null_and_doc_untouched),
            cmocka_unit_test(test_read_file),
            cmocka_unit_test(test_read_file_from_a_pipe),
            cmocka_unit_test(test_round_trip_is_exact),
            cmocka_unit_test(test_write_normalizes_escapes),
            cmocka_unit_test(test_write_under_a_key_and_depth_latch),
            cmocka_unit_test(test_equal),
            cmocka_unit_test(test_big_array),
            cmocka_unit_test(test_random_bytes_never_crash),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
