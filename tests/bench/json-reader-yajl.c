/* tests/bench/json-reader-yajl.c - yajl's tree API (yajl_tree_parse) behind the benchmark's
 * reader interface (json-readers.h). It needs NUL-terminated text, which every reader gets. */
#include <stdio.h>
#include <string.h>
#include <yajl/yajl_tree.h>

#include "tests/bench/json-readers.h"

static void *parse(const char *path, const char *text, size_t len, char *err, size_t err_size)
{
    yajl_val root;

    (void)path;
    (void)len;
    root = yajl_tree_parse(text, err, err_size);
    if (!root && !err[0])
        (void)snprintf(err, err_size, "yajl_tree_parse failed");
    return root;
}

static void visit(yajl_val v, struct json_walk_counts *c)
{
    if (YAJL_IS_NUMBER(v)) {
        c->numbers++;
        c->number_sum += YAJL_IS_DOUBLE(v) ? v->u.number.d : (double)v->u.number.i;
    } else if (YAJL_IS_STRING(v)) {
        c->strings++;
        c->string_bytes += strlen(v->u.string);
    } else if (YAJL_IS_ARRAY(v)) {
        c->containers++;
        for (size_t i = 0; i < v->u.array.len; i++)
            visit(v->u.array.values[i], c);
    } else if (YAJL_IS_OBJECT(v)) {
        c->containers++;
        for (size_t i = 0; i < v->u.object.len; i++)
            visit(v->u.object.values[i], c);
    }
}

/* The last member named key of object v, or NULL (a linear search, like ours). */
static yajl_val get(yajl_val v, const char *key)
{
    if (!YAJL_IS_OBJECT(v))
        return NULL;
    for (size_t i = v->u.object.len; i-- > 0;)
        if (!strcmp(v->u.object.keys[i], key))
            return v->u.object.values[i];
    return NULL;
}

static size_t array_len(yajl_val v)
{
    return YAJL_IS_ARRAY(v) ? v->u.array.len : 0;
}

static void count_process(yajl_val process, struct json_walk_counts *c)
{
    yajl_val threads = get(process, "threads");

    c->processes++;
    for (size_t i = 0; i < array_len(threads); i++) {
        c->threads++;
        c->samples += array_len(get(get(threads->u.array.values[i], "samples"), "data"));
    }
}

static void walk(const void *tree, struct json_walk_counts *c)
{
    yajl_val root = (yajl_val)tree;
    yajl_val processes = get(root, "processes");

    visit(root, c);
    count_process(root, c);
    for (size_t i = 0; i < array_len(processes); i++)
        count_process(processes->u.array.values[i], c);
}

static void free_tree(void *tree)
{
    yajl_tree_free(tree);
}

static const struct json_bench_reader json_reader_yajl = {"yajl", parse, walk, free_tree, 0};
const struct json_bench_reader *const json_bench_readers[] = {&json_reader_yajl};
const size_t json_bench_reader_count = 1;
