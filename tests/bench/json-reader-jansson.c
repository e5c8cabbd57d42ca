/* tests/bench/json-reader-jansson.c - jansson (json_loadb) behind the benchmark's reader
 * interface (json-readers.h). */
#include <jansson.h>
#include <stdio.h>

#include "tests/bench/json-readers.h"

static void *parse(const char *path, const char *text, size_t len, char *err, size_t err_size)
{
    json_error_t e;
    json_t *root;

    (void)path;
    root = json_loadb(text, len, 0, &e);
    if (!root)
        (void)snprintf(err, err_size, "%d:%d: %s", e.line, e.column, e.text);
    return root;
}

static void visit(const json_t *v, struct json_walk_counts *c)
{
    const char *key;
    json_t *member;
    size_t i;

    switch (json_typeof(v)) {
    case JSON_INTEGER:
    case JSON_REAL:
        c->numbers++;
        c->number_sum += json_number_value(v);
        break;
    case JSON_STRING:
        c->strings++;
        c->string_bytes += json_string_length(v);
        break;
    case JSON_ARRAY:
        c->containers++;
        json_array_foreach(v, i, member) visit(member, c);
        break;
    case JSON_OBJECT:
        c->containers++;
        json_object_foreach((json_t *)v, key, member) visit(member, c);
        break;
    default:
        break;
    }
}

static void count_process(const json_t *process, struct json_walk_counts *c)
{
    const json_t *threads = json_object_get(process, "threads");
    size_t n = json_array_size(threads);

    c->processes++;
    for (size_t i = 0; i < n; i++) {
        c->threads++;
        c->samples += json_array_size(
                json_object_get(json_object_get(json_array_get(threads, i), "samples"), "data"));
    }
}

static void walk(const void *tree, struct json_walk_counts *c)
{
    const json_t *root = tree;
    const json_t *processes = json_object_get(root, "processes");

    visit(root, c);
    count_process(root, c);
    for (size_t i = 0; i < json_array_size(processes); i++)
        count_process(json_array_get(processes, i), c);
}

static void free_tree(void *tree)
{
    json_decref(tree);
}

static const struct json_bench_reader json_reader_jansson = {"jansson", parse, walk, free_tree, 0};
const struct json_bench_reader *const json_bench_readers[] = {&json_reader_jansson};
const size_t json_bench_reader_count = 1;
