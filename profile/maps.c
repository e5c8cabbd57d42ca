/* profile/maps.c - see maps.h. */
#include "maps.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/grow.h"

#define DELETED_SUFFIX " (deleted)"

/* Reads the whole file into a NUL-terminated buffer. 0 or a negative errno. */
static int read_all(const char *file, size_t max_bytes, char **ret_text, size_t *ret_len)
{
    size_t len = 0, cap = 0;
    char *text = NULL;
    int fd = open(file, O_RDONLY | O_CLOEXEC), r = 0;

    if (fd < 0)
        return -errno;
    for (;;) {
        /* At least 4 KiB free for each read (and the NUL); 16 KiB at first, where most maps
         * files fit. */
        size_t need = len + 4096 > 16384 ? len + 4096 : 16384;
        ssize_t n;

        if (FLEETPROF_GROW(text, cap, need) < 0) {
            r = -ENOMEM;
            break;
        }
        n = read(fd, text + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r = -errno;
            break;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > max_bytes) {
            r = -EFBIG;
            break;
        }
    }
    (void)close(fd);
    if (r < 0) {
        free(text);
        return r;
    }
    text[len] = '\0';
    *ret_text = text;
    *ret_len = len;
    return 0;
}

/* Parses one line, cut at its end; false if it is not a maps line. The path is whatever
 * follows the inode and its padding, so it may contain spaces. */
static bool parse_line(char *line, struct prof_map *m)
{
    char *p = line, *perms, *end;
    size_t len;

    m->start = strtoull(p, &p, 16);
    if (*p != '-')
        return false;
    m->end = strtoull(p + 1, &p, 16);
    if (*p != ' ' || m->end <= m->start)
        return false;
    perms = p + 1;
    p = strchr(perms, ' ');
    if (!p || p - perms < 3)
        return false;
    m->exec = perms[2] == 'x';
    m->offset = strtoull(p + 1, &p, 16);
    if (*p != ' ')
        return false;
    p = strchr(p + 1, ' '); /* past major:minor */
    if (!p)
        return false;
    m->inode = strtoull(p + 1, &end, 10);
    if (end == p + 1)
        return false;
    while (*end == ' ')
        end++;
    len = strlen(end);
    m->deleted = len > strlen(DELETED_SUFFIX) && end[0] == '/' &&
                 strcmp(end + len - strlen(DELETED_SUFFIX), DELETED_SUFFIX) == 0;
    if (m->deleted)
        end[len - strlen(DELETED_SUFFIX)] = '\0';
    m->path = end;
    return true;
}

int prof_maps_parse(char *text, size_t len, struct prof_maps *ret_maps)
{
    struct prof_maps m = {.text = text};
    size_t lines = 0;

    *ret_maps = (struct prof_maps){0};
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    m.map = calloc(lines + 1, sizeof(*m.map));
    if (!m.map) {
        free(text);
        return -ENOMEM;
    }
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (parse_line(line, &m.map[m.count]))
            m.count++;
    }
    *ret_maps = m;
    return 0;
}

int prof_maps_read(pid_t pid, size_t max_bytes, struct prof_maps *ret_maps)
{
    char file[64], *text = NULL;
    size_t len = 0;
    int r;

    *ret_maps = (struct prof_maps){0};
    if (pid == 0)
        (void)snprintf(file, sizeof(file), "/proc/self/maps");
    else
        (void)snprintf(file, sizeof(file), "/proc/%d/maps", (int)pid);
    r = read_all(file, max_bytes, &text, &len);
    if (r < 0)
        return r;
    return prof_maps_parse(text, len, ret_maps);
}

const struct prof_map *prof_maps_find(const struct prof_maps *maps, uint64_t addr)
{
    size_t lo = 0, hi = maps->count;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (maps->map[mid].end <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < maps->count && addr >= maps->map[lo].start ? &maps->map[lo] : NULL;
}

void prof_maps_done(struct prof_maps *maps)
{
    if (!maps)
        return;
    free(maps->text);
    free(maps->map);
    *maps = (struct prof_maps){0};
}
