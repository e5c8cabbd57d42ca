/* common/paths.h - where fleetprofd listens unless told otherwise (daemon and CLI agree).
 *
 * Header-only, libc only.
 */
#ifndef FLEETPROF_COMMON_PATHS_H
#define FLEETPROF_COMMON_PATHS_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* $XDG_RUNTIME_DIR/fleetprof.sock, else /tmp/fleetprof-UID/fleetprof.sock. Returns 0 or
 * -ENAMETOOLONG. */
static inline int fleetprof_default_socket(char *out, size_t size)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n;

    if (xdg && *xdg)
        n = snprintf(out, size, "%s/fleetprof.sock", xdg);
    else
        n = snprintf(out, size, "/tmp/fleetprof-%u/fleetprof.sock", (unsigned)getuid());
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

#endif /* FLEETPROF_COMMON_PATHS_H */
