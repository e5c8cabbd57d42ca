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

/* ipc_frame_encode() for a caller that already has packed, the envelope's packed size (its
 * get_packed_size walks the whole message: once per frame is enough). */
ssize_t ipc__frame_encode_packed(const Fleetprof__Envelope *env, size_t packed, uint8_t *out,
                                 size_t out_len);

#endif /* FLEETPROF_IPC_IPC_INTERNAL_H */
