/* ipc/stream.c - cutting a large payload (a profile JSON text) into ProfileData pieces. */
#include <string.h>

#include "common/macros.h"
#include "ipc/ipc.h"

void ipc_profile_stream_init_spans(struct ipc_profile_stream *s, uint64_t request_id,
                                   const struct ipc_span *spans, size_t span_count,
                                   size_t piece_bytes, bool exit_profile, const char *error)
{
    s->spans = spans;
    s->span_count = spans ? span_count : 0;
    s->span = s->span_off = 0;
    s->len = 0;
    for (size_t i = 0; i < s->span_count; i++)
        s->len += spans[i].data ? spans[i].len : 0;
    s->off = 0;
    s->piece_bytes = piece_bytes == 0 || piece_bytes > IPC_PROFILE_PIECE_MAX_BYTES
                             ? IPC_PROFILE_PIECE_MAX_BYTES
                             : piece_bytes;
    s->request_id = request_id;
    s->error = error;
    s->exit_profile = exit_profile;
    s->done = false;
}

void ipc_profile_stream_init(struct ipc_profile_stream *s, uint64_t request_id, const void *data,
                             size_t len, size_t piece_bytes, bool exit_profile, const char *error)
{
    s->one = (struct ipc_span){data, data ? len : 0};
    ipc_profile_stream_init_spans(s, request_id, &s->one, 1, piece_bytes, exit_profile, error);
}

int ipc_profile_stream_next_slices(struct ipc_profile_stream *s, Fleetprof__Envelope *env,
                                   Fleetprof__ProfileData *piece, struct ipc_span *slices,
                                   size_t max_slices, size_t *ret_slice_count)
{
    size_t n = 0, count = 0;

    if (s->done)
        return 0;
    /* Gather up to piece_bytes from whole or partial spans; empty spans are skipped. */
    while (n < s->piece_bytes && count < max_slices && s->span < s->span_count) {
        const struct ipc_span *span = &s->spans[s->span];
        size_t avail = span->data ? span->len - s->span_off : 0;
        size_t take = MIN(avail, s->piece_bytes - n);

        if (take > 0) {
            slices[count++] = (struct ipc_span){(const uint8_t *)span->data + s->span_off, take};
            n += take;
            s->span_off += take;
        }
        if (s->span_off == (span->data ? span->len : 0)) {
            s->span++;
            s->span_off = 0;
        }
    }
    *ret_slice_count = count;
    fleetprof__envelope__init(env);
    fleetprof__profile_data__init(piece);
    piece->request_id = s->request_id;
    /* protobuf-c's fields are not const, but packing never writes through them. */
    piece->data.data = count ? (uint8_t *)slices[0].data : NULL;
    piece->data.len = n;
    piece->offset = s->off;
    piece->total = s->len;
    piece->exit = s->exit_profile;
    s->off += n;
    if (s->off == s->len) {
        piece->last = true;
        if (s->error && s->error[0])
            piece->error = (char *)s->error;
        s->done = true;
    }
    env->msg_case = FLEETPROF__ENVELOPE__MSG_PROFILE_DATA;
    env->profile_data = piece;
    return 1;
}

int ipc_profile_stream_next(struct ipc_profile_stream *s, Fleetprof__Envelope *env,
                            Fleetprof__ProfileData *piece)
{
    struct ipc_span slice;
    size_t count;

    /* One slice: the piece's bytes are contiguous at piece->data. */
    return ipc_profile_stream_next_slices(s, env, piece, &slice, 1, &count);
}

bool ipc_profile_stream_done(const struct ipc_profile_stream *s)
{
    return s->done;
}
