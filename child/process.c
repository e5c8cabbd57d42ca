/* child/process.c - the profiled process's names: its command line (the profile's product),
 * its program's base name, and the title it may set over its argv. Core: read by the
 * profile writer, the region's description and the daemon client.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "child/core.h"

static char product[4096];
static char program_name[256];
static char argv0_at_start[256]; /* argv[0] as it was: a different one is a process title */

/* The command line, arguments joined by spaces, and the program's base name. */
void rt_process_read_command_line(void)
{
    ssize_t n = 0;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    const char *base;

    product[0] = '\0';
    if (fd >= 0) {
        n = read(fd, product, sizeof(product) - 1);
        (void)close(fd);
    }
    if (n <= 0) {
        (void)snprintf(product, sizeof(product), "pid %d", (int)getpid());
        n = (ssize_t)strlen(product);
    }
    product[n] = '\0';
    (void)snprintf(argv0_at_start, sizeof(argv0_at_start), "%.255s", product);
    base = strrchr(product, '/');
    (void)snprintf(program_name, sizeof(program_name), "%.255s", base ? base + 1 : product);
    for (ssize_t i = 0; i < n - 1; i++)
        if (product[i] == '\0')
            product[i] = ' ';
}

const char *rt_product(void)
{
    return product;
}

const char *rt_process_name(char *buf, size_t size)
{
    ssize_t n = 0;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);

    /* Servers name their processes by writing over their argv (postgres' "postgres:
     * checkpointer", nginx's "nginx: worker process"): what /proc shows now. */
    if (fd >= 0) {
        n = read(fd, buf, size - 1);
        (void)close(fd);
    }
    if (n <= 0)
        return program_name;
    buf[n] = '\0';
    n = (ssize_t)strlen(buf); /* the first string: the title, or argv[0] */
    while (n > 0 && buf[n - 1] == ' ')
        buf[--n] = '\0'; /* setproctitle() pads with spaces */
    if (n == 0 || strncmp(buf, argv0_at_start, sizeof(argv0_at_start) - 1) == 0)
        return program_name;
    return buf;
}

const char *rt_program_name(void)
{
    return program_name;
}
