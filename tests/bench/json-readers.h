/* tests/bench/json-readers.h - the JSON parsers bench-json-readers.c compares, behind one
 * interface.
 *
 * Each parser is its own program (json-reader-<library>.c + json-reader-main.c): their
 * headers cannot be included together (jansson, json-c and json/reader.h each define
 * `json_type` or JSON_NULL-like constants), nor can they be linked together (jansson, json-c
 * and json/reader.c all export a `json_object_get`, and the first one linked would
 * silently serve the others' calls). Every reader parses a whole document into its tree, then the
 * walk does the same work on every tree, so a lazy parser cannot skip any: it visits every value
 * (counting containers and strings, summing string bytes and the values of numbers as
 * doubles: ours keeps a number's text and converts it only here, with strtod, as the tools do
 * when they use it) and, through key lookups, sums the lengths of samples.data of every
 * thread of every process of a Gecko fleet profile.
 */
#ifndef FLEETPROF_TESTS_BENCH_JSON_READERS_H
#define FLEETPROF_TESTS_BENCH_JSON_READERS_H

#include <stddef.h>
#include <stdint.h>

/* What a walk counts. Every reader must find the same numbers in the same document. */
struct json_walk_counts {
    uint64_t containers;   /* arrays and objects */
    uint64_t numbers;      /* number values */
    double number_sum;     /* the sum of their values as doubles, in document order */
    uint64_t strings;      /* string values (not keys) */
    uint64_t string_bytes; /* their unescaped bytes */
    uint64_t processes;    /* the root and the entries of its `processes` */
    uint64_t threads;      /* entries of each process's `threads` */
    uint64_t samples;      /* the sum of the lengths of each thread's samples.data */
};

struct json_bench_reader {
    const char *name; /* the metric's name part: letters, digits and '_' */
    /* Parses the document: from text (len bytes, NUL-terminated after them) or, for a reader
     * that reads files itself, from path (text is then NULL). Returns the tree, or NULL with
     * a reason in err (err_size bytes). */
    void *(*parse)(const char *path, const char *text, size_t len, char *err, size_t err_size);
    void (*walk)(const void *tree, struct json_walk_counts *counts);
    void (*free)(void *tree);
    int reads_file; /* parse() takes path, not text */
};

/* Each json-reader-<library>.c defines the readers of its library, and json-reader-main.c
 * makes it a program: `json-reader-<library> READER parse|read FILE`. ours: "fleetprof"
 * (json_doc_parse() of the text, which it copies) and "fleetprof_file" (json_doc_read_file(),
 * as summary, export and merge call it); "jansson" (json_loadb), "json_c"
 * (json_tokener_parse_ex), "yajl" (yajl_tree_parse). */
extern const struct json_bench_reader *const json_bench_readers[];
extern const size_t json_bench_reader_count;

#endif /* FLEETPROF_TESTS_BENCH_JSON_READERS_H */
