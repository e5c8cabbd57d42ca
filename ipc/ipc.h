/* ipc/ipc.h - the sans-I/O half of the wire: frame codec, envelope validation, streaming.
 *
 * Bytes in, messages out, and back; no sockets, no libuv, no threads, no printing. The
 * daemon, the child runtime's IPC thread and the CLI all use it through the uv transport
 * (ipc/uv-ipc.h); fuzzers drive it directly. Everything that comes from a peer is hostile:
 * every length is bounded before anything is allocated. Format: docs/wire-protocol.md.
 *
 * Thread-safety: none of the objects here are shared; use each from one thread at a time.
 */
#ifndef FLEETPROF_IPC_IPC_H
#define FLEETPROF_IPC_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/fleetprof-protocol.h"

/* A frame on the wire (both directions, every connection):
 *
 *   +--------------------------+----------------------------------------------+
 *   | length: ULEB128, 1..10 B | Envelope: `length` bytes of protobuf         |
 *   +--------------------------+----------------------------------------------+
 *
 * `length` counts the Envelope bytes only; 1 <= length <= max_frame_bytes (4 MiB by
 * default). A length of 0 (an empty Envelope) is an error, as is an Envelope whose oneof is
 * unset or unknown. Frames follow each other with no padding. Compatibility: the framing
 * never changes; message evolution follows protobuf rules (fleetprof.proto).
 */
#define IPC_FRAME_MAX_BYTES_DEFAULT ((size_t)4 << 20)
/* Largest ProfileData.data piece a sender may use and a receiver accepts. */
#define IPC_PROFILE_PIECE_MAX_BYTES ((size_t)1 << 20)
/* Longest length prefix: a u64 in ULEB128. */
#define IPC_FRAME_PREFIX_MAX_BYTES  10

/* Bounds ipc_envelope_validate() enforces on data from a peer. */
#define IPC_NAME_MAX_BYTES     256       /* process names */
#define IPC_TEXT_MAX_BYTES     4096      /* reasons, errors, locations, paths, feature names */
#define IPC_ARG_MAX_BYTES      65536     /* one argv entry */
#define IPC_ARGV_MAX           8192      /* argv entries */
#define IPC_SYMBOL_MAX_BYTES   4096      /* one symbol name or file name */
#define IPC_REPEATED_MAX       (1 << 20) /* any other repeated field */
#define IPC_MODULES_MAX        65536     /* Symbolize.modules */
#define IPC_SPAWNED_MAX        256       /* Spawned.pids */
#define IPC_BUILD_ID_MAX_BYTES 64
#define IPC_PROPORTION_ONE     ((uint32_t)1 << 31)
#define IPC_PROPORTION_INVALID UINT32_MAX

/* ---- envelopes ------------------------------------------------------------------------- */

/* Checks the semantic sanity of an envelope that came from another process: the oneof is
 * set to a known message, request ids are nonzero where they must be, strings are bounded
 * (their bytes are checked for NUL and UTF-8 by ipc_envelope_decode()), repeated fields are
 * bounded and consistent, a ProfileData piece is at most 1 MiB, a proportion is in
 * [0, 1<<31] or the invalid marker, enums are known values. Does not check protocol state
 * (which request is outstanding): that is the caller's job.
 * Returns 0, -ENOMSG (no known message in the envelope) or -EBADMSG; on failure stores a
 * short static reason in *ret_reason when ret_reason is not NULL. */
int ipc_envelope_validate(const Fleetprof__Envelope *env, const char **ret_reason);

/* Unpacks len bytes (one Envelope, no length prefix) and validates it. Decoding memory is
 * bounded by max_decode_bytes (0 = 16 times IPC_FRAME_MAX_BYTES_DEFAULT), so a small hostile
 * message cannot make protobuf-c allocate without bound. Strings are checked at the wire
 * level to be NUL-free and valid UTF-8 (protobuf-c would silently truncate at a NUL).
 * On success stores the envelope in *ret_env (caller owns it: ipc_envelope_free()).
 * Returns 0, -ENOMSG, -EBADMSG (undecodable or invalid) or -ENOMEM; sets *ret_reason (static
 * string) on failure when not NULL. */
int ipc_envelope_decode(const uint8_t *data, size_t len, size_t max_decode_bytes,
                        Fleetprof__Envelope **ret_env, const char **ret_reason);

/* Frees an envelope from ipc_envelope_decode(). Accepts NULL; returns NULL. */
Fleetprof__Envelope *ipc_envelope_free(Fleetprof__Envelope *env);

/* The message's field name in the oneof ("hello", "profile_data", ...), or "unset" /
 * "unknown". Static string; for logs. */
const char *ipc_msg_name(Fleetprof__Envelope__MsgCase msg_case);

/* Compares a peer's protocol version with ours. Returns 0 when they match; otherwise
 * -EPROTONOSUPPORT and writes a clear reason ("peer speaks protocol version 7, this side
 * speaks 1; ...") into reason (always NUL-terminated when reason_len > 0). */
int ipc_version_check(uint32_t peer_version, char *reason, size_t reason_len);

/* ---- encoding -------------------------------------------------------------------------- */

/* Bytes ipc_frame_encode() writes for env: length prefix plus packed envelope. env must
 * have its oneof set (with a non-NULL message). */
size_t ipc_frame_size(const Fleetprof__Envelope *env);

/* Encodes env as one frame into out (out_len bytes, caller-provided). Returns the bytes
 * written, -EINVAL (oneof unset), or -ENOBUFS when out_len < ipc_frame_size(env) (nothing
 * written). The size limit of the receiving side is the caller's to enforce. */
ssize_t ipc_frame_encode(const Fleetprof__Envelope *env, uint8_t *out, size_t out_len);

/* The zero-copy form of ipc_frame_encode() for an Envelope that holds only the ProfileData
 * piece: encodes the frame up to, not including, the piece's data bytes, which the caller
 * sends right after it (the data field is encoded last: protobuf accepts fields in any
 * order, so the frame decodes like ipc_frame_encode()'s). With out NULL only computes the
 * sizes. Stores the whole frame's size (header and data) in *ret_frame_bytes. Returns the
 * header bytes (written when out is not NULL), -EINVAL (piece NULL, or data.len > 0 with
 * data NULL), or -ENOBUFS when out_len is smaller than the header (nothing written). */
ssize_t ipc_frame_encode_profile_header(const Fleetprof__ProfileData *piece, uint8_t *out,
                                        size_t out_len, size_t *ret_frame_bytes);

/* A small free list of equally sized buffers, for encoding frames without a malloc per
 * message. Requests larger than buf_bytes fall through to malloc. Embed it; one thread. */
struct ipc_pool {
    /* private */
    void **free_bufs;  /* owned: cached buffers of buf_bytes each */
    size_t n_free;     /* entries used in free_bufs */
    size_t max_cached; /* capacity of free_bufs */
    size_t buf_bytes;  /* size of a pooled buffer */
};

/* Returns 0 or -ENOMEM. */
int ipc_pool_init(struct ipc_pool *pool, size_t buf_bytes, size_t max_cached);
void ipc_pool_done(struct ipc_pool *pool);
/* Returns a buffer of at least bytes (caller owns it until ipc_pool_put()), NULL if out of
 * memory. */
void *ipc_pool_get(struct ipc_pool *pool, size_t bytes);
/* Gives back a buffer from ipc_pool_get() with the same bytes. Accepts NULL. */
void ipc_pool_put(struct ipc_pool *pool, void *buf, size_t bytes);

/* ---- decoding: frame reassembly -------------------------------------------------------- */

/* Called once per complete, decoded and validated envelope. env is borrowed: the reader
 * frees it when the callback returns (copy what you keep). Return 0 to go on, or a negative
 * errno to stop feeding; the reader then latches that error. */
typedef int (*ipc_envelope_cb)(void *userdata, const Fleetprof__Envelope *env);

/* Reassembles frames from a byte stream delivered in pieces of any size: one byte at a
 * time, or many frames at once. Embed it; _init/_done. Memory held is bounded by the bytes
 * of the one frame in progress (grown as they arrive, never beyond max_frame_bytes) plus
 * the decode budget while a frame is decoded. The first error latches: later feeds return
 * it again. */
struct ipc__arena; /* ipc/envelope.c */
struct ipc_piece_cbs;

struct ipc_reader {
    /* private */
    uint64_t len_value;       /* length prefix accumulated so far */
    unsigned len_shift;       /* bits of the prefix consumed (7 per byte) */
    bool in_frame;            /* length known, reading the envelope bytes */
    size_t frame_len;         /* envelope bytes of the frame in progress */
    size_t have;              /* envelope bytes buffered */
    size_t cap;               /* bytes allocated at frame */
    uint8_t *frame;           /* owned, cap bytes; NULL between frames */
    size_t max_frame_bytes;   /* limit on frame_len */
    size_t max_decode_bytes;  /* protobuf-c allocation budget per envelope */
    uint64_t frames;          /* envelopes delivered so far */
    struct ipc__arena *arena; /* owned: decode memory reused for every frame, or NULL */
    int error;                /* first error, 0 if none */
    const char *reason;       /* static description of error */
    const struct ipc_piece_cbs *piece_cbs; /* borrowed, or NULL: no piece is streamed */
    uint8_t piece_state;                   /* IPC__PIECE_*, frame.c */
    size_t piece_left;                     /* data bytes still to come while streaming */
};

/* A large ProfileData frame whose data is its last field can be taken as it arrives instead
 * of whole: begin is given the envelope without the data (profile_data->data.len is the
 * length of the data to come, data.data is NULL), decoded and validated as the whole one
 * would be. It returns 1 to take the data, 0 to receive the frame whole through the
 * envelope callback as usual, or a negative errno to stop. Taken, the data comes to bytes in
 * order, in runs of any size (borrowed for the call), then end is called once; bytes and end
 * return 0 or a negative errno to stop (latched). The data is never held by the reader. */
struct ipc_piece_cbs {
    int (*begin)(void *userdata, const Fleetprof__Envelope *env);
    int (*bytes)(void *userdata, const uint8_t *data, size_t len);
    int (*end)(void *userdata);
};

/* max_frame_bytes 0 means IPC_FRAME_MAX_BYTES_DEFAULT; the decode budget is 16 times the
 * frame limit. */
void ipc_reader_init(struct ipc_reader *r, size_t max_frame_bytes);
/* Releases the frame in progress. The reader may be re-initialised afterwards. */
void ipc_reader_done(struct ipc_reader *r);

/* Consumes len bytes, calling cb for each envelope completed by them, in order.
 * Returns the number of envelopes delivered by this call (>= 0), or a negative errno:
 *   -EPROTO    malformed length prefix (more than 10 bytes or over 64 bits)
 *   -EMSGSIZE  length > max_frame_bytes (detected before the frame is buffered)
 *   -ENOMSG    zero-length frame, or an envelope with no known message
 *   -EBADMSG   undecodable envelope, or one that fails ipc_envelope_validate()
 *   -ENOMEM    out of memory
 *   or the negative value cb returned.
 * After an error nothing more is consumed or delivered; ipc_reader_reason() explains it. */
ssize_t ipc_reader_feed(struct ipc_reader *r, const uint8_t *data, size_t len, ipc_envelope_cb cb,
                        void *userdata);

/* For transports, to read a large frame without a copy: returns how many bytes may be read
 * into *ret_buf, a region inside the frame in progress (0, and *ret_buf untouched, between
 * frames or after an error: then read into your own buffer and use ipc_reader_feed()). The
 * region grows with the bytes received, never beyond the frame, so a peer that announces a
 * large frame and sends little still holds little. -ENOMEM if growing failed (latched). */
ssize_t ipc_reader_direct_buf(struct ipc_reader *r, uint8_t **ret_buf);

/* Accounts n bytes read into the region from ipc_reader_direct_buf() (n <= its size), and
 * delivers the frame if it is complete. Returns like ipc_reader_feed(). */
ssize_t ipc_reader_commit(struct ipc_reader *r, size_t n, ipc_envelope_cb cb, void *userdata);

/* Streams the data of large ProfileData frames through cbs (borrowed; NULL: never), given
 * the userdata of ipc_reader_feed(). Set it between frames. */
void ipc_reader_set_piece_cbs(struct ipc_reader *r, const struct ipc_piece_cbs *cbs);

/* Call at end of stream. Returns 0 when the stream ended between frames, the latched error
 * if any, or -ENODATA when it ended inside a frame (truncated frame). */
int ipc_reader_end(struct ipc_reader *r);

/* Static description of the latched error ("" when none). */
const char *ipc_reader_reason(const struct ipc_reader *r);

/* Bytes of a partial frame held (prefix bytes are not counted). */
size_t ipc_reader_pending_bytes(const struct ipc_reader *r);

/* ---- streaming a large payload as ProfileData pieces ----------------------------------- */

/* One run of a payload's bytes. A payload may be several (a memory writer's chunks). */
struct ipc_span {
    const void *data;
    size_t len;
};

/* Pieces of a payload of several spans can span several of them: at most this many. */
#define IPC_PIECE_MAX_SLICES 32

/* Cuts a byte payload (a profile JSON text) into ProfileData pieces of at most piece_bytes,
 * the last flagged `last`; each piece carries the payload's total size. The payload (and
 * its span array) is borrowed until the last piece is encoded. An empty payload gives one
 * empty piece with last set. _init then _next until it returns 0. */
struct ipc_profile_stream {
    /* private */
    const struct ipc_span *spans; /* borrowed, or &one */
    size_t span_count;
    struct ipc_span one;   /* the payload of ipc_profile_stream_init() */
    size_t span, span_off; /* the next byte: spans[span], at span_off */
    size_t len;            /* payload bytes */
    size_t off;            /* bytes already cut into pieces */
    size_t piece_bytes;    /* max bytes per piece */
    uint64_t request_id;   /* id of the GatherProfile, or the exit stream's own id */
    const char *error;     /* borrowed; non-NULL/non-empty: sent in the last piece */
    bool exit_profile;     /* sets ProfileData.exit */
    bool done;             /* the last piece was produced */
};

/* piece_bytes 0 or > IPC_PROFILE_PIECE_MAX_BYTES means IPC_PROFILE_PIECE_MAX_BYTES. error may
 * be NULL; when set it must outlive the stream. */
void ipc_profile_stream_init(struct ipc_profile_stream *s, uint64_t request_id, const void *data,
                             size_t len, size_t piece_bytes, bool exit_profile, const char *error);
/* The same for a payload made of span_count spans (borrowed, like their bytes). */
void ipc_profile_stream_init_spans(struct ipc_profile_stream *s, uint64_t request_id,
                                   const struct ipc_span *spans, size_t span_count,
                                   size_t piece_bytes, bool exit_profile, const char *error);

/* Fills *env and *piece (caller-provided, overwritten) with the next piece; env->profile_data
 * points at piece, and piece->data at the payload (borrowed). Returns 1 when a piece was
 * produced, 0 when the stream is finished. */
int ipc_profile_stream_next(struct ipc_profile_stream *s, Fleetprof__Envelope *env,
                            Fleetprof__ProfileData *piece);
/* The same, where a piece may gather bytes from up to max_slices spans: they are stored in
 * slices (*ret_slice_count of them); piece->data.len is their sum and piece->data.data
 * points at the first (the bytes are not contiguous: send the slices, not data). */
int ipc_profile_stream_next_slices(struct ipc_profile_stream *s, Fleetprof__Envelope *env,
                                   Fleetprof__ProfileData *piece, struct ipc_span *slices,
                                   size_t max_slices, size_t *ret_slice_count);

/* True once the last piece was produced. */
bool ipc_profile_stream_done(const struct ipc_profile_stream *s);

#endif /* FLEETPROF_IPC_IPC_H */
