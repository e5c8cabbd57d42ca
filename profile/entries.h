/* profile/entries.h - payloads of buffer entries: the contract between the runtime,
 * which writes them, and the profile writer (and the daemon), which read them.
 *
 * Every block starts with its kind byte (buffer/entry.h); integers are ULEB128 (signed
 * ones zig-zag encoded), times CLOCK_MONOTONIC ns, strings ULEB128 length + bytes (no NUL,
 * truncated to PROF_MAX_STRING bytes). Decoders check every length against the block and
 * fail with -EBADMSG, so a damaged block is skipped, never trusted.
 *
 *   SAMPLE       tid, time_ns, cpu_delta_ns, flags, nframes, frame*, nlabels,
 *                (name, category, native_depth, stack_address, code_address)*
 *                                                        frames innermost first,
 *                                                        labels outermost first
 *   SAME_SAMPLE  tid, time_ns[, cpu_delta_ns]            repeat the thread's last stack
 *                                                        (cpu_delta_ns absent: 0, it did
 *                                                        not run)
 *   MARKER       tid, category, phase, start_ns, end_ns, name, payload_kind, payload,
 *                nframes, frame*                         (a captured stack, may be 0)
 *   COUNTER      counter_id, time_ns, delta (signed), number
 *   PAUSE/RESUME time_ns
 *   OVERHEAD     time_ns, locking_ns, cleaning_ns, counters_ns, threads_ns
 *
 * Marker payloads: NONE; TEXT (one string); TYPED (schema_id, nfields,
 * (field_kind, value)*) with int64 / uint64 / double (8 bytes, little-endian IEEE) /
 * string values, in the order the schema declares its fields.
 */
#ifndef FLEETPROF_PROFILE_ENTRIES_H
#define FLEETPROF_PROFILE_ENTRIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buffer/chunk.h"
#include "buffer/chunked-buffer.h"
#include "buffer/entry.h"

#define PROF_MAX_FRAMES      256
#define PROF_MAX_LABELS      32
#define PROF_MAX_STRING      1024 /* marker names, string fields */
#define PROF_MAX_LABEL_NAME  256
#define PROF_MAX_FIELDS      16
#define PROF_MAX_MARKER_TEXT 4096

/* Sample flags. */
#define PROF_SAMPLE_TRUNCATED           (1u << 0) /* the walk stopped at PROF_MAX_FRAMES */
#define PROF_SAMPLE_NO_NATIVE           (1u << 1) /* unwinding was unsafe (loader lock held) */
#define PROF_SAMPLE_UNWIND_FAIL         (1u << 2) /* the unwinder gave up before the root */
/* No frames, and why: the thread has been blocked since it was registered, so no stack of
 * it was ever captured (a signal would interrupt its blocking call). */
#define PROF_SAMPLE_BLOCKED_SINCE_START (1u << 3)
/* No frames: the thread ended before the sampling signal sent to it ran, and no stack of it
 * was captured before. */
#define PROF_SAMPLE_ENDED_UNSAMPLED     (1u << 4)
/* No frames: the kernel gave the thread no CPU timer (profilingLog says why). */
#define PROF_SAMPLE_NO_TIMER            (1u << 5)
/* No frames: the thread blocked the sampling signal while it ran. */
#define PROF_SAMPLE_SIGNAL_BLOCKED      (1u << 6)
/* No frames: the thread ran less than one sampling period in all (its CPU is here). */
#define PROF_SAMPLE_BELOW_PERIOD        (1u << 7)
/* No frames: the CPU the thread used before the profiler started in this image (the exec,
 * the dynamic loader, the runtime's start), charged to the image's first sample. */
#define PROF_SAMPLE_BEFORE_START        (1u << 8)

enum prof_marker_phase {
    PROF_PHASE_INSTANT = 0,
    PROF_PHASE_INTERVAL = 1,
    PROF_PHASE_START = 2,
    PROF_PHASE_END = 3,
};

enum prof_payload_kind {
    PROF_PAYLOAD_NONE = 0,
    PROF_PAYLOAD_TEXT = 1,
    PROF_PAYLOAD_TYPED = 2,
};

enum prof_field_kind {
    PROF_FIELD_INT = 1,    /* int64 */
    PROF_FIELD_UINT = 2,   /* uint64 */
    PROF_FIELD_DOUBLE = 3, /* double */
    PROF_FIELD_STRING = 4, /* string */
};

struct prof_string {
    const char *data; /* borrowed; not NUL-terminated when decoded */
    size_t len;
};

/* Labels are merged into native stacks under the frame of the function that pushed
 * them: native_depth counts native frames from the root down to and including that
 * frame (the sampler finds it with the unwinder's procedure ranges); 0 = not found, the
 * label then goes on top of the native frames. code_address (a return address inside
 * that function) and stack_address (stack pointer at the push) are kept for readers that
 * want to redo the merge. */
struct prof_label {
    struct prof_string name;
    uint32_t category;
    uint32_t native_depth;
    uint64_t stack_address;
    uint64_t code_address;
};

struct prof_sample {
    int32_t tid;
    uint64_t time_ns;
    uint64_t cpu_delta_ns;
    uint32_t flags;
    uint32_t frame_count;
    uint32_t label_count;
    const uint64_t *frames;          /* borrowed */
    const struct prof_label *labels; /* borrowed */
};

struct prof_field {
    enum prof_field_kind kind;
    union {
        int64_t i;
        uint64_t u;
        double d;
        struct prof_string s;
    } v;
};

struct prof_marker {
    int32_t tid;
    uint32_t category;
    enum prof_marker_phase phase;
    uint64_t start_ns; /* 0 for PROF_PHASE_END */
    uint64_t end_ns;   /* 0 for PROF_PHASE_INSTANT and PROF_PHASE_START */
    struct prof_string name;
    enum prof_payload_kind payload_kind;
    struct prof_string text; /* PROF_PAYLOAD_TEXT */
    uint32_t schema_id;      /* PROF_PAYLOAD_TYPED */
    uint32_t field_count;
    const struct prof_field *fields; /* borrowed */
    uint32_t frame_count;
    const uint64_t *frames; /* borrowed; innermost first */
};

struct prof_counter_sample {
    uint32_t counter_id;
    uint64_t time_ns;
    int64_t delta;
    uint64_t number;
};

struct prof_overhead {
    uint64_t time_ns;
    uint64_t locking_ns;
    uint64_t cleaning_ns;
    uint64_t counters_ns;
    uint64_t threads_ns;
};

/* Writers: each puts one entry into the buffer (thread-safe, not async-signal-safe).
 * Strings longer than PROF_MAX_STRING (label names: PROF_MAX_LABEL_NAME, marker text:
 * PROF_MAX_MARKER_TEXT) are truncated (at a byte; the JSON writer repairs split UTF-8),
 * frames beyond PROF_MAX_FRAMES dropped. Return 0 or the buffer's negative errno. */
int prof_entry_put_sample(struct buf_chunked_buffer *b, const struct prof_sample *s);
int prof_entry_put_same_sample(struct buf_chunked_buffer *b, int32_t tid, uint64_t time_ns);
/* The same stack again, with the CPU the thread used since its previous entry (a sample
 * that stands for several intervals is written as one sample and same-samples). */
int prof_entry_put_same_sample_cpu(struct buf_chunked_buffer *b, int32_t tid, uint64_t time_ns,
                                   uint64_t cpu_delta_ns);
int prof_entry_put_marker(struct buf_chunked_buffer *b, const struct prof_marker *m);
int prof_entry_put_counter(struct buf_chunked_buffer *b, const struct prof_counter_sample *c);
int prof_entry_put_pause(struct buf_chunked_buffer *b, bool paused, uint64_t time_ns);
int prof_entry_put_overhead(struct buf_chunked_buffer *b, const struct prof_overhead *o);

/* A decoded entry. Borrowed pointers point into the block (valid during the read callback)
 * or into this struct's arrays. */
struct prof_entry {
    uint8_t kind; /* enum buf_entry_kind */
    union {
        struct prof_sample sample; /* SAMPLE, SAME_SAMPLE (no frames, no labels) */
        struct prof_marker marker;
        struct prof_counter_sample counter;
        uint64_t pause_time_ns; /* PAUSE, RESUME */
        struct prof_overhead overhead;
    } u;
    /* Storage the decoder fills. Strings are borrowed from the block, or copied here when
     * they straddle two chunks, so every decoded string is contiguous. */
    uint64_t frames[PROF_MAX_FRAMES];
    struct prof_label labels[PROF_MAX_LABELS];
    struct prof_field fields[PROF_MAX_FIELDS];
    uint8_t strings[PROF_MAX_LABELS * PROF_MAX_LABEL_NAME + PROF_MAX_MARKER_TEXT + PROF_MAX_STRING +
                    PROF_MAX_FIELDS * PROF_MAX_STRING];
    size_t strings_used;
};

/* Decodes the block under reader into *ret. Returns 0; -EBADMSG for a malformed or
 * truncated block or an over-long field; -ENOTSUP for a kind this version does not know
 * (skip it). Unknown trailing bytes are allowed (newer writers may append fields). */
int prof_entry_decode(struct buf_entry_reader *reader, struct prof_entry *ret);

/* Whether the block under reader (nothing read yet) looks like a sample entry: an inline
 * test of its kind byte, so that other entries (markers above all) pay no call for
 * prof_entry_decode_sample_head(). False when the kind byte is not in the first span. */
static inline bool prof_entry_may_be_sample(const struct buf_entry_reader *r)
{
    return r->pos < r->len[0] && r->span[0][r->pos] == BUF_ENTRY_SAMPLE;
}

/* For a sample entry (kind SAMPLE): decodes its head (tid, time_ns, cpu_delta_ns, flags)
 * into *ret, whose frames and labels it leaves empty, and points *ret_stack_bytes at the
 * rest of the block: the encoded frames and labels, then any trailing bytes. Two samples
 * with the same such bytes decode to the same frames and labels, so a reader may recognize
 * a stack without decoding it. The bytes are borrowed from the block (valid during the read
 * callback); the reader is not moved. Returns 0; -EAGAIN when the rest is not contiguous (the
 * block straddles two chunks); -ENOTSUP for another kind; -EBADMSG for a damaged head. */
int prof_entry_decode_sample_head(const struct buf_entry_reader *reader, struct prof_sample *ret,
                                  const uint8_t **ret_stack_bytes, size_t *ret_len);

#endif /* FLEETPROF_PROFILE_ENTRIES_H */
