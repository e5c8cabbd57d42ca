/* profile/symbolize-local.h - a prof_symbolizer backed by an in-process libdw cache.
 *
 * What a child without a daemon uses, and what the daemon's symbol service wraps.
 */
#ifndef FLEETPROF_PROFILE_SYMBOLIZE_LOCAL_H
#define FLEETPROF_PROFILE_SYMBOLIZE_LOCAL_H

#include "profile/gecko.h"

struct prof_symbols;

/* Returns a symbolizer resolving through symbols (borrowed: it must outlive the use). */
struct prof_symbolizer prof_symbolizer_local(struct prof_symbols *symbols);

#endif /* FLEETPROF_PROFILE_SYMBOLIZE_LOCAL_H */
