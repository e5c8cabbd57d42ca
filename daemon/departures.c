/* daemon/departures.c - who left the fleet since the last capture, and how: the processes
 * the next capture's profileGatheringLog names though it will not have them (ended without
 * an exit profile, never profiled, an exit profile dropped). At most DEPARTURES_MAX; the
 * rest are counted.
 */
#include <stdio.h>
#include <stdlib.h>

#include "daemon/core.h"
#include "daemon/daemon-internal.h"

struct departure *daemon__departure_push(struct daemon *d, int32_t pid, const char *name)
{
    struct departure *dep;

    if (d->departure_count == DEPARTURES_MAX) {
        d->departures_dropped++;
        return NULL;
    }
    if (!d->departures) {
        d->departures = calloc(DEPARTURES_MAX, sizeof(*d->departures));
        if (!d->departures) {
            d->departures_dropped++;
            return NULL;
        }
    }
    dep = &d->departures[d->departure_count++];
    *dep = (struct departure){.pid = pid, .time_ns = daemon__now_ns()};
    (void)snprintf(dep->name, sizeof(dep->name), "%s", name);
    return dep;
}

void daemon__departure_never(struct daemon *d, int32_t pid, const char *name, const char *why)
{
    struct departure *dep = daemon__departure_push(d, pid, name);

    if (dep)
        dep->never = why;
}

void daemon__departure_add(struct daemon *d, const struct conn *c, const char *recovered)
{
    struct departure *dep = daemon__departure_push(d, c->pid, c->name);

    if (dep)
        (void)snprintf(dep->recovered, sizeof(dep->recovered), "%s", recovered ? recovered : "");
    daemon__log(d, DAEMON_LOG_INFO, "child %d (%s) ended without sending an exit profile%s%s",
                (int)c->pid, c->name, recovered ? "; recovered: " : "", recovered ? recovered : "");
}
