/* json/writer.c - see writer.h.
 *
 * The output is a singly linked list of chunks; the writer appends at pos in its tail chunk.
 * An fd writer has one chunk of JSON_WRITER_CHUNK_BYTES; a memory writer's chunks are that
 * size, then huge-page sized (see chunk_alloc()). Each number or literal first reserves room for
 * its longest form, so the hot path is one room check and a few stores, and such a value never
 * straddles two chunks (a memory chunk may end a few bytes short); strings and spliced text
 * continue in a new chunk. A latched error sets end = pos, so every later room check fails into the
 * slow path, which sees the error. */
#include "json/writer.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/grow.h"
#include "common/hash.h"
#include "common/macros.h"
#include "common/map.h"
#include "json/json-internal.h"

/* One piece of output. Owned by the writer whose list it is on. */
struct json_chunk {
    struct json_chunk *next; /* owned: the following chunk, or NULL */
    size_t len;              /* bytes used, except in the writer's tail (see pos there) */
    size_t cap;              /* bytes of data */
    bool mapped;             /* mmap'd JSON_WRITER_BIG_CHUNK_BYTES (munmap), else malloc'd */
    char data[];
};

/* Data bytes of a small chunk: every room a writer reserves fits in it. */
#define CHUNK_DATA_BYTES (JSON_WRITER_CHUNK_BYTES - offsetof(struct json_chunk, data))

/* Room that the longest number (int64, uint64, time_ms or double) needs. */
#define NUMBER_ROOM 32

/* Key bytes copied by the fast path of put_key() (room it needs). */
#define KEY_FAST_BYTES 64

/* Longest output for one input unit of a string: "\u00XX". */
#define ESCAPE_ROOM 6

/* What each nesting level has seen. Kept in json_writer.state[depth]. */
enum json_state {
    ST_ROOT_EMPTY,
    ST_ROOT_DONE,
    ST_ARRAY_EMPTY,
    ST_ARRAY_MORE, /* at least one element: the next one needs a comma */
    ST_OBJECT_EMPTY,
    ST_OBJECT_MORE,
};

struct json_writer {
    char *pos;               /* next byte in the tail chunk (or no_room) */
    char *end;               /* end of the tail chunk's data; == pos after an error */
    int error;               /* first negative errno, or 0 */
    unsigned depth;          /* open containers; state[depth] is the innermost level */
    struct json_chunk *head; /* owned list of chunks; an fd writer has exactly one */
    struct json_chunk *tail; /* borrowed: last chunk of the list */
    size_t sealed_bytes;     /* memory: bytes in chunks before tail; fd: bytes written */
    int fd;                  /* borrowed; -1 for a memory writer */
    bool fd_not_socket;      /* send() said ENOTSOCK: use write() */
    unsigned chunks_made;    /* memory: chunks allocated since the writer was new or emptied */
    uint8_t state[JSON_WRITER_MAX_DEPTH + 1]; /* enum json_state per level, [0] = root */
};

/* pos and end of a writer without a chunk: room 0, never written to. */
static char no_room[1];

/* "00" "01" ... "99": two digits per table lookup. */
static const char digits2[201] = "00010203040506070809"
                                 "10111213141516171819"
                                 "20212223242526272829"
                                 "30313233343536373839"
                                 "40414243444546474849"
                                 "50515253545556575859"
                                 "60616263646566676869"
                                 "70717273747576777879"
                                 "80818283848586878889"
                                 "90919293949596979899";

/* String bytes: 0 copied as is, 1 escaped, 2 start of a UTF-8 sequence (checked). */
static const uint8_t char_class[256] = {
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x00 */
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x10 */
        0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x20: '"' */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x30 */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x40 */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, /* 0x50: '\\' */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x60 */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x70 */
        2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, /* 0x80 */
        2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, /* 0x90 */
        2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, /* 0xa0 */
        2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, /* 0xb0 */
        2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, /* 0xc0 */
        2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, /* 0xd0 */
        2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, /* 0xe0 */
        2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, /* 0xf0 */
};

static void latch(struct json_writer *w, int error)
{
    assert(error < 0);
    if (!w->error)
        w->error = error;
    w->end = w->pos;
}

static struct json_writer *writer_alloc(int fd)
{
    struct json_writer *w = calloc(1, sizeof(*w));

    if (!w)
        return NULL;
    w->pos = no_room;
    w->end = no_room;
    w->fd = fd;
    w->state[0] = ST_ROOT_EMPTY;
    return w;
}

/* Whether big chunks may be mapped: ways (test hook, json-internal.h) and what the kernel
 * said. thp is -1 until known, then 1 (huge pages may back a mapping) or 0 (they cannot:
 * every chunk comes from malloc). Atomic: writers live on several threads. */
static atomic_uint chunk_ways = JSON__WRITER_CHUNK_MMAP;
static atomic_int thp = -1;

unsigned json__writer_chunk_ways(unsigned ways)
{
    atomic_store(&thp, 1);
    return atomic_exchange(&chunk_ways, ways);
}

/* Whether transparent huge pages are not off ("never"), read once. An unreadable file (no
 * THP support built, no sysfs) counts as off. */
static bool thp_enabled(void)
{
    int state = atomic_load(&thp);
    char buf[128];
    ssize_t n = 0;
    int fd;

    if (state >= 0)
        return state;
    fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, buf, sizeof(buf) - 1);
        (void)close(fd);
    }
    buf[n > 0 ? n : 0] = '\0';
    state = n > 0 && !strstr(buf, "[never]");
    atomic_store(&thp, state);
    return state;
}

/* A JSON_WRITER_BIG_CHUNK_BYTES mapping aligned to its size and advised MADV_HUGEPAGE, or
 * NULL (mmap failed, or the kernel refused the advice: then huge pages are off for good). */
static char *map_big_chunk(void)
{
    const size_t bytes = JSON_WRITER_BIG_CHUNK_BYTES;
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uintptr_t skip;

    if (p == MAP_FAILED)
        return NULL;
    if ((uintptr_t)p % bytes) {
        /* Kernels before 6.7 do not align large anonymous mappings: map twice the size and
         * trim it to an aligned one, which a huge page can back. */
        (void)munmap(p, bytes);
        p = mmap(NULL, 2 * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return NULL;
        skip = (bytes - (uintptr_t)p % bytes) % bytes;
        if (skip)
            (void)munmap(p, skip);
        (void)munmap(p + skip + bytes, bytes - skip);
        p += skip;
    }
    if (madvise(p, bytes, MADV_HUGEPAGE) < 0) {
        (void)munmap(p, bytes);
        atomic_store(&thp, 0);
        return NULL;
    }
    return p;
}

/* A new chunk for w, or NULL. An fd writer's chunk and a memory writer's first
 * JSON_WRITER_SMALL_CHUNKS are small and malloc'd: a long-lived process reuses the memory of
 * its previous writers without a page fault. Later chunks are one huge page each, mapped and
 * given back with munmap (a malloc above glibc's 128 KiB threshold would be mapped anyway,
 * and freeing it would raise that threshold for the whole program we live in). Why: a child's
 * gather thread writes into memory it never touched (a new thread, a new arena), and on this
 * kind of guest (PVM) each 4 KiB page fault costs ~15 us: ~3,900 faults made 3/4 of the CPU
 * of a 16 MB profile. A huge page is one fault, zeroed in ~0.15 ms for 2 MiB; MADV_POPULATE_WRITE
 * of 4 KiB pages was measured too and halves the cost at best. Only a writer that has already
 * filled its small chunks gets one, so a huge page mostly unused costs little next to the
 * writing done. With MADV_HUGEPAGE and THP defrag "always" or "madvise", a fault may compact
 * memory when no huge page is free (watch compact_stall in /proc/vmstat). */
static struct json_chunk *chunk_alloc(struct json_writer *w)
{
    struct json_chunk *c = NULL;
    size_t bytes = JSON_WRITER_CHUNK_BYTES;

    if (w->fd < 0 && w->chunks_made >= JSON_WRITER_SMALL_CHUNKS &&
        (atomic_load(&chunk_ways) & JSON__WRITER_CHUNK_MMAP) && thp_enabled()) {
        c = (struct json_chunk *)map_big_chunk();
        if (c)
            bytes = JSON_WRITER_BIG_CHUNK_BYTES;
    }
    if (!c) {
        c = malloc(bytes);
        if (!c)
            return NULL;
    }
    w->chunks_made++;
    c->next = NULL;
    c->len = 0;
    c->cap = bytes - offsetof(struct json_chunk, data);
    c->mapped = bytes == JSON_WRITER_BIG_CHUNK_BYTES;
    return c;
}

static void chunk_free(struct json_chunk *c)
{
    if (c->mapped)
        (void)munmap(c, JSON_WRITER_BIG_CHUNK_BYTES);
    else
        free(c);
}

int json_writer_new_memory(struct json_writer **ret)
{
    struct json_writer *w;

    if (!ret)
        return -EINVAL;
    w = writer_alloc(-1);
    if (!w)
        return -ENOMEM;
    *ret = w;
    return 0;
}

int json_writer_new_fd(int fd, struct json_writer **ret)
{
    struct json_writer *w;
    struct json_chunk *c;

    if (fd < 0 || !ret)
        return -EINVAL;
    w = writer_alloc(fd);
    if (!w)
        return -ENOMEM;
    c = chunk_alloc(w);
    if (!c)
        goto err_free;
    w->head = c;
    w->tail = c;
    w->pos = c->data;
    w->end = c->data + CHUNK_DATA_BYTES;
    *ret = w;
    return 0;

err_free:
    free(w);
    return -ENOMEM;
}

static void free_chunks(struct json_chunk *c)
{
    while (c) {
        struct json_chunk *next = c->next;

        chunk_free(c);
        c = next;
    }
}

struct json_writer *json_writer_free(struct json_writer *w)
{
    if (w) {
        free_chunks(w->head);
        free(w);
    }
    return NULL;
}

int json_writer_error(const struct json_writer *w)
{
    return w ? w->error : -EINVAL;
}

static size_t tail_used(const struct json_writer *w)
{
    return w->tail ? (size_t)(w->pos - w->tail->data) : 0;
}

size_t json_writer_length(const struct json_writer *w)
{
    return w ? w->sealed_bytes + tail_used(w) : 0;
}

/* Writes all len bytes to the fd, retrying after EINTR and short writes. */
static bool write_all(struct json_writer *w, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n;

        /* send() with MSG_NOSIGNAL keeps a vanished peer from killing the profiled
         * program with SIGPIPE when the fd is a socket. */
        if (!w->fd_not_socket) {
            n = send(w->fd, p, len, MSG_NOSIGNAL);
            if (n < 0 && errno == ENOTSOCK) {
                w->fd_not_socket = true;
                continue;
            }
        } else {
            n = write(w->fd, p, len);
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            latch(w, -errno);
            return false;
        }
        if (n == 0) { /* Not expected for len > 0; never spin on it. */
            latch(w, -EIO);
            return false;
        }
        p += n;
        len -= (size_t)n;
        w->sealed_bytes += (size_t)n;
    }
    return true;
}

/* Writes out an fd writer's buffered bytes; its chunk is then empty. */
static bool flush_fd(struct json_writer *w)
{
    size_t used = tail_used(w);

    assert(w->fd >= 0);
    w->pos = w->tail->data;
    if (!write_all(w, w->tail->data, used))
        return false;
    w->end = w->tail->data + CHUNK_DATA_BYTES;
    return true;
}

/* Appends a fresh chunk to a memory writer; the old tail keeps its bytes. */
static bool new_chunk(struct json_writer *w)
{
    struct json_chunk *c = chunk_alloc(w);

    if (!c) {
        latch(w, -ENOMEM);
        return false;
    }
    if (w->tail) {
        w->tail->len = tail_used(w);
        w->sealed_bytes += w->tail->len;
        w->tail->next = c;
    } else {
        w->head = c;
    }
    w->tail = c;
    w->pos = c->data;
    w->end = c->data + c->cap;
    return true;
}

/* Slow path of reserve(): a new chunk (memory) or a flush (fd). The rest of a memory chunk
 * is left unused when the next piece does not fit, which costs at most room - 1 bytes. */
static bool make_room(struct json_writer *w, size_t room)
{
    assert(room <= CHUNK_DATA_BYTES);
    if (w->error)
        return false;
    if (w->fd >= 0)
        return flush_fd(w);
    return new_chunk(w);
}

/* Makes sure that room bytes can be stored at pos. */
static inline bool reserve(struct json_writer *w, size_t room)
{
    if (likely((size_t)(w->end - w->pos) >= room))
        return true;
    return make_room(w, room);
}

/* Copies len bytes, continuing in new chunks as needed. */
static void put_bytes(struct json_writer *w, const char *p, size_t len)
{
    if (w->fd >= 0 && len >= CHUNK_DATA_BYTES) {
        /* Big text goes straight to the fd rather than through the buffer. */
        if (flush_fd(w))
            (void)write_all(w, p, len);
        return;
    }
    while (len > 0) {
        size_t room = (size_t)(w->end - w->pos);

        if (room == 0) {
            if (!make_room(w, 1))
                return;
            room = (size_t)(w->end - w->pos);
        }
        if (room > len)
            room = len;
        memcpy(w->pos, p, room);
        w->pos += room;
        p += room;
        len -= room;
    }
}

/* Length of the valid UTF-8 sequence that starts with the byte >= 0x80 at p (avail bytes
 * available), or 0 if it is not one (Unicode table 3-7: no overlong forms, no surrogates,
 * nothing above U+10FFFF). */
static size_t utf8_sequence(const uint8_t *p, size_t avail)
{
    uint8_t c = p[0], lo = 0x80, hi = 0xbf;

    if (c < 0xc2) /* a continuation byte, or C0/C1 (overlong two-byte forms) */
        return 0;
    if (c < 0xe0)
        return avail >= 2 && (p[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c < 0xf0) {
        if (c == 0xe0)
            lo = 0xa0; /* overlong below U+0800 */
        else if (c == 0xed)
            hi = 0x9f; /* surrogates D800..DFFF */
        if (avail < 3 || p[1] < lo || p[1] > hi || (p[2] & 0xc0) != 0x80)
            return 0;
        return 3;
    }
    if (c < 0xf5) {
        if (c == 0xf0)
            lo = 0x90; /* overlong below U+10000 */
        else if (c == 0xf4)
            hi = 0x8f; /* above U+10FFFF */
        if (avail < 4 || p[1] < lo || p[1] > hi || (p[2] & 0xc0) != 0x80 || (p[3] & 0xc0) != 0x80)
            return 0;
        return 4;
    }
    return 0;
}

/* Writes the escaped form of one byte of class 1 (at least ESCAPE_ROOM bytes reserved). */
static char *put_escape(char *o, uint8_t c)
{
    static const char letter[32] = {
            ['\b'] = 'b', ['\t'] = 't', ['\n'] = 'n', ['\f'] = 'f', ['\r'] = 'r',
    };
    static const char hex[16] = "0123456789abcdef";

    o[0] = '\\';
    if (c == '"' || c == '\\') {
        o[1] = (char)c;
        return o + 2;
    }
    if (letter[c]) {
        o[1] = letter[c];
        return o + 2;
    }
    memcpy(o + 1, "u00", 3);
    o[4] = hex[c >> 4];
    o[5] = hex[c & 15];
    return o + 6;
}

/* Writes the body of a JSON string (no quotes) for len arbitrary bytes. */
/* Writes the one byte at *p that is not copied as is (an escape, a valid UTF-8 sequence, or
 * U+FFFD for a byte that starts none) at o, which has room for 6 bytes; advances *p past
 * what it consumed and returns the end. */
static char *put_special(char *o, const uint8_t **p, const uint8_t *e)
{
    size_t k;

    if (char_class[**p] == 1)
        return put_escape(o, *(*p)++);
    k = utf8_sequence(*p, (size_t)(e - *p));
    if (k) {
        memcpy(o, *p, k);
        *p += k;
        return o + k;
    }
    memcpy(o, "\xef\xbf\xbd", 3); /* U+FFFD for this one byte */
    (*p)++;
    return o + 3;
}

static void put_escaped(struct json_writer *w, const char *s, size_t len)
{
    const uint8_t *p = (const uint8_t *)s, *e = p + len;

    while (p < e) {
        size_t room = (size_t)(w->end - w->pos);
        size_t n = (size_t)(e - p);
        const uint8_t *stop;
        char *o = w->pos;

        /* Keep more than ESCAPE_ROOM, so that each pass makes progress. */
        if (room <= ESCAPE_ROOM) {
            if (!make_room(w, ESCAPE_ROOM + 1))
                return;
            o = w->pos;
            room = (size_t)(w->end - w->pos);
        }
        /* Copy plain bytes while the chunk has room; keep ESCAPE_ROOM for what stops us. */
        stop = p + MIN(n, room - ESCAPE_ROOM);
        while (p < stop && char_class[*p] == 0)
            *o++ = (char)*p++;
        if (p == e || char_class[*p] == 0) {
            w->pos = o;
            continue;
        }
        o = put_special(o, &p, e);
        w->pos = o;
    }
}

/* Writes the body of a JSON string for the bytes [p, e) at o, which has room for 6 bytes per
 * input byte; returns the end. Same bytes as put_escaped(). */
static char *put_escaped_unchecked(char *o, const uint8_t *p, const uint8_t *e)
{
    while (p < e) {
        while (p < e && char_class[*p] == 0)
            *o++ = (char)*p++;
        if (p == e)
            break;
        o = put_special(o, &p, e);
    }
    return o;
}

/* Writes a key, quoted and escaped, and its colon. */
static bool put_key(struct json_writer *w, const char *key)
{
    const uint8_t *k = (const uint8_t *)key;

    if (!reserve(w, 1))
        return false;
    *w->pos++ = '"';
    /* Keys are mostly short and plain: copy them while looking for their end. */
    if ((size_t)(w->end - w->pos) >= KEY_FAST_BYTES) {
        char *o = w->pos;

        for (size_t n = 0; n < KEY_FAST_BYTES && char_class[*k] == 0; n++)
            *o++ = (char)*k++;
        w->pos = o;
    }
    if (*k)
        put_escaped(w, (const char *)k, strlen((const char *)k));
    if (!reserve(w, 2))
        return false;
    memcpy(w->pos, "\":", 2);
    w->pos += 2;
    return true;
}

/* Everything before a value but the array fast path: state checks, comma, key. */
static bool begin_value_slow(struct json_writer *w, const char *key, size_t room)
{
    uint8_t *st;

    if (w->error)
        return false;
    st = &w->state[w->depth];
    switch (*st) {
    case ST_ROOT_EMPTY:
        if (key)
            goto misuse;
        *st = ST_ROOT_DONE;
        break;
    case ST_ARRAY_EMPTY:
        if (key)
            goto misuse;
        *st = ST_ARRAY_MORE;
        break;
    case ST_ARRAY_MORE:
        if (key)
            goto misuse;
        if (!reserve(w, 1))
            return false;
        *w->pos++ = ',';
        break;
    case ST_OBJECT_EMPTY:
    case ST_OBJECT_MORE:
        if (!key)
            goto misuse;
        if (*st == ST_OBJECT_MORE) {
            if (!reserve(w, 1))
                return false;
            *w->pos++ = ',';
        }
        *st = ST_OBJECT_MORE;
        if (!put_key(w, key))
            return false;
        break;
    default: /* ST_ROOT_DONE: the document already has its value */
        goto misuse;
    }
    return reserve(w, room);

misuse:
    latch(w, -EINVAL);
    return false;
}

/* Writes what comes before a value (comma, key) and makes room for room more bytes. Returns
 * false if the writer is, or just became, in error. The test reads: another element of an
 * array, and room for the comma and the value (never true after an error, see latch()). */
static inline bool begin_value(struct json_writer *w, const char *key, size_t room)
{
    if (likely(w->state[w->depth] == ST_ARRAY_MORE && !key && (size_t)(w->end - w->pos) > room)) {
        *w->pos++ = ',';
        return true;
    }
    return begin_value_slow(w, key, room);
}

static void container_begin(struct json_writer *w, const char *key, char open, uint8_t state)
{
    if (w->depth >= JSON_WRITER_MAX_DEPTH) {
        latch(w, -EINVAL);
        return;
    }
    if (!begin_value(w, key, 1))
        return;
    *w->pos++ = open;
    w->state[++w->depth] = state;
}

static void container_end(struct json_writer *w, char close, uint8_t empty_state)
{
    uint8_t st = w->state[w->depth];

    if (w->error)
        return;
    if (w->depth == 0 || (st != empty_state && st != empty_state + 1)) {
        latch(w, -EINVAL);
        return;
    }
    if (!reserve(w, 1))
        return;
    *w->pos++ = close;
    w->depth--;
}

void json_writer_object_begin(struct json_writer *w, const char *key)
{
    container_begin(w, key, '{', ST_OBJECT_EMPTY);
}

void json_writer_object_end(struct json_writer *w)
{
    container_end(w, '}', ST_OBJECT_EMPTY);
}

void json_writer_array_begin(struct json_writer *w, const char *key)
{
    container_begin(w, key, '[', ST_ARRAY_EMPTY);
}

void json_writer_array_end(struct json_writer *w)
{
    container_end(w, ']', ST_ARRAY_EMPTY);
}

static inline unsigned count_digits(uint64_t v)
{
    unsigned n = 1;

    for (;;) {
        if (v < 10)
            return n;
        if (v < 100)
            return n + 1;
        if (v < 1000)
            return n + 2;
        if (v < 10000)
            return n + 3;
        v /= 10000;
        n += 4;
    }
}

/* Decimal digits of v at p; returns the end. Fills from the right, two digits at a time. */
static inline char *put_u64(char *p, uint64_t v)
{
    char *end = p + count_digits(v);
    char *q = end;

    while (v >= 100) {
        unsigned r = (unsigned)(v % 100) * 2;

        v /= 100;
        q -= 2;
        q[0] = digits2[r];
        q[1] = digits2[r + 1];
    }
    if (v >= 10) {
        q[-2] = digits2[v * 2];
        q[-1] = digits2[v * 2 + 1];
    } else {
        q[-1] = (char)('0' + v);
    }
    return end;
}

/* Magnitude of v as unsigned, correct for INT64_MIN. */
static inline uint64_t magnitude(int64_t v)
{
    return v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
}

static inline char *put_int(char *p, int64_t value)
{
    if (value < 0)
        *p++ = '-';
    return put_u64(p, magnitude(value));
}

static inline char *put_time_ms(char *p, int64_t ns)
{
    uint64_t mag = magnitude(ns);
    uint32_t frac = (uint32_t)(mag % 1000000);

    if (ns < 0)
        *p++ = '-';
    p = put_u64(p, mag / 1000000);
    if (frac) {
        unsigned d0 = frac / 10000 * 2, d1 = frac / 100 % 100 * 2, d2 = frac % 100 * 2;

        p[0] = '.';
        p[1] = digits2[d0];
        p[2] = digits2[d0 + 1];
        p[3] = digits2[d1];
        p[4] = digits2[d1 + 1];
        p[5] = digits2[d2];
        p[6] = digits2[d2 + 1];
        p += 7;
        while (p[-1] == '0') /* stops at a non-zero digit: frac != 0 */
            p--;
    }
    return p;
}

void json_writer_int(struct json_writer *w, const char *key, int64_t value)
{
    if (!begin_value(w, key, NUMBER_ROOM))
        return;
    w->pos = put_int(w->pos, value);
}

void json_writer_uint(struct json_writer *w, const char *key, uint64_t value)
{
    if (!begin_value(w, key, NUMBER_ROOM))
        return;
    w->pos = put_u64(w->pos, value);
}

void json_writer_time_ms(struct json_writer *w, const char *key, int64_t ns)
{
    if (!begin_value(w, key, NUMBER_ROOM))
        return;
    w->pos = put_time_ms(w->pos, ns);
}

char *json_raw_uint(char *p, uint64_t value)
{
    return put_u64(p, value);
}

char *json_raw_int(char *p, int64_t value)
{
    return put_int(p, value);
}

char *json_raw_time_ms(char *p, int64_t ns)
{
    return put_time_ms(p, ns);
}

char *json_raw_string(char *p, const char *s, size_t len)
{
    *p++ = '"';
    p = put_escaped_unchecked(p, (const uint8_t *)s, (const uint8_t *)s + len);
    *p++ = '"';
    return p;
}

char *json_writer_raw_begin(struct json_writer *w, const char *key, size_t max_bytes)
{
    if (unlikely(max_bytes > JSON_WRITER_RAW_MAX_BYTES)) {
        if (!w->error)
            latch(w, -EINVAL);
        return NULL;
    }
    if (!begin_value(w, key, max_bytes))
        return NULL;
    return w->pos;
}

void json_writer_raw_end(struct json_writer *w, char *end)
{
    assert(end >= w->pos && end <= w->end);
    w->pos = end;
}

void json_writer_double(struct json_writer *w, const char *key, double value)
{
    char buf[NUMBER_ROOM];
    char *o;
    int n = 0;

    if (!isfinite(value)) {
        json_writer_null(w, key);
        return;
    }
    /* snprintf is slow but doubles are rare in profiles (times go through time_ms). strtod
     * reads the locale's decimal point, as snprintf writes it, so the check is consistent. */
    for (int precision = 15; precision <= 17; precision++) {
        n = snprintf(buf, sizeof(buf), "%.*g", precision, value);
        if (n <= 0 || (size_t)n >= sizeof(buf) || strtod(buf, NULL) == value)
            break;
    }
    if (n <= 0 || (size_t)n >= sizeof(buf)) {
        latch(w, -EINVAL); /* cannot happen with %g and a finite double */
        return;
    }
    if (!begin_value(w, key, NUMBER_ROOM))
        return;
    /* A program we live in may have called setlocale(): whatever it uses as the decimal
     * point (perhaps several bytes) becomes '.'. */
    o = w->pos;
    for (int i = 0; i < n; i++) {
        char c = buf[i];

        if ((c >= '0' && c <= '9') || c == '-' || c == '+' || c == 'e' || c == 'E')
            *o++ = c;
        else if (o == w->pos || o[-1] != '.')
            *o++ = '.';
    }
    w->pos = o;
}

void json_writer_bool(struct json_writer *w, const char *key, bool value)
{
    if (!begin_value(w, key, 5))
        return;
    if (value) {
        memcpy(w->pos, "true", 4);
        w->pos += 4;
    } else {
        memcpy(w->pos, "false", 5);
        w->pos += 5;
    }
}

void json_writer_null(struct json_writer *w, const char *key)
{
    if (!begin_value(w, key, 4))
        return;
    memcpy(w->pos, "null", 4);
    w->pos += 4;
}

void json_writer_string_len(struct json_writer *w, const char *key, const char *s, size_t len)
{
    if (!s && len > 0) {
        latch(w, -EINVAL);
        return;
    }
    if (!begin_value(w, key, 1))
        return;
    *w->pos++ = '"';
    put_escaped(w, s, len);
    if (!reserve(w, 1))
        return;
    *w->pos++ = '"';
}

void json_writer_string(struct json_writer *w, const char *key, const char *s)
{
    if (!s) {
        latch(w, -EINVAL);
        return;
    }
    json_writer_string_len(w, key, s, strlen(s));
}

void json_writer_splice_text(struct json_writer *w, const char *key, const char *json, size_t len)
{
    if (w->error)
        return;
    if (!json || len == 0) {
        latch(w, -EINVAL);
        return;
    }
    if (!begin_value(w, key, 0))
        return;
    put_bytes(w, json, len);
}

/* Empties a writer whose output was taken: keeps one chunk for reuse unless keep_none. Its
 * next chunks are small again: it starts over as a new writer. */
static void reset_taken(struct json_writer *w, bool keep_none)
{
    if (keep_none) {
        w->head = NULL;
        w->tail = NULL;
        w->pos = no_room;
        w->end = no_room;
    } else if (w->head) {
        free_chunks(w->head->next);
        w->head->next = NULL;
        w->tail = w->head;
        w->pos = w->head->data;
        w->end = w->head->data + w->head->cap;
    }
    w->chunks_made = w->head ? 1 : 0;
    w->sealed_bytes = 0;
    w->depth = 0;
    w->state[0] = ST_ROOT_EMPTY;
}

void json_writer_splice_writer(struct json_writer *w, const char *key, struct json_writer *other)
{
    size_t other_len;

    if (w->error)
        return;
    if (!other || other == w || other->fd >= 0) {
        latch(w, -EINVAL);
        return;
    }
    if (other->error) {
        latch(w, other->error);
        return;
    }
    if (other->depth != 0 || other->state[0] != ST_ROOT_DONE) {
        latch(w, -EINVAL);
        return;
    }
    if (!begin_value(w, key, 0))
        return;
    other_len = json_writer_length(other);
    if (w->fd >= 0 || other_len <= (size_t)(w->end - w->pos)) {
        /* Into an fd, or small enough to copy into the room we have. */
        if (w->fd >= 0 && !flush_fd(w))
            return;
        for (struct json_chunk *c = other->head; c; c = c->next) {
            size_t len = c == other->tail ? tail_used(other) : c->len;

            if (w->fd >= 0) {
                if (!write_all(w, c->data, len))
                    return;
            } else {
                memcpy(w->pos, c->data, len);
                w->pos += len;
            }
        }
        reset_taken(other, false);
        return;
    }
    /* Move the chunks: w's tail is sealed as it is, other's tail becomes w's tail. */
    if (w->tail) {
        w->tail->len = tail_used(w);
        w->sealed_bytes += w->tail->len;
        w->tail->next = other->head;
    } else {
        w->head = other->head;
    }
    w->tail = other->tail;
    w->pos = other->pos;
    w->end = other->end;
    w->sealed_bytes += other->sealed_bytes;
    reset_taken(other, true);
}

int json_writer_finish(struct json_writer *w)
{
    if (!w)
        return -EINVAL;
    if (!w->error && (w->depth != 0 || w->state[0] != ST_ROOT_DONE))
        latch(w, -EINVAL);
    if (!w->error && w->fd >= 0)
        (void)flush_fd(w);
    return w->error;
}

int json_writer_each_chunk(const struct json_writer *w, json_writer_chunk_cb cb, void *userdata)
{
    if (!w || !cb || w->fd >= 0)
        return -EINVAL;
    if (w->error)
        return w->error;
    for (const struct json_chunk *c = w->head; c; c = c->next) {
        size_t len = c == w->tail ? tail_used(w) : c->len;
        int r;

        if (len == 0)
            continue;
        r = cb(c->data, len, userdata);
        if (r < 0)
            return r;
    }
    return 0;
}

static int append_piece(const char *data, size_t len, void *userdata)
{
    char **out = userdata;

    memcpy(*out, data, len);
    *out += len;
    return 0;
}

int json_writer_copy_to(const struct json_writer *w, char **ret_string)
{
    char *s, *p;
    int r;

    if (!w || !ret_string || w->fd >= 0)
        return -EINVAL;
    if (w->error)
        return w->error;
    s = malloc(json_writer_length(w) + 1);
    if (!s)
        return -ENOMEM;
    p = s;
    r = json_writer_each_chunk(w, append_piece, &p);
    assert(r == 0);
    (void)r;
    *p = '\0';
    *ret_string = s;
    return 0;
}

/* Unique strings: a map (common/map.h) of indexes into an array of entries; the bytes live in
 * an arena of blocks. */

#define ARENA_BLOCK_BYTES (64 * 1024)
/* Strings longer than this get a block of their own, so the arena wastes little. */
#define ARENA_BIG_BYTES   (ARENA_BLOCK_BYTES / 4)

struct arena_block {
    struct arena_block *next; /* owned */
    char data[];
};

struct unique_entry {
    const char *s; /* borrowed from the arena */
    size_t len;
};

struct json_unique_strings {
    struct unique_entry *entries; /* owned, entries_cap long, in index order */
    size_t entries_cap;
    uint32_t count;
    struct fleetprof_map index; /* string -> index; the keys are entries' */
    struct arena_block *blocks; /* owned list */
    char *arena_pos;            /* free space in the newest normal block */
    size_t arena_room;
};

int json_unique_strings_new(struct json_unique_strings **ret)
{
    struct json_unique_strings *us;

    if (!ret)
        return -EINVAL;
    us = calloc(1, sizeof(*us));
    if (!us)
        return -ENOMEM;
    *ret = us;
    return 0;
}

struct json_unique_strings *json_unique_strings_free(struct json_unique_strings *us)
{
    if (us) {
        struct arena_block *b = us->blocks;

        while (b) {
            struct arena_block *next = b->next;

            free(b);
            b = next;
        }
        free(us->entries);
        fleetprof_map_free(&us->index);
        free(us);
    }
    return NULL;
}

uint32_t json_unique_strings_count(const struct json_unique_strings *us)
{
    return us ? us->count : 0;
}

static const char *arena_copy(struct json_unique_strings *us, const char *s, size_t len)
{
    struct arena_block *b;
    char *p;

    if (len == 0)
        return "";
    if (len > us->arena_room) {
        bool big = len > ARENA_BIG_BYTES;

        b = malloc(sizeof(*b) + (big ? len : ARENA_BLOCK_BYTES));
        if (!b)
            return NULL;
        b->next = us->blocks;
        us->blocks = b;
        if (big) { /* the current normal block keeps its room */
            memcpy(b->data, s, len);
            return b->data;
        }
        us->arena_pos = b->data;
        us->arena_room = ARENA_BLOCK_BYTES;
    }
    p = us->arena_pos;
    memcpy(p, s, len);
    us->arena_pos += len;
    us->arena_room -= len;
    return p;
}

static bool unique_same(const void *ctx, const void *key, uint64_t index)
{
    const struct unique_entry *e = &((const struct unique_entry *)ctx)[index], *k = key;

    return e->len == k->len && memcmp(e->s, k->s, k->len) == 0;
}

int json_unique_strings_index(struct json_unique_strings *us, const char *s, size_t len,
                              uint32_t *ret_index)
{
    struct unique_entry key;
    uint64_t hash, found;
    const char *copy;
    int r;

    if (!us || !ret_index || (!s && len > 0))
        return -EINVAL;
    if (len == 0)
        s = "";
    key = (struct unique_entry){.s = s, .len = len};
    hash = fleetprof_hash64(s, len);
    if (fleetprof_map_find(&us->index, hash, unique_same, us->entries, &key, &found)) {
        *ret_index = (uint32_t)found;
        return 0;
    }
    /* New string: make every allocation first, so a failure leaves the table as it was. */
    if (us->count >= UINT32_MAX - 1)
        return -E2BIG;
    if (fleetprof_map_reserve(&us->index, 1) < 0 ||
        FLEETPROF_GROW(us->entries, us->entries_cap, (size_t)us->count + 1) < 0 ||
        !(copy = arena_copy(us, s, len)))
        return -ENOMEM;
    us->entries[us->count] = (struct unique_entry){.s = copy, .len = len};
    r = fleetprof_map_set(&us->index, hash, unique_same, us->entries, &key, us->count);
    assert(r == 0); /* the room is reserved */
    (void)r;
    *ret_index = us->count++;
    return 0;
}

void json_unique_strings_write(const struct json_unique_strings *us, struct json_writer *w,
                               const char *key)
{
    if (!us) {
        latch(w, -EINVAL);
        return;
    }
    json_writer_array_begin(w, key);
    for (uint32_t i = 0; i < us->count && !w->error; i++)
        json_writer_string_len(w, NULL, us->entries[i].s, us->entries[i].len);
    json_writer_array_end(w);
}
