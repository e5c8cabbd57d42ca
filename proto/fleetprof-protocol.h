/* proto/fleetprof-protocol.h - the protocol version and the generated message types.
 *
 * The version lives in fleetprof.proto (enum ProtocolVersion) so there is one source of
 * truth; Hello and Welcome carry it and a mismatch is answered with Refuse. Include this
 * header rather than the generated one: "proto/fleetprof-protocol.h".
 */
#ifndef FLEETPROF_PROTO_FLEETPROF_PROTOCOL_H
#define FLEETPROF_PROTO_FLEETPROF_PROTOCOL_H

#include "fleetprof.pb-c.h"

#define FLEETPROF_PROTOCOL_VERSION ((uint32_t)FLEETPROF__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT)

#endif /* FLEETPROF_PROTO_FLEETPROF_PROTOCOL_H */
