/* child/base/log.h - the runtime's messages on stderr (log.c). The lowest layer of the runtime:
 * it calls nothing of the runtime's, and every file of it may call it.
 */
#ifndef FLEETPROF_CHILD_BASE_LOG_H
#define FLEETPROF_CHILD_BASE_LOG_H

#include <stdbool.h>

/* Whether rt_debug() prints (FLEETPROF_DEBUG=1). */
void rt_log_set_debug(bool on);
/* Printed when FLEETPROF_DEBUG is set (one line on stderr). */
void rt_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Always printed (one line on stderr): a profile the user asked for was lost. */
void rt_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* FLEETPROF_CHILD_BASE_LOG_H */
