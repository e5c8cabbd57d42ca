/* tests/fuzz/fuzz-json-writer.c - the JSON writer's output is always valid JSON.
 *
 * The input is a little program of writer calls (opcodes with operands: arbitrary byte
 * strings and keys, numbers, splices, unique strings). It runs on a memory writer and on an
 * fd writer (a memfd); the two outputs must be identical. When the program made no misuse
 * (the harness tracks nesting itself), json_writer_finish() must succeed and a strict
 * recursive-descent validator (RFC 8259 plus UTF-8 well-formedness) must accept the output;
 * anything else abort()s. Deliberate misuse (an opcode bit) must latch -EINVAL.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "json-check.h"
#include "json/writer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                 \
        }                                                                            \
    } while (0)

/* The program. */

struct input {
    const uint8_t *p, *end;
};

static uint8_t take_byte(struct input *in)
{
    return in->p < in->end ? *in->p++ : 0;
}

static uint64_t take_u64(struct input *in)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = v << 8 | take_byte(in);
    return v;
}

/* A byte string of length given by one byte; points into the input. */
static const char *take_bytes(struct input *in, size_t *ret_len)
{
    size_t len = take_byte(in);
    const char *s = (const char *)in->p;

    if (len > (size_t)(in->end - in->p))
        len = (size_t)(in->end - in->p);
    in->p += len;
    *ret_len = len;
    return s;
}

/* A key: a byte string without NUL, copied into buf. */
static const char *take_key(struct input *in, char *buf, size_t size)
{
    size_t len, n = 0;
    const char *s = take_bytes(in, &len);

    for (size_t i = 0; i < len && n + 1 < size; i++)
        if (s[i])
            buf[n++] = s[i];
    buf[n] = '\0';
    return buf;
}

static const char *const splice_texts[] = {
        "[1,2]", "{\"a\":[true,null]}", "\"x\"", "-12.5e3", " [ ] ", "{}", "0",
};

struct program_state {
    bool object[JSON_WRITER_MAX_DEPTH + 1]; /* container kinds, [0] unused */
    int depth;
    bool root_done;
    bool misused;
};

/* Runs the program on w; a unique-string table and a scratch writer come along. */
static void run_program(const uint8_t *data, size_t size, struct json_writer *w,
                        struct program_state *st)
{
    struct input in = {data, data + size};
    struct json_unique_strings *us = NULL;
    char keybuf[64];

    CHECK(json_unique_strings_new(&us) == 0);
    memset(st, 0, sizeof(*st));
    while (in.p < in.end && !st->misused) {
        uint8_t op = take_byte(&in);
        bool in_object = st->depth > 0 && st->object[st->depth];
        const char *key = in_object ? take_key(&in, keybuf, sizeof(keybuf)) : NULL;
        bool value_op = true;
        size_t len;
        const char *s;

        if ((op & 0xc0) == 0xc0) {
            /* One op in four is deliberate misuse, which must latch -EINVAL. */
            if (in_object)
                json_writer_int(w, NULL, 1); /* no key in an object */
            else if (st->depth > 0)
                json_writer_int(w, "k", 1); /* a key in an array */
            else if (st->root_done)
                json_writer_int(w, NULL, 1); /* a second root value */
            else
                json_writer_array_end(w); /* nothing to close */
            st->misused = true;
            break;
        }
        if (st->depth == 0 && st->root_done)
            break; /* the document is complete */
        switch (op & 0x0f) {
        case 0:
        case 1:
            if (st->depth >= JSON_WRITER_MAX_DEPTH) {
                value_op = false;
                break;
            }
            if (op & 1)
                json_writer_object_begin(w, key);
            else
                json_writer_array_begin(w, key);
            st->object[++st->depth] = op & 1;
            value_op = false;
            break;
        case 2:
            value_op = false;
            if (st->depth == 0)
                break;
            if (st->object[st->depth])
                json_writer_object_end(w);
            else
                json_writer_array_end(w);
            if (--st->depth == 0)
                st->root_done = true;
            break;
        case 3:
            json_writer_int(w, key, (int64_t)take_u64(&in));
            break;
        case 4:
            json_writer_uint(w, key, take_u64(&in));
            break;
        case 5: {
            uint64_t bits = take_u64(&in);
            double d;

            memcpy(&d, &bits, sizeof(d));
            json_writer_double(w, key, d);
            break;
        }
        case 6:
            json_writer_bool(w, key, take_byte(&in) & 1);
            break;
        case 7:
            json_writer_null(w, key);
            break;
        case 8:
        case 9:
            s = take_bytes(&in, &len);
            json_writer_string_len(w, key, s, len);
            break;
        case 10:
            json_writer_time_ms(w, key, (int64_t)take_u64(&in));
            break;
        case 11: {
            const char *t =
                    splice_texts[take_byte(&in) % (sizeof(splice_texts) / sizeof(splice_texts[0]))];

            json_writer_splice_text(w, key, t, strlen(t));
            break;
        }
        case 12: {
            struct json_writer *sub = NULL;
            int n = take_byte(&in);

            CHECK(json_writer_new_memory(&sub) == 0);
            json_writer_array_begin(sub, NULL);
            for (int i = 0; i < n * 64; i++)
                json_writer_int(sub, NULL, i);
            s = take_bytes(&in, &len);
            json_writer_string_len(sub, NULL, s, len);
            json_writer_array_end(sub);
            CHECK(json_writer_finish(sub) == 0);
            json_writer_splice_writer(w, key, sub);
            CHECK(json_writer_length(sub) == 0);
            json_writer_free(sub);
            break;
        }
        case 13: {
            uint32_t index, again;

            s = take_bytes(&in, &len);
            CHECK(json_unique_strings_index(us, s, len, &index) == 0);
            CHECK(json_unique_strings_index(us, s, len, &again) == 0);
            CHECK(index == again && index < json_unique_strings_count(us));
            if (st->depth < JSON_WRITER_MAX_DEPTH) /* the table is an array: one level more */
                json_unique_strings_write(us, w, key);
            else
                json_writer_null(w, key);
            break;
        }
        case 14: /* a long string: crosses chunk boundaries */
            s = take_bytes(&in, &len);
            if (len) {
                size_t big = 70000;
                char *buf = malloc(big);

                CHECK(buf);
                for (size_t i = 0; i < big; i++)
                    buf[i] = s[i % len];
                json_writer_string_len(w, key, buf, big);
                free(buf);
            } else {
                json_writer_string(w, key, "");
            }
            break;
        default:
            json_writer_int(w, key, 0);
        }
        if (value_op && st->depth == 0)
            st->root_done = true;
    }
    if (!st->misused) {
        /* Close what is open; an empty document gets a value. */
        while (st->depth > 0) {
            if (st->object[st->depth--])
                json_writer_object_end(w);
            else
                json_writer_array_end(w);
            st->root_done = true;
        }
        if (!st->root_done)
            json_writer_null(w, NULL);
    }
    json_unique_strings_free(us);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct json_writer *mem = NULL, *fdw = NULL;
    struct program_state st_mem, st_fd;
    char *text = NULL, *from_fd;
    size_t len;
    int fd, r;

    if (size > 4096)
        return 0;
    CHECK(json_writer_new_memory(&mem) == 0);
    run_program(data, size, mem, &st_mem);
    r = json_writer_finish(mem);
    if (st_mem.misused) {
        CHECK(r == -EINVAL);
        json_writer_free(mem);
        return 0;
    }
    CHECK(r == 0);
    CHECK(json_writer_copy_to(mem, &text) == 0);
    len = json_writer_length(mem);
    CHECK(strlen(text) == len); /* no NUL byte in the output */
    if (!test_json_valid(text, len)) {
        fprintf(stderr, "invalid JSON (%zu bytes): %.*s\n", len, (int)(len > 2000 ? 2000 : len),
                text);
        abort();
    }
    /* The same program through an fd writer gives the same bytes. */
    fd = memfd_create("fuzz-json-writer", MFD_CLOEXEC);
    if (fd >= 0) {
        CHECK(json_writer_new_fd(fd, &fdw) == 0);
        run_program(data, size, fdw, &st_fd);
        CHECK(json_writer_finish(fdw) == 0);
        CHECK(json_writer_length(fdw) == len);
        from_fd = malloc(len + 1);
        CHECK(from_fd);
        CHECK(pread(fd, from_fd, len + 1, 0) == (ssize_t)len);
        CHECK(memcmp(from_fd, text, len) == 0);
        free(from_fd);
        json_writer_free(fdw);
        (void)close(fd);
    }
    free(text);
    json_writer_free(mem);
    return 0;
}
