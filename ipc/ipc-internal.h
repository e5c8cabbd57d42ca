/* ipc/ipc-internal.h - shared between the files of ipc/ only (and its unit tests). */
#ifndef FLEETPROF_IPC_IPC_INTERNAL_H
#define FLEETPROF_IPC_IPC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/fleetprof-protocol.h"

/* protobuf-c may allocate up to this many times the frame size while decoding one envelope:
 * a 2-byte empty submessage becomes a pointer plus a struct of several dozen bytes, so
 * hostile input can amplify; legitimate messages stay well below. */
#define IPC_DECODE_BUDGET_FACTOR 16

/* Checks that the len bytes at p are valid UTF-8 without NUL. */
int ipc__text_valid(const uint8_t *p, size_t len);

/* The reader's decode arena (envelope.c): ipc_envelope_decode() into memory reused for every
 * frame of a connection. *arena is made on first use (NULL before; if that fails, the
 * envelope is decoded with malloc and must be freed with ipc_envelope_free(): the caller
 * tells by *arena still being NULL). Returns like ipc_envelope_decode(). An envelope from it
 * lives until ipc__arena_reset(), which the caller does once it is done with it. */
struct ipc__arena;
int ipc__envelope_decode_arena(struct ipc__arena **arena, const uint8_t *data, size_t len,
                               size_t max_decode_bytes, Fleetprof__Envelope **ret_env,
                               const char **ret_reason);
void ipc__arena_reset(struct ipc__arena *a);
/* Accepts NULL; returns NULL. */
struct ipc__arena *ipc__arena_free(struct ipc__arena *a);

/* ipc_frame_encode() for a caller that already has packed, the envelope's packed size (its
 * get_packed_size walks the whole message: once per frame is enough). */
ssize_t ipc__frame_encode_packed(const Fleetprof__Envelope *env, size_t packed, uint8_t *out,
                                 size_t out_len);

#endif /* FLEETPROF_IPC_IPC_INTERNAL_H */
