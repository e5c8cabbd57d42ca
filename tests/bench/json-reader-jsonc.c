/* tests/bench/json-reader-jsonc.c - json-c (json_tokener_parse_ex) behind the benchmark's
 * reader interface (json-readers.h). */
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>

#include "tests/bench/json-readers.h"

/* The same nesting limit as ours (JSON_READ_MAX_DEPTH); json-c's default is 32. */
#define JSONC_MAX_DEPTH 512

static void *parse(const char *path, const char *text, size_t len, char *err, size_t err_size)
{
    struct json_tokener *tok;
    struct json_object *root;
    enum json_tokener_error e;

    (void)path;
    if (len > INT_MAX) {
        (void)snprintf(err, err_size, "json-c parses at most INT_MAX bytes at once");
        return NULL;
    }
    tok = json_tokener_new_ex(JSONC_MAX_DEPTH);
    if (!tok) {
        (void)snprintf(err, err_size, "out of memory");
        return NULL;
    }
    root = json_tokener_parse_ex(tok, text, (int)len);
    e = json_tokener_get_error(tok);
    if (!root || e != json_tokener_success) {
        (void)snprintf(err, err_size, "offset %zu: %s", json_tokener_get_parse_end(tok),
                       json_tokener_error_desc(e));
        json_object_put(root);
        root = NULL;
    }
    json_tokener_free(tok);
    return root;
}

static void visit(struct json_object *v, struct json_walk_counts *c)
{
    switch (json_object_get_type(v)) {
    case json_type_int:
    case json_type_double:
        c->numbers++;
        c->number_sum += json_object_get_double(v);
        break;
    case json_type_string:
        c->strings++;
        c->string_bytes += (uint64_t)json_object_get_string_len(v);
        break;
    case json_type_array: {
        size_t n = json_object_array_length(v);

        c->containers++;
        for (size_t i = 0; i < n; i++)
            visit(json_object_array_get_idx(v, i), c);
        break;
    }
    case json_type_object: {
        struct json_object_iterator it = json_object_iter_begin(v);
        struct json_object_iterator end = json_object_iter_end(v);

        c->containers++;
        for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it))
            visit(json_object_iter_peek_value(&it), c);
        break;
    }
    default:
        break;
    }
}

/* The member key of object v, or NULL (json-c's lookup is a hash table). */
static struct json_object *get(struct json_object *v, const char *key)
{
    struct json_object *member = NULL;

    return json_object_object_get_ex(v, key, &member) ? member : NULL;
}

/* Elements of an array; 0 for anything else, NULL included. */
static size_t array_len(struct json_object *v)
{
    return json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;
}

static void count_process(struct json_object *process, struct json_walk_counts *c)
{
    struct json_object *threads = get(process, "threads");
    size_t n = array_len(threads);

    c->processes++;
    for (size_t i = 0; i < n; i++) {
        c->threads++;
        c->samples += array_len(get(get(json_object_array_get_idx(threads, i), "samples"), "data"));
    }
}

static void walk(const void *tree, struct json_walk_counts *c)
{
    struct json_object *root = (struct json_object *)tree;
    struct json_object *processes = get(root, "processes");
    size_t n = array_len(processes);

    visit(root, c);
    count_process(root, c);
    for (size_t i = 0; i < n; i++)
        count_process(json_object_array_get_idx(processes, i), c);
}

static void free_tree(void *tree)
{
    json_object_put(tree);
}

static const struct json_bench_reader json_reader_jsonc = {"json_c", parse, walk, free_tree, 0};
const struct json_bench_reader *const json_bench_readers[] = {&json_reader_jsonc};
const size_t json_bench_reader_count = 1;
