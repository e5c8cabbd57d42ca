/* tests/fuzz/gen-entries-corpus.c - writes seed inputs for fuzz-entries with the real
 * encoder (prof_entry_put_*), in the fuzzer's input format: blocks, each ULEB128 length +
 * bytes.
 *
 * Usage: gen-entries-corpus DIR  ->  DIR/seed-<kind>  one entry of each kind and payload
 *                                    DIR/seed-profile a realistic mix: 3 threads' samples
 *                                                     with labels, markers of every phase,
 *                                                     counters, pauses, overhead
 *                                    DIR/seed-limits  entries at the size limits
 * Run by hand after changing the entry format:
 *   build/tests/fuzz/gen-entries-corpus tests/fuzz/corpus/entries
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/chunk-manager.h"
#include "buffer/chunked-buffer.h"
#include "buffer/leb128.h"
#include "profile/entries.h"

#define START_NS 1000000000ull

struct out {
    uint8_t *bytes;
    size_t len, cap;
};

static void out_append(struct out *o, const void *p, size_t n)
{
    if (o->len + n > o->cap) {
        o->cap = (o->len + n) * 2;
        o->bytes = realloc(o->bytes, o->cap);
        if (!o->bytes) {
            fprintf(stderr, "gen-entries-corpus: out of memory\n");
            exit(1);
        }
    }
    memcpy(o->bytes + o->len, p, n);
    o->len += n;
}

static int append_block(struct buf_entry_reader *r, uint64_t index, void *userdata)
{
    struct out *o = userdata;
    uint8_t prefix[BUF_ULEB128_MAX_BYTES], block[64 * 1024];
    size_t n = buf_entry_reader_remaining(r);

    (void)index;
    if (n > sizeof(block) || buf_entry_reader_read(r, block, n) < 0)
        return -EMSGSIZE;
    out_append(o, prefix, buf_uleb128_encode(n, prefix));
    out_append(o, block, n);
    return 0;
}

struct buf {
    struct buf_chunk_manager *manager;
    struct buf_chunked_buffer *buffer;
};

static struct buf buf_open(void)
{
    struct buf b;

    if (buf_chunk_manager_local_new(64ull << 20, 64 * 1024, &b.manager) < 0 ||
        buf_chunked_buffer_new(b.manager, 1, &b.buffer) < 0) {
        fprintf(stderr, "gen-entries-corpus: out of memory\n");
        exit(1);
    }
    return b;
}

/* Writes the buffer's blocks to DIR/seed-NAME and closes the buffer. */
static int buf_save(struct buf *b, const char *dir, const char *name)
{
    struct out o = {0};
    char path[4096];
    FILE *f;
    int r;

    r = buf_chunked_buffer_read_each(b->buffer, append_block, &o);
    b->buffer = buf_chunked_buffer_free(b->buffer);
    b->manager = buf_chunk_manager_free(b->manager);
    if (r < 0)
        return r;
    (void)snprintf(path, sizeof(path), "%s/seed-%s", dir, name);
    f = fopen(path, "wb");
    if (!f || fwrite(o.bytes, 1, o.len, f) != o.len) {
        fprintf(stderr, "gen-entries-corpus: cannot write %s\n", path);
        if (f)
            (void)fclose(f);
        free(o.bytes);
        return -EIO;
    }
    free(o.bytes);
    return fclose(f) == 0 ? 0 : -EIO;
}

#define CHECKED(call)                                                  \
    do {                                                               \
        if ((call) < 0) {                                              \
            fprintf(stderr, "gen-entries-corpus: %s failed\n", #call); \
            exit(1);                                                   \
        }                                                              \
    } while (0)

/* Return addresses in the fuzzer's fake modules (program at 0x400000, a library high up). */
static const uint64_t stack_a[] = {0x401234, 0x402345, 0x7f0000001111, 0x403456, 0x404567};
static const uint64_t stack_b[] = {0x405000, 0x402345, 0x7f0000002222, 0x403456, 0x404567};
/* Through the fake vdso (0x7fff00000000), where the fuzzer's symbolizer names no vaddr that is
 * a multiple of 3: 0x30 is called from a named function (0x104), 0x60 from two different
 * ones (0x104, 0x202), so only 0x30 gets a caller in its name. */
static const uint64_t stack_vdso_a[] = {0x7fff00000030, 0x7fff00000105, 0x401234};
static const uint64_t stack_vdso_b[] = {0x7fff00000060, 0x7fff00000105, 0x401234};
static const uint64_t stack_vdso_c[] = {0x7fff00000060, 0x7fff00000203, 0x401234};

static struct prof_sample sample(int32_t tid, uint64_t t, const uint64_t *frames, uint32_t n,
                                 const struct prof_label *labels, uint32_t nlabels)
{
    return (struct prof_sample){tid, START_NS + t, 950000, 0, n, nlabels, frames, labels};
}

static struct prof_marker marker(int32_t tid, enum prof_marker_phase phase, uint64_t start,
                                 uint64_t end, const char *name)
{
    struct prof_marker m = {0};

    m.tid = tid;
    m.category = 7;
    m.phase = phase;
    m.start_ns = start ? START_NS + start : 0;
    m.end_ns = end ? START_NS + end : 0;
    m.name = (struct prof_string){name, strlen(name)};
    return m;
}

static void put_each_kind(const char *dir)
{
    static const struct prof_label labels[] = {
            {{"request", 7}, 7, 3, 0x7ffd0000, 0x402345},
            {{"parse", 5}, 3, 0, 0x7ffc0000, 0x403456},
    };
    struct prof_field fields[3];
    struct prof_counter_sample c = {1, START_NS + 5000, -42, 3};
    struct prof_overhead o = {START_NS + 6000, 1200, 0, 3400, 5600};
    struct prof_sample s = sample(1, 1000, stack_a, 5, labels, 2);
    struct prof_marker m;
    struct buf b;

    b = buf_open();
    CHECKED(prof_entry_put_sample(b.buffer, &s));
    CHECKED(buf_save(&b, dir, "sample"));

    b = buf_open();
    s = sample(1, 1000, stack_vdso_a, 3, NULL, 0);
    CHECKED(prof_entry_put_sample(b.buffer, &s));
    s = sample(1, 1100, stack_vdso_b, 3, NULL, 0);
    CHECKED(prof_entry_put_sample(b.buffer, &s));
    s = sample(2, 1200, stack_vdso_c, 3, NULL, 0);
    CHECKED(prof_entry_put_sample(b.buffer, &s));
    CHECKED(buf_save(&b, dir, "samples-vdso"));

    b = buf_open();
    CHECKED(prof_entry_put_same_sample(b.buffer, 2, START_NS + 2000));
    CHECKED(buf_save(&b, dir, "same-sample"));

    b = buf_open();
    m = marker(1, PROF_PHASE_INSTANT, 3000, 0, "instant");
    CHECKED(prof_entry_put_marker(b.buffer, &m));
    CHECKED(buf_save(&b, dir, "marker-none"));

    b = buf_open();
    m = marker(2, PROF_PHASE_INTERVAL, 3000, 4000, "interval");
    m.payload_kind = PROF_PAYLOAD_TEXT;
    m.text = (struct prof_string){"some text", 9};
    CHECKED(prof_entry_put_marker(b.buffer, &m));
    CHECKED(buf_save(&b, dir, "marker-text"));

    b = buf_open();
    m = marker(1, PROF_PHASE_INTERVAL, 3000, 4500, "typed");
    m.payload_kind = PROF_PAYLOAD_TYPED;
    m.schema_id = 1;
    fields[0] = (struct prof_field){.kind = PROF_FIELD_STRING, .v.s = {"setup", 5}};
    fields[1] = (struct prof_field){.kind = PROF_FIELD_UINT, .v.u = 12288};
    fields[2] = (struct prof_field){.kind = PROF_FIELD_DOUBLE, .v.d = -1.5};
    m.fields = fields;
    m.field_count = 3;
    m.frames = stack_b;
    m.frame_count = 5;
    CHECKED(prof_entry_put_marker(b.buffer, &m));
    CHECKED(buf_save(&b, dir, "marker-typed-stack"));

    b = buf_open();
    CHECKED(prof_entry_put_counter(b.buffer, &c));
    CHECKED(buf_save(&b, dir, "counter"));

    b = buf_open();
    CHECKED(prof_entry_put_pause(b.buffer, true, START_NS + 7000));
    CHECKED(prof_entry_put_pause(b.buffer, false, START_NS + 8000));
    CHECKED(buf_save(&b, dir, "pause-resume"));

    b = buf_open();
    CHECKED(prof_entry_put_overhead(b.buffer, &o));
    CHECKED(buf_save(&b, dir, "overhead"));
}

static void put_profile(const char *dir)
{
    static const struct prof_label labels[] = {{{"phase", 5}, 7, 2, 0x7ffd0000, 0x7f0000001111}};
    struct prof_field fields[3];
    struct buf b = buf_open();

    for (uint64_t t = 1; t <= 60; t++) {
        int32_t tid = (int32_t)(t % 3) == 2 ? -5 : (int32_t)(t % 3) + 1;
        struct prof_sample s =
                sample(tid, t * 1000000, t % 2 ? stack_a : stack_b, 5 - t % 3, labels, t % 4 == 0);
        struct prof_overhead o = {START_NS + t * 1000000, 1000, 0, 2000, 3000};
        struct prof_counter_sample c = {(uint32_t)(t % 4), START_NS + t * 1000000,
                                        (int64_t)(t * 4096) - 100000, t % 3};
        struct prof_marker m;

        if (t % 5 == 0)
            CHECKED(prof_entry_put_same_sample(b.buffer, tid, START_NS + t * 1000000 + 10));
        else
            CHECKED(prof_entry_put_sample(b.buffer, &s));
        CHECKED(prof_entry_put_overhead(b.buffer, &o));
        if (t % 2 == 0)
            CHECKED(prof_entry_put_counter(b.buffer, &c));
        switch (t % 6) {
        case 0:
            m = marker(tid, PROF_PHASE_START, t * 1000000, 0, "span");
            break;
        case 1:
            m = marker(tid, PROF_PHASE_END, 0, t * 1000000, "span");
            break;
        case 2:
            m = marker(tid, PROF_PHASE_INSTANT, t * 1000000, 0, "text");
            m.payload_kind = PROF_PAYLOAD_TEXT;
            m.text = (struct prof_string){"caf\xc3\xa9 \"q\"", 9};
            break;
        case 3:
            m = marker(tid, PROF_PHASE_INTERVAL, t * 1000000, t * 1000000 + 500, "typed");
            m.payload_kind = PROF_PAYLOAD_TYPED;
            m.schema_id = t % 12 == 3 ? 99 : 1; /* 99: a schema the writer does not know */
            fields[0] = (struct prof_field){.kind = PROF_FIELD_STRING, .v.s = {"a", 1}};
            fields[1] = (struct prof_field){.kind = PROF_FIELD_UINT, .v.u = t};
            fields[2] = (struct prof_field){.kind = PROF_FIELD_STRING, .v.s = {"zz", 2}};
            m.fields = fields;
            m.field_count = 3;
            break;
        case 4:
            m = marker(tid, PROF_PHASE_INSTANT, t * 1000000, 0, "with stack");
            m.frames = stack_a;
            m.frame_count = 5;
            break;
        default:
            m = marker(tid, PROF_PHASE_INSTANT, t * 1000000, 0, "bare");
            break;
        }
        CHECKED(prof_entry_put_marker(b.buffer, &m));
        if (t == 20)
            CHECKED(prof_entry_put_pause(b.buffer, true, START_NS + t * 1000000));
        if (t == 30)
            CHECKED(prof_entry_put_pause(b.buffer, false, START_NS + t * 1000000));
    }
    CHECKED(buf_save(&b, dir, "profile"));
}

static void put_limits(const char *dir)
{
    static uint64_t frames[PROF_MAX_FRAMES];
    static struct prof_label labels[PROF_MAX_LABELS];
    static char name[PROF_MAX_LABEL_NAME], text[PROF_MAX_STRING];
    struct prof_sample s;
    struct prof_marker m;
    struct buf b = buf_open();

    memset(name, 'n', sizeof(name));
    memset(text, 't', sizeof(text));
    for (uint32_t i = 0; i < PROF_MAX_FRAMES; i++)
        frames[i] = 0x400000 + 16 * (PROF_MAX_FRAMES - i);
    for (uint32_t i = 0; i < PROF_MAX_LABELS; i++)
        labels[i] = (struct prof_label){{name, 20 + i}, i, i * 8, 0x7ffd0000 - i, 0x400000 + i};
    s = sample(1, 1, frames, PROF_MAX_FRAMES, labels, PROF_MAX_LABELS);
    s.flags = PROF_SAMPLE_TRUNCATED;
    CHECKED(prof_entry_put_sample(b.buffer, &s));
    m = marker(1, PROF_PHASE_INSTANT, 2, 0, "long");
    m.payload_kind = PROF_PAYLOAD_TEXT;
    m.text = (struct prof_string){text, sizeof(text)};
    CHECKED(prof_entry_put_marker(b.buffer, &m));
    CHECKED(buf_save(&b, dir, "limits"));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen-entries-corpus DIR\n");
        return 2;
    }
    put_each_kind(argv[1]);
    put_profile(argv[1]);
    put_limits(argv[1]);
    return 0;
}
