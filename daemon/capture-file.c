/* daemon/capture-file.c - the file a capture writes (capture-file.h).
 *
 * Writes happen on the loop thread: they only fill the page cache. The one slow call, fsync,
 * is capture_file_commit()'s, which the daemon runs on a worker at the end.
 */
#include "daemon/capture-file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/grow.h"
#include "json/writer.h"

#define COPY_BUFFER_BYTES (1u << 20) /* a spool's copy when copy_file_range cannot be used */

void capture_file_init(struct capture_file *f, const char *path)
{
    memset(f, 0, sizeof(*f));
    f->out.fd = -1;
    f->path = path;
}

int capture_file_open(struct capture_file *f)
{
    const char *slash = strrchr(f->path, '/');
    int r;

    f->dir = !slash ? strdup(".")
                    : strndup(f->path, slash == f->path ? 1 : (size_t)(slash - f->path));
    if (!f->dir)
        return capture_file_fail(f, -ENOMEM, "out of memory");
    r = fleetprof_outfile_open(&f->out, f->path);
    if (r == -ENOMEM)
        return capture_file_fail(f, r, "out of memory");
    if (r < 0)
        return capture_file_fail(f, r, "cannot create a file next to %.400s: %s", f->path,
                                 strerror(-r));
    return 0;
}

int capture_file_fail(struct capture_file *f, int r, const char *fmt, ...)
{
    va_list ap;

    if (!f->error) {
        f->error = r;
        va_start(ap, fmt);
        (void)vsnprintf(f->message, sizeof(f->message), fmt, ap);
        va_end(ap);
    }
    return r;
}

int capture_file_write_at(struct capture_file *f, uint64_t offset, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = pwrite(f->out.fd, data, len, (off_t)offset);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int r = n < 0 ? -errno : -EIO;

            return capture_file_fail(f, r, "cannot write %.400s: %s", f->path, strerror(-r));
        }
        data += n;
        len -= (size_t)n;
        offset += (uint64_t)n;
    }
    return 0;
}

int capture_file_append(struct capture_file *f, const char *data, size_t len)
{
    int r = capture_file_write_at(f, f->len, data, len);

    if (r == 0)
        f->len += len;
    return r;
}

static int append_chunk(const char *data, size_t len, void *userdata)
{
    return capture_file_append(userdata, data, len);
}

int capture_file_append_writer(struct capture_file *f, const struct json_writer *w)
{
    int r = json_writer_each_chunk(w, append_chunk, f);

    /* A write error is recorded already; what is left is the writer's own (-ENOMEM). */
    if (r < 0)
        return capture_file_fail(f, r, "building the profile failed: %s", strerror(-r));
    return 0;
}

/* Appends the bytes of fd from offset to len with read and write: the fallback of
 * capture_file_append_spool(). */
static int append_by_copy(struct capture_file *f, int fd, uint64_t offset, uint64_t len)
{
    char *buf = malloc(COPY_BUFFER_BYTES);
    int r = 0;

    if (!buf)
        return capture_file_fail(f, -ENOMEM, "cannot copy a spool file: out of memory");
    while (r == 0 && offset < len) {
        size_t want = len - offset < COPY_BUFFER_BYTES ? (size_t)(len - offset) : COPY_BUFFER_BYTES;
        ssize_t n = pread(fd, buf, want, (off_t)offset);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            /* A spool shorter than what was written to it is an I/O error too. */
            r = n < 0 ? -errno : -EIO;
            r = capture_file_fail(f, r, "cannot read a spool file next to %.400s: %s", f->path,
                                  strerror(-r));
            break;
        }
        r = capture_file_append(f, buf, (size_t)n);
        offset += (uint64_t)n;
    }
    free(buf);
    return r;
}

/* copy_file_range keeps the bytes in the kernel, and may share blocks on file systems with
 * reflinks; where it cannot be used (EXDEV, EINVAL, ENOSYS, EOPNOTSUPP: old kernels, some file
 * systems), read and write do. */
int capture_file_append_spool(struct capture_file *f, int spool_fd, uint64_t len)
{
    loff_t in = 0;

    while ((uint64_t)in < len) {
        loff_t out = (loff_t)f->len;
        ssize_t n =
                copy_file_range(spool_fd, &in, f->out.fd, &out, (size_t)(len - (uint64_t)in), 0);

        if (n > 0) {
            f->len += (uint64_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP))
            return append_by_copy(f, spool_fd, (uint64_t)in, len);
        n = n < 0 ? -errno : -EIO; /* 0: the spool is shorter than what was written to it */
        return capture_file_fail(f, (int)n, "cannot write %.400s: %s", f->path, strerror((int)-n));
    }
    return 0;
}

/* On the destination's file system, so that the final append can stay in the kernel; gone
 * with the fd even if the daemon dies. O_TMPFILE needs file system support; without it, a
 * named file is unlinked at once. */
int capture_file_spool_open(const struct capture_file *f, int *ret_fd)
{
    char *name;
    int fd, r;

    fd = open(f->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (asprintf(&name, "%s.spool.XXXXXX", f->path) < 0)
            return -ENOMEM;
        fd = mkostemp(name, O_CLOEXEC);
        r = -errno;
        if (fd >= 0)
            (void)unlink(name);
        free(name);
        if (fd < 0)
            return r;
    }
    *ret_fd = fd;
    return 0;
}

int capture_file_spool_write(struct capture_file *f, int spool_fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(spool_fd, data, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int r = n < 0 ? -errno : -EIO;

            return capture_file_fail(f, r, "cannot write a spool file next to %.400s: %s", f->path,
                                     strerror(-r));
        }
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

int capture_file_element_begin(struct capture_file *f, uint64_t *ret_offset)
{
    *ret_offset = f->len;
    return capture_file_append(f, " ", 1);
}

int capture_file_reserve(struct capture_file *f, uint64_t total, uint64_t *ret_offset)
{
    uint64_t offset = f->len;
    int r = capture_file_append(f, " ", 1);

    if (r < 0)
        return r;
    *ret_offset = offset;
    f->len += total; /* a hole until its bytes are written */
    return 0;
}

int capture_file_add_element(struct capture_file *f, uint64_t offset)
{
    if (FLEETPROF_GROW(f->elements, f->element_cap, f->element_count + 1) < 0)
        return capture_file_fail(f, -ENOMEM, "building the profile failed: out of memory");
    f->elements[f->element_count++] = offset;
    return 0;
}

int capture_file_blank(struct capture_file *f, uint64_t offset, uint64_t len)
{
    static char spaces[64 * 1024];
    int r = 0;

    if (spaces[0] != ' ')
        memset(spaces, ' ', sizeof(spaces));
    while (r == 0 && len > 0) {
        size_t n = len < sizeof(spaces) ? (size_t)len : sizeof(spaces);

        r = capture_file_write_at(f, offset, spaces, n);
        offset += n;
        len -= n;
    }
    return r;
}

int capture_file_truncate(struct capture_file *f, uint64_t len)
{
    int r = 0;

    if (ftruncate(f->out.fd, (off_t)len) < 0)
        r = capture_file_fail(f, -errno, "cannot truncate %.400s: %s", f->out.tmp, strerror(errno));
    f->len = len;
    return r;
}

void capture_file_withdraw(struct capture_file *f, uint64_t offset, uint64_t len)
{
    if (f->error)
        return;
    if (offset + len == f->len)
        (void)capture_file_truncate(f, offset);
    else
        (void)capture_file_blank(f, offset, len);
}

static int compare_offsets(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

void capture_file_finish_elements(struct capture_file *f)
{
    if (f->element_count > 1) /* qsort(NULL, 0, ...) is undefined */
        qsort(f->elements, f->element_count, sizeof(*f->elements), compare_offsets);
    for (size_t i = 1; i < f->element_count && !f->error; i++)
        (void)capture_file_write_at(f, f->elements[i], ",", 1);
}

int capture_file_commit(struct capture_file *f)
{
    int r = fleetprof_outfile_commit(&f->out, f->error);

    if (r < 0)
        (void)capture_file_fail(f, r, "cannot write %.400s: %s", f->path, strerror(-r));
    return r;
}

void capture_file_abort(struct capture_file *f)
{
    fleetprof_outfile_abort(&f->out);
}

void capture_file_free(struct capture_file *f)
{
    capture_file_abort(f);
    free(f->elements);
    free(f->dir);
    f->elements = NULL;
    f->dir = NULL;
    f->element_count = f->element_cap = 0;
}
