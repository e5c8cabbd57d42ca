/* child/base/log.c - the runtime's two kinds of message on stderr (FLEETPROF_DEBUG's, and the
 * warnings that are always printed). The lowest layer: every file of the runtime may call it.
 */
#include "child/base/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

static bool debug_on; /* FLEETPROF_DEBUG=1, read once by the configuration */

void rt_log_set_debug(bool on)
{
    debug_on = on;
}

void rt_debug(const char *fmt, ...)
{
    va_list ap;

    if (!debug_on)
        return;
    fprintf(stderr, "fleetprof[%d]: ", (int)getpid());
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void rt_warn(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    int n = snprintf(line, sizeof(line), "fleetprof[%d]: ", (int)getpid()), m;

    /* One write(2), not stdio: the program may hold stderr's lock, or have its own
     * buffering on it, when this runs at exit. */
    va_start(ap, fmt);
    m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    n += m > 0 ? m : 0;
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    if (write(STDERR_FILENO, line, (size_t)n) < 0)
        return; /* nowhere to say it */
}
