/* profile/entries.c - encoding and decoding of buffer entry payloads (entries.h).
 *
 * Writers size an entry exactly first (the buffer reserves before writing), then encode it
 * through the buffer's writer callback; both passes go through the same field walk
 * (a `struct enc` either counts or writes), so size and bytes cannot disagree.
 */
#include "profile/entries.h"

#include <errno.h>
#include <string.h>

#include "buffer/entry.h"
#include "buffer/leb128.h"
#include "common/macros.h"

/* Counts bytes (w and direct NULL), writes them into a reserved block (w), or into a
 * plain buffer (direct, the small-entry fast path: no call per field). */
struct enc {
    struct buf_entry_writer *w;
    uint8_t *direct;
    size_t cap; /* of direct */
    size_t size;
    int error;
};

static void enc_bytes(struct enc *e, const void *p, size_t n)
{
    if (e->direct) {
        if (n <= e->cap - e->size)
            memcpy(e->direct + e->size, p, n);
        else
            e->error = -EMSGSIZE;
    } else if (e->w && !e->error && n > 0) {
        e->error = buf_entry_writer_write(e->w, p, n);
    }
    e->size += n;
    if (e->direct && e->error)
        e->cap = e->size = 0, e->direct = NULL; /* stop writing; the caller starts over */
}

static void enc_u(struct enc *e, uint64_t v)
{
    /* Inline ULEB128 straight into the buffer when there is room: the common case. */
    if (e->direct && e->cap - e->size >= BUF_ULEB128_MAX_BYTES) {
        uint8_t *o = e->direct + e->size;

        while (v >= 0x80) {
            *o++ = (uint8_t)(v | 0x80);
            v >>= 7;
        }
        *o++ = (uint8_t)v;
        e->size = (size_t)(o - e->direct);
        return;
    }
    {
        uint8_t tmp[BUF_ULEB128_MAX_BYTES];

        enc_bytes(e, tmp, buf_uleb128_encode(v, tmp));
    }
}

static void enc_i(struct enc *e, int64_t v)
{
    /* zig-zag: small magnitudes of either sign stay short */
    enc_u(e, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

static void enc_str(struct enc *e, const char *s, size_t len, size_t max)
{
    if (!s)
        len = 0;
    if (len > max)
        len = max;
    enc_u(e, len);
    enc_bytes(e, s, len);
}

static void enc_frames(struct enc *e, const uint64_t *frames, uint32_t n)
{
    if (n > PROF_MAX_FRAMES)
        n = PROF_MAX_FRAMES;
    enc_u(e, n);
    for (uint32_t i = 0; i < n; i++)
        enc_u(e, frames[i]);
}

typedef void (*encode_fn)(struct enc *e, const void *entry);

struct put_ctx {
    encode_fn encode;
    const void *entry;
};

static int write_entry(struct buf_entry_writer *w, void *userdata)
{
    const struct put_ctx *ctx = userdata;
    struct enc e = {w, NULL, 0, 0, 0};

    ctx->encode(&e, ctx->entry);
    return e.error;
}

/* Most entries (samples, markers) are small: encode them once into the stack, then copy
 * the bytes in. Larger ones are sized first, then encoded into the reserved block. */
#define SMALL_ENTRY_BYTES 512

static int put(struct buf_chunked_buffer *b, encode_fn encode, const void *entry)
{
    uint8_t small[SMALL_ENTRY_BYTES];
    struct enc once = {NULL, small, sizeof(small), 0, 0};
    struct put_ctx ctx = {encode, entry};
    struct enc sizer = {NULL, NULL, 0, 0, 0};

    encode(&once, entry);
    if (!once.error)
        return buf_chunked_buffer_put_bytes(b, small, once.size, NULL);
    encode(&sizer, entry);
    return buf_chunked_buffer_put(b, sizer.size, write_entry, &ctx, NULL);
}

static void encode_sample(struct enc *e, const void *entry)
{
    const struct prof_sample *s = entry;
    uint32_t nlabels = MIN(s->label_count, (uint32_t)PROF_MAX_LABELS);
    uint8_t kind = BUF_ENTRY_SAMPLE;
    uint32_t flags = s->flags;

    if (s->frame_count > PROF_MAX_FRAMES)
        flags |= PROF_SAMPLE_TRUNCATED;
    enc_bytes(e, &kind, 1);
    enc_i(e, s->tid);
    enc_u(e, s->time_ns);
    enc_u(e, s->cpu_delta_ns);
    enc_u(e, flags);
    enc_frames(e, s->frames, s->frame_count);
    enc_u(e, nlabels);
    for (uint32_t i = 0; i < nlabels; i++) {
        enc_str(e, s->labels[i].name.data, s->labels[i].name.len, PROF_MAX_LABEL_NAME);
        enc_u(e, s->labels[i].category);
        enc_u(e, s->labels[i].native_depth);
        enc_u(e, s->labels[i].stack_address);
        enc_u(e, s->labels[i].code_address);
    }
}

int prof_entry_put_sample(struct buf_chunked_buffer *b, const struct prof_sample *s)
{
    return put(b, encode_sample, s);
}

struct same_sample {
    int32_t tid;
    uint64_t time_ns;
    uint64_t cpu_delta_ns;
};

static void encode_same_sample(struct enc *e, const void *entry)
{
    const struct same_sample *s = entry;
    uint8_t kind = BUF_ENTRY_SAME_SAMPLE;

    enc_bytes(e, &kind, 1);
    enc_i(e, s->tid);
    enc_u(e, s->time_ns);
    if (s->cpu_delta_ns) /* optional: a block that ends after the time has none */
        enc_u(e, s->cpu_delta_ns);
}

int prof_entry_put_same_sample(struct buf_chunked_buffer *b, int32_t tid, uint64_t time_ns)
{
    return prof_entry_put_same_sample_cpu(b, tid, time_ns, 0);
}

int prof_entry_put_same_sample_cpu(struct buf_chunked_buffer *b, int32_t tid, uint64_t time_ns,
                                   uint64_t cpu_delta_ns)
{
    struct same_sample s = {tid, time_ns, cpu_delta_ns};

    return put(b, encode_same_sample, &s);
}

static void encode_marker(struct enc *e, const void *entry)
{
    const struct prof_marker *m = entry;
    uint8_t kind = BUF_ENTRY_MARKER;
    uint32_t nfields = MIN(m->field_count, (uint32_t)PROF_MAX_FIELDS);

    enc_bytes(e, &kind, 1);
    enc_i(e, m->tid);
    enc_u(e, m->category);
    enc_u(e, (uint64_t)m->phase);
    enc_u(e, m->start_ns);
    enc_u(e, m->end_ns);
    enc_str(e, m->name.data, m->name.len, PROF_MAX_STRING);
    enc_u(e, (uint64_t)m->payload_kind);
    if (m->payload_kind == PROF_PAYLOAD_TEXT) {
        enc_str(e, m->text.data, m->text.len, PROF_MAX_MARKER_TEXT);
    } else if (m->payload_kind == PROF_PAYLOAD_TYPED) {
        enc_u(e, m->schema_id);
        enc_u(e, nfields);
        for (uint32_t i = 0; i < nfields; i++) {
            const struct prof_field *f = &m->fields[i];
            uint8_t le[8];
            uint64_t bits;

            enc_u(e, (uint64_t)f->kind);
            switch (f->kind) {
            case PROF_FIELD_INT:
                enc_i(e, f->v.i);
                break;
            case PROF_FIELD_UINT:
                enc_u(e, f->v.u);
                break;
            case PROF_FIELD_DOUBLE:
                memcpy(&bits, &f->v.d, sizeof(bits));
                for (int k = 0; k < 8; k++)
                    le[k] = (uint8_t)(bits >> (8 * k));
                enc_bytes(e, le, sizeof(le));
                break;
            case PROF_FIELD_STRING:
            default:
                enc_str(e, f->v.s.data, f->v.s.len, PROF_MAX_STRING);
                break;
            }
        }
    }
    enc_frames(e, m->frames, m->frame_count);
}

int prof_entry_put_marker(struct buf_chunked_buffer *b, const struct prof_marker *m)
{
    return put(b, encode_marker, m);
}

static void encode_counter(struct enc *e, const void *entry)
{
    const struct prof_counter_sample *c = entry;
    uint8_t kind = BUF_ENTRY_COUNTER;

    enc_bytes(e, &kind, 1);
    enc_u(e, c->counter_id);
    enc_u(e, c->time_ns);
    enc_i(e, c->delta);
    enc_u(e, c->number);
}

int prof_entry_put_counter(struct buf_chunked_buffer *b, const struct prof_counter_sample *c)
{
    return put(b, encode_counter, c);
}

struct pause {
    uint8_t kind;
    uint64_t time_ns;
};

static void encode_pause(struct enc *e, const void *entry)
{
    const struct pause *p = entry;

    enc_bytes(e, &p->kind, 1);
    enc_u(e, p->time_ns);
}

int prof_entry_put_pause(struct buf_chunked_buffer *b, bool paused, uint64_t time_ns)
{
    struct pause p = {paused ? BUF_ENTRY_PAUSE : BUF_ENTRY_RESUME, time_ns};

    return put(b, encode_pause, &p);
}

static void encode_overhead(struct enc *e, const void *entry)
{
    const struct prof_overhead *o = entry;
    uint8_t kind = BUF_ENTRY_OVERHEAD;

    enc_bytes(e, &kind, 1);
    enc_u(e, o->time_ns);
    enc_u(e, o->locking_ns);
    enc_u(e, o->cleaning_ns);
    enc_u(e, o->counters_ns);
    enc_u(e, o->threads_ns);
}

int prof_entry_put_overhead(struct buf_chunked_buffer *b, const struct prof_overhead *o)
{
    return put(b, encode_overhead, o);
}

/* Decoding: every read is bounded by the block; failures latch in d->error. */
struct dec {
    struct buf_entry_reader *r;
    struct prof_entry *out;
    int error;
};

static uint64_t dec_u_slow(struct dec *d)
{
    uint64_t v = 0;

    if (!d->error && buf_entry_reader_read_uleb128(d->r, &v) < 0)
        d->error = -EBADMSG;
    return d->error ? 0 : v;
}

static inline uint64_t dec_u(struct dec *d)
{
    struct buf_entry_reader *r = d->r;

    /* Most values are one byte (kinds, counts, lengths, small ids) in the block's first
     * span: decode them here. Once an error is latched every read gives 0. */
    if (likely(r->pos < r->len[0] && !d->error)) {
        const uint8_t *p = r->span[0] + r->pos;

        if (p[0] < 0x80) {
            r->pos++;
            return p[0];
        }
        /* Up to 9 bytes (63 bits) cannot overflow: addresses, times. */
        if (r->len[0] - r->pos >= 9) {
            uint64_t v = p[0] & 0x7f;

            for (unsigned i = 1; i < 9; i++) {
                v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
                if (p[i] < 0x80) {
                    r->pos += i + 1;
                    return v;
                }
            }
        }
    }
    return dec_u_slow(d);
}

static int64_t dec_i(struct dec *d)
{
    uint64_t z = dec_u(d);

    return (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
}

static uint32_t dec_u32(struct dec *d, uint32_t max)
{
    uint64_t v = dec_u(d);

    if (v > max && !d->error)
        d->error = -EBADMSG;
    return d->error ? 0 : (uint32_t)v;
}

static int32_t dec_i32(struct dec *d)
{
    int64_t v = dec_i(d);

    if ((v < INT32_MIN || v > INT32_MAX) && !d->error)
        d->error = -EBADMSG;
    return d->error ? 0 : (int32_t)v;
}

static struct prof_string dec_str(struct dec *d, size_t max)
{
    struct prof_string s = {"", 0};
    struct prof_entry *o = d->out;
    uint64_t len = dec_u(d);

    if (d->error)
        return s;
    if (len > max || len > sizeof(o->strings) - o->strings_used) {
        d->error = -EBADMSG;
        return s;
    }
    if (d->r->pos <= d->r->len[0] && len <= d->r->len[0] - d->r->pos) {
        /* Within the first span (nearly always): the string is borrowed from the block, no
         * copy. It still counts against o->strings, so that what decodes does not depend
         * on where the chunks were cut. */
        s.data = (const char *)d->r->span[0] + d->r->pos;
        d->r->pos += (size_t)len;
    } else if (buf_entry_reader_read(d->r, o->strings + o->strings_used, (size_t)len) < 0) {
        d->error = -EBADMSG;
        return s;
    } else {
        s.data = (const char *)o->strings + o->strings_used;
    }
    s.len = (size_t)len;
    o->strings_used += (size_t)len;
    return s;
}

static uint32_t dec_frames(struct dec *d)
{
    uint32_t n = dec_u32(d, PROF_MAX_FRAMES);

    for (uint32_t i = 0; i < n && !d->error; i++)
        d->out->frames[i] = dec_u(d);
    return d->error ? 0 : n;
}

static void decode_sample(struct dec *d, struct prof_sample *s)
{
    s->tid = dec_i32(d);
    s->time_ns = dec_u(d);
    s->cpu_delta_ns = dec_u(d);
    s->flags = (uint32_t)dec_u(d);
    s->frame_count = dec_frames(d);
    s->frames = d->out->frames;
    s->label_count = dec_u32(d, PROF_MAX_LABELS);
    for (uint32_t i = 0; i < s->label_count && !d->error; i++) {
        struct prof_label *l = &d->out->labels[i];

        l->name = dec_str(d, PROF_MAX_LABEL_NAME);
        l->category = (uint32_t)dec_u(d);
        l->native_depth = dec_u32(d, PROF_MAX_FRAMES);
        l->stack_address = dec_u(d);
        l->code_address = dec_u(d);
    }
    s->labels = d->out->labels;
}

static void decode_marker(struct dec *d, struct prof_marker *m)
{
    uint64_t phase, payload;

    m->text = (struct prof_string){"", 0}; /* no TEXT payload: empty, never NULL */
    m->schema_id = m->field_count = 0;
    m->fields = NULL;
    m->tid = dec_i32(d);
    m->category = (uint32_t)dec_u(d);
    phase = dec_u(d);
    m->start_ns = dec_u(d);
    m->end_ns = dec_u(d);
    m->name = dec_str(d, PROF_MAX_STRING);
    payload = dec_u(d);
    if (phase > PROF_PHASE_END || payload > PROF_PAYLOAD_TYPED) {
        d->error = d->error ? d->error : -EBADMSG;
        return;
    }
    m->phase = (enum prof_marker_phase)phase;
    m->payload_kind = (enum prof_payload_kind)payload;
    if (m->payload_kind == PROF_PAYLOAD_TEXT) {
        m->text = dec_str(d, PROF_MAX_MARKER_TEXT);
    } else if (m->payload_kind == PROF_PAYLOAD_TYPED) {
        m->schema_id = (uint32_t)dec_u(d);
        m->field_count = dec_u32(d, PROF_MAX_FIELDS);
        for (uint32_t i = 0; i < m->field_count && !d->error; i++) {
            struct prof_field *f = &d->out->fields[i];
            uint8_t le[8];
            uint64_t bits = 0;

            f->kind = (enum prof_field_kind)dec_u32(d, PROF_FIELD_STRING);
            switch (f->kind) {
            case PROF_FIELD_INT:
                f->v.i = dec_i(d);
                break;
            case PROF_FIELD_UINT:
                f->v.u = dec_u(d);
                break;
            case PROF_FIELD_DOUBLE:
                if (buf_entry_reader_read(d->r, le, sizeof(le)) < 0) {
                    d->error = -EBADMSG;
                    break;
                }
                for (int k = 0; k < 8; k++)
                    bits |= (uint64_t)le[k] << (8 * k);
                memcpy(&f->v.d, &bits, sizeof(bits));
                break;
            case PROF_FIELD_STRING:
                f->v.s = dec_str(d, PROF_MAX_STRING);
                break;
            default:
                d->error = d->error ? d->error : -EBADMSG;
                break;
            }
        }
        m->fields = d->out->fields;
    }
    m->frame_count = dec_frames(d);
    m->frames = d->out->frames;
}

int prof_entry_decode(struct buf_entry_reader *reader, struct prof_entry *ret)
{
    struct dec d = {reader, ret, 0};
    uint8_t kind;

    ret->strings_used = 0;
    if (buf_entry_reader_read(reader, &kind, 1) < 0)
        return -EBADMSG;
    ret->kind = kind;
    /* Each kind zeroes only its own member: a memset of the whole union was the costliest
     * single step of decoding a marker (a microcoded string store on every entry). */
    switch (kind) {
    case BUF_ENTRY_SAMPLE:
        decode_sample(&d, &ret->u.sample);
        break;
    case BUF_ENTRY_SAME_SAMPLE:
        ret->u.sample = (struct prof_sample){.frames = ret->frames, .labels = ret->labels};
        ret->u.sample.tid = dec_i32(&d);
        ret->u.sample.time_ns = dec_u(&d);
        if (buf_entry_reader_remaining(reader) > 0)
            ret->u.sample.cpu_delta_ns = dec_u(&d);
        break;
    case BUF_ENTRY_MARKER:
        decode_marker(&d, &ret->u.marker);
        break;
    case BUF_ENTRY_COUNTER:
        ret->u.counter.counter_id = (uint32_t)dec_u(&d);
        ret->u.counter.time_ns = dec_u(&d);
        ret->u.counter.delta = dec_i(&d);
        ret->u.counter.number = dec_u(&d);
        break;
    case BUF_ENTRY_PAUSE:
    case BUF_ENTRY_RESUME:
        ret->u.pause_time_ns = dec_u(&d);
        break;
    case BUF_ENTRY_OVERHEAD:
        ret->u.overhead.time_ns = dec_u(&d);
        ret->u.overhead.locking_ns = dec_u(&d);
        ret->u.overhead.cleaning_ns = dec_u(&d);
        ret->u.overhead.counters_ns = dec_u(&d);
        ret->u.overhead.threads_ns = dec_u(&d);
        break;
    default:
        return -ENOTSUP;
    }
    return d.error;
}

int prof_entry_decode_sample_head(const struct buf_entry_reader *reader, struct prof_sample *ret,
                                  const uint8_t **ret_stack_bytes, size_t *ret_len)
{
    struct buf_entry_reader r = *reader;
    struct dec d = {&r, NULL, 0}; /* out stays unused: the head has no strings or frames */
    struct prof_sample s = {0};
    uint8_t kind;

    if (buf_entry_reader_read(&r, &kind, 1) < 0)
        return -EBADMSG;
    if (kind != BUF_ENTRY_SAMPLE)
        return -ENOTSUP;
    s.tid = dec_i32(&d);
    s.time_ns = dec_u(&d);
    s.cpu_delta_ns = dec_u(&d);
    s.flags = (uint32_t)dec_u(&d);
    if (d.error)
        return d.error;
    if (r.len[1] > 0 || r.pos >= r.len[0])
        return -EAGAIN;
    *ret = s;
    *ret_stack_bytes = r.span[0] + r.pos;
    *ret_len = r.len[0] - r.pos;
    return 0;
}
