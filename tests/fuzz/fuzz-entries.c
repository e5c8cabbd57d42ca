/* tests/fuzz/fuzz-entries.c - buffer entries from untrusted memory: the decoder and the
 * Gecko writer, as the daemon will run them on the chunks of a crashed child.
 *
 * Input: a sequence of blocks, each ULEB128 length + that many bytes (the buffer's own
 * block framing); a zero length or one past the end stops the sequence.
 *  1. Every block is decoded with prof_entry_decode() whole, and again split into two
 *     spans at two points (as when it straddles chunks): the three results must agree, to
 *     the byte, and a decode must never read outside the block (ASan).
 *  2. The blocks are put into a chunked buffer with small chunks, then
 *     prof_gecko_write_process() turns them into a process profile with a dummy process
 *     description (3 threads, 3 counters, 2 marker schemas, 3 fake modules, one a vdso,
 *     and a fake symbolizer that leaves some addresses unnamed, so that frames are named by
 *     module and offset and by their vdso caller, gecko.h) into a memory JSON writer: it must
 *     succeed, and its output must be one
 *     valid JSON value (strict RFC 8259 + UTF-8 validator).
 * Anything else abort()s. Seeds: tests/fuzz/gen-entries-corpus writes real encoded entries
 * (build/tests/fuzz/gen-entries-corpus tests/fuzz/corpus/entries).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/chunk-manager.h"
#include "buffer/chunked-buffer.h"
#include "buffer/entry.h"
#include "buffer/leb128.h"
#include "json-check.h"
#include "json/writer.h"
#include "profile/entries.h"
#include "profile/gecko.h"
#include "profile/libs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                 \
        }                                                                            \
    } while (0)

#define CHUNK_BYTES 1024
#define MAX_BLOCKS  4096

static bool same_string(struct prof_string a, struct prof_string b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.data, b.data, a.len) == 0);
}

static bool same_frames(const uint64_t *a, uint32_t na, const uint64_t *b, uint32_t nb)
{
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof(*a)) == 0);
}

static void check_same_entry(const struct prof_entry *a, const struct prof_entry *b)
{
    CHECK(a->kind == b->kind);
    switch (a->kind) {
    case BUF_ENTRY_SAMPLE:
    case BUF_ENTRY_SAME_SAMPLE: {
        const struct prof_sample *x = &a->u.sample, *y = &b->u.sample;

        CHECK(x->tid == y->tid && x->time_ns == y->time_ns && x->cpu_delta_ns == y->cpu_delta_ns);
        CHECK(x->flags == y->flags && x->label_count == y->label_count);
        CHECK(x->frame_count <= PROF_MAX_FRAMES && x->label_count <= PROF_MAX_LABELS);
        CHECK(same_frames(x->frames, x->frame_count, y->frames, y->frame_count));
        for (uint32_t i = 0; i < x->label_count; i++) {
            CHECK(same_string(x->labels[i].name, y->labels[i].name));
            CHECK(x->labels[i].name.len <= PROF_MAX_LABEL_NAME);
            CHECK(x->labels[i].category == y->labels[i].category);
            CHECK(x->labels[i].native_depth == y->labels[i].native_depth);
            CHECK(x->labels[i].stack_address == y->labels[i].stack_address);
            CHECK(x->labels[i].code_address == y->labels[i].code_address);
        }
        break;
    }
    case BUF_ENTRY_MARKER: {
        const struct prof_marker *x = &a->u.marker, *y = &b->u.marker;

        CHECK(x->tid == y->tid && x->category == y->category && x->phase == y->phase);
        CHECK(x->start_ns == y->start_ns && x->end_ns == y->end_ns);
        CHECK(x->phase <= PROF_PHASE_END && x->payload_kind <= PROF_PAYLOAD_TYPED);
        CHECK(same_string(x->name, y->name) && x->name.len <= PROF_MAX_STRING);
        CHECK(x->payload_kind == y->payload_kind);
        if (x->payload_kind == PROF_PAYLOAD_TEXT)
            CHECK(same_string(x->text, y->text) && x->text.len <= PROF_MAX_MARKER_TEXT);
        CHECK(x->schema_id == y->schema_id && x->field_count == y->field_count);
        CHECK(x->field_count <= PROF_MAX_FIELDS);
        for (uint32_t i = 0; i < x->field_count; i++) {
            const struct prof_field *f = &x->fields[i], *g = &y->fields[i];

            CHECK(f->kind == g->kind);
            if (f->kind == PROF_FIELD_STRING)
                CHECK(same_string(f->v.s, g->v.s) && f->v.s.len <= PROF_MAX_STRING);
            else
                CHECK(memcmp(&f->v.u, &g->v.u, sizeof(f->v.u)) == 0);
        }
        CHECK(same_frames(x->frames, x->frame_count, y->frames, y->frame_count));
        break;
    }
    case BUF_ENTRY_COUNTER:
        CHECK(memcmp(&a->u.counter, &b->u.counter, sizeof(a->u.counter)) == 0);
        break;
    case BUF_ENTRY_PAUSE:
    case BUF_ENTRY_RESUME:
        CHECK(a->u.pause_time_ns == b->u.pause_time_ns);
        break;
    case BUF_ENTRY_OVERHEAD:
        CHECK(memcmp(&a->u.overhead, &b->u.overhead, sizeof(a->u.overhead)) == 0);
        break;
    default:
        abort(); /* decode returned 0 for a kind it does not know */
    }
}

static struct prof_entry entries[3]; /* ~70 KiB each: static, not on the stack */

static void decode_block(const uint8_t *block, size_t len)
{
    size_t cuts[2] = {len / 2, len ? block[0] % (len + 1) : 0};
    uint8_t *spans[3][2];
    int r[3];

    for (int i = 0; i < 3; i++) {
        size_t cut = i == 0 ? len : cuts[i - 1];
        /* Each span in its own allocation, so ASan sees a read past either. */
        uint8_t *a = malloc(cut ? cut : 1), *b = malloc(len - cut ? len - cut : 1);
        struct buf_entry_reader reader = {{a, b}, {cut, len - cut}, 0};

        CHECK(a && b);
        memcpy(a, block, cut);
        memcpy(b, block + cut, len - cut);
        r[i] = prof_entry_decode(&reader, &entries[i]);
        CHECK(r[i] == 0 || r[i] == -EBADMSG || r[i] == -ENOTSUP);
        CHECK(reader.pos <= len);
        spans[i][0] = a;
        spans[i][1] = b;
    }
    CHECK(r[0] == r[1] && r[0] == r[2]);
    if (r[0] == 0) {
        check_same_entry(&entries[0], &entries[1]);
        check_same_entry(&entries[0], &entries[2]);
    }
    /* Only now: decoded strings may be borrowed from the spans (entries.h). */
    for (int i = 0; i < 3; i++) {
        free(spans[i][0]);
        free(spans[i][1]);
    }
}

/* Part 2: the Gecko writer on hostile entries. */

static const struct prof_thread_info threads[] = {
        {1, "main", 1000, 0, true},
        {2, "worker", 2000, 900000000, false},
        {-5, "odd tid", 0, 0, false},
};
static const struct prof_counter_info counters[] = {
        {0, "RSS", "Memory", "resident"},
        {1, "items", "Bandwidth", "items"},
        {2, "c2", NULL, NULL},
};
static const struct prof_schema_field schema_fields[] = {
        {"label", "Label", "unique-string", true},
        {"bytes", NULL, "bytes", false},
        {"name", "Name", NULL, true},
};
static const struct prof_marker_schema schemas[] = {
        {1, "FuzzTyped", "{marker.data.label}", NULL, "{marker.name}", schema_fields, 3},
        {2, "FuzzEmpty", NULL, NULL, NULL, NULL, 0},
};
static char lib_path[] = "/fuzz/libfuzz.so", lib_name[] = "libfuzz.so";
static char exe_path[] = "/fuzz/program", exe_name[] = "program";
static char vdso_name[] = "[vdso]"; /* no path: the vdso */
static struct prof_lib libs_array[] = {
        {.start = 0x400000, .end = 0x500000, .bias = 0x400000, .path = exe_path, .name = exe_name},
        {.start = 0x7f0000000000,
         .end = 0x7f0000100000,
         .bias = 0x7f0000000000,
         .path = lib_path,
         .name = lib_name},
        {.start = 0x7fff00000000, .end = 0x7fff00002000, .bias = 0x7fff00000000, .name = vdso_name},
};
static const struct prof_libs libs = {libs_array, 3};

/* Names for some addresses, none for others; results borrow static strings. */
static int fake_resolve(void *userdata, const struct prof_frame_request *requests, size_t count,
                        struct prof_frame_result *results)
{
    static const char *const names[] = {"fuzz_main", "fuzz_leaf", "operator new(unsigned long)",
                                        "\xc3\x28 bad utf8", "a \"quoted\" \\ name"};

    (void)userdata;
    for (size_t i = 0; i < count; i++) {
        uint64_t v = requests[i].vaddr;

        CHECK(requests[i].lib >= &libs_array[0] && requests[i].lib <= &libs_array[2]);
        results[i].function = v % 3 == 0 ? NULL : names[v % 5];
        results[i].file = v % 2 ? "fuzz.c" : NULL;
        results[i].line = (uint32_t)(v % 100);
    }
    return count > 0 && requests[0].vaddr % 11 == 7 ? -EIO : 0;
}

static void write_gecko(const uint8_t *const *blocks, const size_t *lens, size_t count)
{
    struct prof_symbolizer symbolizer = {fake_resolve, NULL};
    struct prof_process_info info = {
            .pid = 4242,
            .ppid = 1,
            .name = "fuzz",
            .product = "fuzz --entries",
            .process_type = "default",
            .start_ns = 1000000000,
            .start_epoch_ms = 1.7e12,
            .shutdown_ns = 0,
            .interval_ns = 1000000,
            .stackwalk = "dwarf",
            .threads = threads,
            .thread_count = sizeof(threads) / sizeof(threads[0]),
            .counters = counters,
            .counter_count = sizeof(counters) / sizeof(counters[0]),
            .schemas = schemas,
            .schema_count = sizeof(schemas) / sizeof(schemas[0]),
            .libs = &libs,
    };
    struct buf_chunk_manager *manager = NULL;
    struct buf_chunked_buffer *buffer = NULL;
    struct json_writer *w = NULL;
    char *text = NULL;
    int r;

    CHECK(buf_chunk_manager_local_new(64ull << 20, CHUNK_BYTES, &manager) == 0);
    CHECK(buf_chunked_buffer_new(manager, info.pid, &buffer) == 0);
    for (size_t i = 0; i < count; i++) {
        r = buf_chunked_buffer_put_bytes(buffer, blocks[i], lens[i], NULL);
        CHECK(r == 0 || (r == -EMSGSIZE && lens[i] + 2 >= CHUNK_BYTES));
    }
    CHECK(json_writer_new_memory(&w) == 0);
    r = prof_gecko_write_process(w, NULL, &info, buffer, &symbolizer, NULL);
    CHECK(r == 0);
    CHECK(json_writer_finish(w) == 0);
    CHECK(json_writer_copy_to(w, &text) == 0);
    if (!test_json_valid(text, json_writer_length(w))) {
        fprintf(stderr, "invalid JSON:\n%.*s\n", (int)json_writer_length(w), text);
        abort();
    }
    free(text);
    json_writer_free(w);
    buf_chunked_buffer_free(buffer);
    buf_chunk_manager_free(manager);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t *blocks[MAX_BLOCKS];
    static size_t lens[MAX_BLOCKS];
    size_t count = 0, pos = 0;

    while (pos < size && count < MAX_BLOCKS) {
        uint64_t len;
        ssize_t n = buf_uleb128_decode(data + pos, size - pos, &len);

        if (n <= 0 || len == 0 || len > size - pos - (size_t)n)
            break;
        pos += (size_t)n;
        blocks[count] = data + pos;
        lens[count] = (size_t)len;
        decode_block(blocks[count], lens[count]);
        count++;
        pos += (size_t)len;
    }
    write_gecko(blocks, lens, count);
    return 0;
}
