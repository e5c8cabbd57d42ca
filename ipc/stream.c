/* ipc/stream.c - cutting a large payload (a profile JSON text) into ProfileData pieces. */
#include <string.h>

#include "common/macros.h"
#include "ipc/ipc.h"

void ipc_profile_stream_init(struct ipc_profile_stream *s, uint64_t request_id, const void *data,
                             size_t len, size_t piece_bytes, bool exit_profile, const char *error)
{
    s->data = data;
    s->len = data ? len : 0;
    s->off = 0;
    s->piece_bytes = piece_bytes == 0 || piece_bytes > IPC_PROFILE_PIECE_MAX_BYTES
                             ? IPC_PROFILE_PIECE_MAX_BYTES
                             : piece_bytes;
    s->request_id = request_id;
    s->error = error;
    s->exit_profile = exit_profile;
    s->done = false;
}

int ipc_profile_stream_next(struct ipc_profile_stream *s, Fleetprof__Envelope *env,
                            Fleetprof__ProfileData *piece)
{
    size_t n;

    if (s->done)
        return 0;
    n = MIN(s->piece_bytes, s->len - s->off);
    fleetprof__envelope__init(env);
    fleetprof__profile_data__init(piece);
    piece->request_id = s->request_id;
    /* protobuf-c's fields are not const, but packing never writes through them. */
    piece->data.data = s->data ? (uint8_t *)(s->data + s->off) : NULL;
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

bool ipc_profile_stream_done(const struct ipc_profile_stream *s)
{
    return s->done;
}
