/* tests/bench/json-reader-fleetprof.c - json/reader.c behind the benchmark's reader
 * interface (json-readers.h): json_doc_parse() of the text, and json_doc_read_file(). */
#include <stdio.h>

#include "json/reader.h"
#include "tests/bench/json-readers.h"

static void *parse_text(const char *path, const char *text, size_t len, char *err, size_t err_size)
{
    struct json_read_error e;
    struct json_doc *doc = NULL;

    (void)path;
    if (json_doc_parse(text, len, 0, &doc, &e) < 0) {
        (void)snprintf(err, err_size, "%lu:%lu: %s", e.line, e.column, e.message);
        return NULL;
    }
    return doc;
}

static void *parse_file(const char *path, const char *text, size_t len, char *err, size_t err_size)
{
    struct json_read_error e;
    struct json_doc *doc = NULL;

    (void)text;
    (void)len;
    if (json_doc_read_file(path, 0, &doc, &e) < 0) {
        (void)snprintf(err, err_size, "%lu:%lu: %s", e.line, e.column, e.message);
        return NULL;
    }
    return doc;
}

static void visit(const struct json_doc *doc, const struct json_value *v,
                  struct json_walk_counts *c)
{
    size_t n = json_value_len(v), len;
    double d = 0;

    switch (json_value_type(v)) {
    case JSON_NUMBER:
        (void)json_value_double(doc, v, &d); /* cannot fail: the parser checked the text */
        c->numbers++;
        c->number_sum += d;
        break;
    case JSON_STRING:
        (void)json_value_string(doc, v, &len);
        c->strings++;
        c->string_bytes += len;
        break;
    case JSON_ARRAY:
        c->containers++;
        for (size_t i = 0; i < n; i++)
            visit(doc, json_array_at(doc, v, i), c);
        break;
    case JSON_OBJECT:
        c->containers++;
        for (size_t i = 0; i < n; i++)
            visit(doc, json_object_value_at(doc, v, i), c);
        break;
    default:
        break;
    }
}

static void count_process(const struct json_doc *doc, const struct json_value *process,
                          struct json_walk_counts *c)
{
    const struct json_value *threads = json_object_get(doc, process, "threads");
    size_t n = json_value_len(threads);

    c->processes++;
    for (size_t i = 0; i < n; i++) {
        const struct json_value *t = json_array_at(doc, threads, i);

        c->threads++;
        c->samples +=
                json_value_len(json_object_get(doc, json_object_get(doc, t, "samples"), "data"));
    }
}

static void walk(const void *tree, struct json_walk_counts *c)
{
    const struct json_doc *doc = tree;
    const struct json_value *root = json_doc_root(doc);
    const struct json_value *processes = json_object_get(doc, root, "processes");
    size_t n = json_value_type(processes) == JSON_ARRAY ? json_value_len(processes) : 0;

    visit(doc, root, c);
    count_process(doc, root, c);
    for (size_t i = 0; i < n; i++)
        count_process(doc, json_array_at(doc, processes, i), c);
}

static void free_doc(void *tree)
{
    (void)json_doc_free(tree);
}

static const struct json_bench_reader json_reader_fleetprof = {"fleetprof", parse_text, walk,
                                                               free_doc, 0};
static const struct json_bench_reader json_reader_fleetprof_file = {"fleetprof_file", parse_file,
                                                                    walk, free_doc, 1};
const struct json_bench_reader *const json_bench_readers[] = {&json_reader_fleetprof,
                                                              &json_reader_fleetprof_file};
const size_t json_bench_reader_count = 2;
