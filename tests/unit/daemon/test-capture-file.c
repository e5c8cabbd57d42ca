/* Unit tests for daemon/capture-file: real files in a temp dir. Appends and writes at offsets
 * land where they should; a reserved hole is filled later; a withdrawn element is whitespace
 * (or cut off the end) and the document still parses; separators become commas in file order
 * whatever the completion order; a spool is appended, by copy_file_range or by its read and
 * write fallback; commit leaves the destination with its mode and content and no temporary
 * file; abort leaves the old destination as it was; the first failure is kept, with its
 * message, and later ones do not replace it.
 *
 * copy_file_range is wrapped at link time (-Wl,--wrap=copy_file_range, tests/unit/daemon/
 * meson.build): the wrapper counts the calls and, when told, lets only so many bytes through
 * before failing as a kernel without it would.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/capture-file.h"
#include "json-check.h"
#include "json/writer.h"
#include "testlib.h"

/* The link-time wrapper of copy_file_range. */
ssize_t __real_copy_file_range(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
                               unsigned int flags);
ssize_t __wrap_copy_file_range(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
                               unsigned int flags);

static struct {
    unsigned calls;
    int fail_errno;  /* 0: the real call; else fail with it once budget is spent */
    uint64_t budget; /* bytes the real call may still copy before failing */
    uint64_t copied; /* bytes the real call copied */
} cfr;

ssize_t __wrap_copy_file_range(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
                               unsigned int flags)
{
    ssize_t n;

    cfr.calls++;
    if (cfr.fail_errno && cfr.budget == 0) {
        errno = cfr.fail_errno;
        return -1;
    }
    if (cfr.fail_errno && len > cfr.budget)
        len = (size_t)cfr.budget;
    n = __real_copy_file_range(fd_in, off_in, fd_out, off_out, len, flags);
    if (n > 0) {
        cfr.copied += (uint64_t)n;
        if (cfr.fail_errno)
            cfr.budget -= (uint64_t)n;
    }
    return n;
}

struct fixture {
    char *dir;
    char path[PATH_MAX]; /* dir/out.json: the destination */
    struct rlimit fsize; /* RLIMIT_FSIZE as it was */
    mode_t umask;
};

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));

    if (!fx)
        return -1;
    fx->dir = test_tmpdir("capture-file");
    if (!fx->dir)
        return -1;
    (void)snprintf(fx->path, sizeof(fx->path), "%s/out.json", fx->dir);
    if (getrlimit(RLIMIT_FSIZE, &fx->fsize) < 0)
        return -1;
    fx->umask = umask(022);
    memset(&cfr, 0, sizeof(cfr));
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;

    (void)setrlimit(RLIMIT_FSIZE, &fx->fsize);
    (void)umask(fx->umask);
    memset(&cfr, 0, sizeof(cfr));
    test_rmtree(fx->dir);
    free(fx->dir);
    free(fx);
    return 0;
}

/* The whole of a file, NUL-terminated; its length in *ret_len. */
static char *slurp_fd(int fd, size_t *ret_len)
{
    struct stat st;
    char *buf;
    size_t done = 0;

    assert_int_equal(fstat(fd, &st), 0);
    buf = malloc((size_t)st.st_size + 1);
    assert_non_null(buf);
    while (done < (size_t)st.st_size) {
        ssize_t n = pread(fd, buf + done, (size_t)st.st_size - done, (off_t)done);

        assert_true(n > 0);
        done += (size_t)n;
    }
    buf[done] = '\0';
    *ret_len = done;
    return buf;
}

static char *slurp(const char *path, size_t *ret_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *buf;

    assert_true(fd >= 0);
    buf = slurp_fd(fd, ret_len);
    (void)close(fd);
    return buf;
}

static void write_whole(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    assert_int_equal(fchmod(fd, mode), 0);
    assert_int_equal(close(fd), 0);
}

/* The names in dir, sorted and joined with spaces ("" when empty). */
static void dir_names(const char *dir, char *out, size_t size)
{
    struct dirent **list;
    int n = scandir(dir, &list, NULL, alphasort);
    size_t used = 0;

    assert_true(n >= 0);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (strcmp(list[i]->d_name, ".") && strcmp(list[i]->d_name, ".."))
            used += (size_t)snprintf(out + used, used < size ? size - used : 0, "%s%s",
                                     used ? " " : "", list[i]->d_name);
        free(list[i]);
    }
    free(list);
    assert_true(used < size);
}

/* The temporary file's name in f's directory, as the listing shows it. */
static const char *tmp_name(const struct capture_file *f)
{
    const char *slash = strrchr(f->out.tmp, '/');

    return slash ? slash + 1 : f->out.tmp;
}

static void open_file(struct capture_file *f, const struct fixture *fx)
{
    capture_file_init(f, fx->path);
    assert_int_equal(capture_file_open(f), 0);
    assert_int_equal(f->error, 0);
    assert_true(f->out.fd >= 0);
}

static void assert_content(struct capture_file *f, const char *want, size_t want_len)
{
    size_t len;
    char *got = slurp_fd(f->out.fd, &len);

    assert_int_equal(len, want_len);
    assert_int_equal(f->len, want_len);
    assert_memory_equal(got, want, want_len);
    free(got);
}

static void test_append_and_write_at(void **state)
{
    struct fixture *fx = *state;
    struct capture_file f;
    char names[256];

    open_file(&f, fx);
    assert_string_equal(f.dir, fx->dir);
    dir_names(fx->dir, names, sizeof(names));
    assert_string_equal(names, tmp_name(&f)); /* only the temporary file so far */
    assert_int_equal(capture_file_append(&f, "hello", 5), 0);
    assert_int_equal(capture_file_append(&f, " world", 6), 0);
    assert_int_equal(f.len, 11);
    /* Within the file: len does not move. */
    assert_int_equal(capture_file_write_at(&f, 0, "J", 1), 0);
    assert_int_equal(capture_file_write_at(&f, 6, "W", 1), 0);
    assert_int_equal(f.len, 11);
    assert_content(&f, "Jello World", 11);
    /* Nothing written at all: the destination does not exist yet. */
    assert_int_equal(access(fx->path, F_OK), -1);
    assert_int_equal(f.error, 0);
    capture_file_free(&f);
}

static void test_append_writer(void **state)
{
    struct fixture *fx = *state;
    struct capture_file f;
    struct json_writer *w, *bad;
    char *want;
    size_t want_len;

    /* Many chunks: small ones, then big ones. */
    assert_int_equal(json_writer_new_memory(&w), 0);
    json_writer_array_begin(w, NULL);
    for (int i = 0; i < 100000; i++)
        json_writer_int(w, NULL, i * 7919);
    json_writer_array_end(w);
    assert_int_equal(json_writer_finish(w), 0);
    assert_int_equal(json_writer_copy_to(w, &want), 0);
    want_len = json_writer_length(w);
    assert_true(want_len > JSON_WRITER_SMALL_CHUNKS * JSON_WRITER_CHUNK_BYTES);

    open_file(&f, fx);
    assert_int_equal(capture_file_append(&f, "X", 1), 0);
    assert_int_equal(capture_file_append_writer(&f, w), 0);
    {
        size_t len;
        char *got = slurp_fd(f.out.fd, &len);

        assert_int_equal(len, 1 + want_len);
        assert_int_equal(got[0], 'X');
        assert_memory_equal(got + 1, want, want_len);
        free(got);
    }
    assert_int_equal(f.error, 0);

    /* A writer's own failure is the file's, as "building the profile failed". */
    assert_int_equal(json_writer_new_memory(&bad), 0);
    json_writer_array_begin(bad, NULL);
    json_writer_object_end(bad); /* the wrong kind: -EINVAL latched */
    assert_int_equal(capture_file_append_writer(&f, bad), -EINVAL);
    assert_int_equal(f.error, -EINVAL);
    assert_string_equal(f.message, "building the profile failed: Invalid argument");
    json_writer_free(bad);
    json_writer_free(w);
    free(want);
    capture_file_free(&f);
}

/* [ A (reserved first, completed last), B ]: the hole reads as zeros until it is filled, and
 * B, complete first, still gets the comma, because it comes second in the file. */
static void test_reserve_filled_later(void **state)
{
    static const char want[] = "[ {\"a\":1},{\"b\":2}]";
    struct fixture *fx = *state;
    struct capture_file f;
    uint64_t a, b;
    size_t len;
    char *got;

    open_file(&f, fx);
    assert_int_equal(capture_file_append(&f, "[", 1), 0);
    assert_int_equal(capture_file_reserve(&f, 7, &a), 0);
    assert_int_equal(a, 1);
    assert_int_equal(f.len, 9); /* separator and hole */
    assert_int_equal(capture_file_element_begin(&f, &b), 0);
    assert_int_equal(b, 9);
    assert_int_equal(capture_file_append(&f, "{\"b\":2}", 7), 0);
    assert_int_equal(capture_file_add_element(&f, b), 0);

    got = slurp_fd(f.out.fd, &len);
    assert_int_equal(len, 17);
    assert_memory_equal(got, "[ \0\0\0\0\0\0\0 {\"b\":2}", 17);
    free(got);

    /* Filled in two pieces, the second first. */
    assert_int_equal(capture_file_write_at(&f, a + 1 + 4, ":1}", 3), 0);
    assert_int_equal(capture_file_write_at(&f, a + 1, "{\"a\"", 4), 0);
    assert_int_equal(capture_file_add_element(&f, a), 0);
    assert_int_equal(f.element_count, 2);
    capture_file_finish_elements(&f);
    assert_int_equal(capture_file_append(&f, "]", 1), 0);
    assert_content(&f, want, sizeof(want) - 1);
    assert_true(test_json_valid(want, sizeof(want) - 1));
    assert_int_equal(f.error, 0);
    capture_file_free(&f);
}

/* A withdrawn element with later bytes after it is blanked (more than the 64 KiB of spaces
 * written at a time); one at the end is cut off. The document parses either way. */
static void test_withdrawn_element_is_whitespace(void **state)
{
    enum { BIG = 100000 };
    struct fixture *fx = *state;
    struct capture_file f;
    uint64_t a, b, c, d, e;
    size_t len;
    char *got;

    open_file(&f, fx);
    assert_int_equal(capture_file_append(&f, "[", 1), 0);
    assert_int_equal(capture_file_element_begin(&f, &a), 0);
    assert_int_equal(capture_file_append(&f, "{\"a\":1}", 7), 0);
    assert_int_equal(capture_file_add_element(&f, a), 0);
    /* b: reserved, half sent, then withdrawn with c after it: blanked. */
    assert_int_equal(capture_file_reserve(&f, BIG, &b), 0);
    assert_int_equal(capture_file_write_at(&f, b + 1, "{\"b\":[1,2,", 10), 0);
    assert_int_equal(capture_file_element_begin(&f, &c), 0);
    assert_int_equal(capture_file_append(&f, "{\"c\":3}", 7), 0);
    assert_int_equal(capture_file_add_element(&f, c), 0);
    capture_file_withdraw(&f, b, 1 + BIG);
    assert_int_equal(f.len, c + 8); /* nothing cut */
    /* d: streamed at the end, withdrawn: cut off, separator included. */
    assert_int_equal(capture_file_element_begin(&f, &d), 0);
    assert_int_equal(capture_file_append(&f, "{\"d\":", 5), 0);
    capture_file_withdraw(&f, d, f.len - d);
    assert_int_equal(f.len, d);
    /* e: reserved at the end, never filled, withdrawn: cut off too. */
    assert_int_equal(capture_file_reserve(&f, 50, &e), 0);
    assert_int_equal(e, d);
    capture_file_withdraw(&f, e, 1 + 50);
    assert_int_equal(f.len, d);
    capture_file_finish_elements(&f);
    assert_int_equal(capture_file_append(&f, "]", 1), 0);

    got = slurp_fd(f.out.fd, &len);
    assert_int_equal(len, 1 + 8 + 1 + BIG + 8 + 1);
    assert_int_equal(f.len, len);
    assert_memory_equal(got, "[ {\"a\":1}", 9);
    for (size_t i = 9; i < 9 + 1 + BIG; i++)
        if (got[i] != ' ')
            fail_msg("byte %zu of the withdrawn element is 0x%02x, not a space", i,
                     (unsigned char)got[i]);
    assert_memory_equal(got + 9 + 1 + BIG, ",{\"c\":3}]", 9);
    assert_true(test_json_valid(got, len));
    free(got);
    assert_int_equal(f.error, 0);
    capture_file_free(&f);
}

/* Elements reserved in file order, filled and completed in a random order: the commas are
 * those of file order, and the array parses with every element in its place. */
static void test_commas_in_file_order(void **state)
{
    enum { N = 64 };
    struct fixture *fx = *state;
    struct capture_file f;
    struct test_rng rng;
    uint64_t at[N];
    int order[N];
    char text[N][32], *want, *got;
    size_t want_len = 0, len;

    test_rng_init(&rng, test_seed());
    open_file(&f, fx);
    assert_int_equal(capture_file_append(&f, "[", 1), 0);
    for (int i = 0; i < N; i++) {
        (void)snprintf(text[i], sizeof(text[i]), "{\"i\":%d,\"x\":\"%0*d\"}", i,
                       (int)test_rng_range(&rng, 1, 9), 0);
        assert_int_equal(capture_file_reserve(&f, strlen(text[i]), &at[i]), 0);
        order[i] = i;
    }
    for (int i = N - 1; i > 0; i--) {
        int k = (int)test_rng_range(&rng, 0, (uint64_t)i), t = order[i];

        order[i] = order[k];
        order[k] = t;
    }
    for (int i = 0; i < N; i++) {
        int k = order[i];

        assert_int_equal(capture_file_write_at(&f, at[k] + 1, text[k], strlen(text[k])), 0);
        assert_int_equal(capture_file_add_element(&f, at[k]), 0);
    }
    capture_file_finish_elements(&f);
    assert_int_equal(capture_file_append(&f, "]", 1), 0);

    want = malloc(N * 32 + 8);
    assert_non_null(want);
    want[want_len++] = '[';
    for (int i = 0; i < N; i++)
        want_len += (size_t)sprintf(want + want_len, "%c%s", i ? ',' : ' ', text[i]);
    want[want_len++] = ']';
    got = slurp_fd(f.out.fd, &len);
    assert_int_equal(len, want_len);
    assert_memory_equal(got, want, want_len);
    assert_true(test_json_valid(got, len));
    free(got);
    free(want);
    capture_file_free(&f);

    /* One element: no comma at all. */
    open_file(&f, fx);
    assert_int_equal(capture_file_append(&f, "[", 1), 0);
    assert_int_equal(capture_file_element_begin(&f, &at[0]), 0);
    assert_int_equal(capture_file_append(&f, "1", 1), 0);
    assert_int_equal(capture_file_add_element(&f, at[0]), 0);
    capture_file_finish_elements(&f);
    assert_int_equal(capture_file_append(&f, "]", 1), 0);
    assert_content(&f, "[ 1]", 4);
    capture_file_free(&f);
}

/* A spool of size bytes (several copy buffers), appended after "<": its bytes, in order. */
static void spool_round_trip(const struct fixture *fx, size_t size)
{
    struct capture_file f;
    struct test_rng rng;
    char *data, *got, names[256];
    size_t len;
    int spool = -1;

    data = malloc(size);
    assert_non_null(data);
    test_rng_init(&rng, test_seed());
    test_rng_fill(&rng, data, size);
    open_file(&f, fx);
    assert_int_equal(capture_file_spool_open(&f, &spool), 0);
    assert_true(spool >= 0);
    /* Unlinked: the directory holds the temporary file alone. */
    dir_names(fx->dir, names, sizeof(names));
    assert_string_equal(names, tmp_name(&f));
    /* In pieces, as they arrive. */
    for (size_t o = 0; o < size; o += 100000)
        assert_int_equal(capture_file_spool_write(&f, spool, data + o,
                                                  size - o < 100000 ? size - o : 100000),
                         0);
    assert_int_equal(capture_file_append(&f, "<", 1), 0);
    assert_int_equal(capture_file_append_spool(&f, spool, size), 0);
    assert_int_equal(capture_file_append(&f, ">", 1), 0);
    assert_int_equal(f.len, size + 2);
    got = slurp_fd(f.out.fd, &len);
    assert_int_equal(len, size + 2);
    assert_int_equal(got[0], '<');
    assert_memory_equal(got + 1, data, size);
    assert_int_equal(got[size + 1], '>');
    assert_int_equal(f.error, 0);
    free(got);
    free(data);
    (void)close(spool);
    capture_file_free(&f);
}

#define SPOOL_BYTES ((3u << 20) + 12345)

static void test_spool_append(void **state)
{
    spool_round_trip(*state, SPOOL_BYTES);
    assert_true(cfr.calls >= 1); /* the kernel's copy was tried */
}

/* copy_file_range unavailable (ENOSYS, as on old kernels): read and write do it all. */
static void test_spool_append_without_copy_file_range(void **state)
{
    cfr.fail_errno = ENOSYS;
    spool_round_trip(*state, SPOOL_BYTES);
    assert_int_equal(cfr.calls, 1); /* tried once, then the fallback alone */
    assert_int_equal(cfr.copied, 0);
}

/* copy_file_range copies a part, then cannot go on (EXDEV): the fallback takes over where
 * it stopped. */
static void test_spool_append_fallback_midway(void **state)
{
    cfr.fail_errno = EXDEV;
    cfr.budget = 1000003;
    spool_round_trip(*state, SPOOL_BYTES);
    /* All the budget went through the kernel, then the fallback did the rest; unless this file
     * system has no copy at all (the fallback did everything). */
    if (cfr.copied) {
        assert_int_equal(cfr.copied, 1000003);
        assert_true(cfr.calls >= 2);
    }
}

/* Where O_TMPFILE cannot be used (here: the spool directory is missing), a spool is a named
 * file beside the destination, unlinked at once. */
static void test_spool_named_when_no_tmpfile(void **state)
{
    struct fixture *fx = *state;
    struct capture_file f;
    char names[256];
    int spool = -1;

    open_file(&f, fx);
    free(f.dir);
    assert_int_not_equal(asprintf(&f.dir, "%s/missing", fx->dir), -1);
    assert_int_equal(capture_file_spool_open(&f, &spool), 0);
    assert_true(spool >= 0);
    dir_names(fx->dir, names, sizeof(names));
    assert_string_equal(names, tmp_name(&f));
    assert_int_equal(capture_file_spool_write(&f, spool, "{}", 2), 0);
    assert_int_equal(capture_file_append_spool(&f, spool, 2), 0);
    assert_content(&f, "{}", 2);
    (void)close(spool);
    capture_file_free(&f);
}

/* A spool shorter than the length asked is an I/O error, by either path. */
static void test_spool_shorter_than_asked(void **state)
{
    struct fixture *fx = *state;
    struct capture_file f;
    char want[PATH_MAX + 64];
    int spool;

    open_file(&f, fx);
    assert_int_equal(capture_file_spool_open(&f, &spool), 0);
    assert_int_equal(capture_file_spool_write(&f, spool, "0123456789", 10), 0);
    assert_int_equal(capture_file_append_spool(&f, spool, 20), -EIO);
    (void)snprintf(want, sizeof(want), "cannot write %s: Input/output error", fx->path);
    /* Where the kernel cannot copy between these files, the fallback is the one to notice. */
    if (strcmp(f.message, want) != 0)
        (void)snprintf(want, sizeof(want),
                       "cannot read a spool file next to %s: Input/output error", fx->path);
    assert_string_equal(f.message, want);
    assert_int_equal(f.len, 10); /* what there was is in */
    capture_file_free(&f);

    cfr.fail_errno = ENOSYS;
    open_file(&f, fx);
    assert_int_equal(capture_file_append_spool(&f, spool, 20), -EIO);
    assert_int_equal(f.error, -EIO);
    (void)snprintf(want, sizeof(want), "cannot read a spool file next to %s: Input/output error",
                   fx->path);
    assert_string_equal(f.message, want);
    (void)close(spool);
    capture_file_free(&f);
}

/* Commit makes the destination, replacing what was there, with mode 0600 and the bytes
 * written, and leaves no temporary file. */
static void test_commit(void **state)
{
    struct fixture *fx = *state;
    struct capture_file f;
    struct stat before, after;
    char names[256], *got;
    size_t len;

    write_whole(fx->path, "old", 0644);
    assert_int_equal(stat(fx->path, &before), 0);
    open_file(&f, fx);
    assert_int_equal(capture_file_append(&f, "{\"new\":true}", 12), 0);
    dir_names(fx->dir, names, sizeof(names));
    assert_non_null(strstr(names, "out.json.tmp."));
    assert_int_equal(capture_file_commit(&f), 0);
    assert_int_equal(f.out.fd, -1);
    assert_int_equal(f.error, 0);
    assert_int_equal(f.len, 12); /* the size, for the result */

    assert_int_equal(stat(fx->path, &after), 0);
    assert_int_equal(after.st_mode & 07777, 0600);
    assert_true(after.st_ino != before.st_ino); /* renamed over it, not rewritten */
    got = slurp(fx->path, &len);
    assert_int_equal(len, 12);
    assert_memory_equal(got, "{\"new\":true}", 12);
    free(got);
    dir_names(fx->dir, names, sizeof(names));
    assert_string_equal(names, "out.json");
    capture_file_free(&f); /* after commit: nothing to remove */
    dir_names(fx->dir, names, sizeof(names));
    assert_string_equal(names, "out.json");
}

/* A destination given relative to the working directory: spools go in ".". */
static void test_relative_destination(void **state)
{
    struct fixture *fx = *state;
    struct capture_file f;
    char cwd[PATH_MAX], names[256], *got;
    size_t len;
    int spool;

    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir(fx->dir), 0);
    capture_file_init(&f, "out.json");
    assert_int_equal(capture_file_open(&f), 0);
    assert_string_equal(f.dir, ".");
    assert_int_equal(capture_file_spool_open(&f, &spool), 0);
    assert_int_equal(capture_file_spool_write(&f, spool, "[1]", 3), 0);
    assert_int_equal(capture_file_append_spool(&f, spool, 3), 0);
    (void)close(spool);
    assert_int_equal(capture_file_commit(&f), 0);
    capture_file_free(&f);
    assert_int_equal(chdir(cwd), 0);
    got = slurp(fx->path, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(got, "[1]", 3);
    free(got);
    dir_names(fx->dir, names, sizeof(names));
    assert_string_equal(names, "out.json");
}

/* Abort removes the temporary file and leaves the old destination as it was. */
static void test_abort_keeps_old(void **state)
{
    struct fixture *fx = *state;
    struct capture_file f;
    char names[256], *got;
    size_t len;
    uint64_t at;

    write_whole(fx->path, "old contents", 0640);
    open_file(&f, fx);
    assert_int_equal(capture_file_append(&f, "[", 1), 0);
    assert_int_equal(capture_file_reserve(&f, 1000, &at), 0);
    assert_int_equal(capture_file_append(&f, "]", 1), 0);
    capture_file_abort(&f);
    assert_int_equal(f.out.fd, -1);
    capture_file_abort(&f); /* idempotent */
    dir_names(fx->dir, names, sizeof(names));
    assert_string_equal(names, "out.json");
    got = slurp(fx->path, &len);
    assert_int_equal(len, 12);
    assert_memory_equal(got, "old contents", 12);
    free(got);
    {
        struct stat st;

        assert_int_equal(stat(fx->path, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0640);
    }
    capture_file_free(&f);
}

/* The destination's directory does not exist: the failure says so, and nothing is made. */
static void test_open_fails(void **state)
{
    struct fixture *fx = *state;
    struct capture_file f;
    char path[PATH_MAX + 16], want[PATH_MAX + 80];

    (void)snprintf(path, sizeof(path), "%s/missing/out.json", fx->dir);
    capture_file_init(&f, path);
    assert_int_equal(capture_file_open(&f), -ENOENT);
    assert_int_equal(f.error, -ENOENT);
    (void)snprintf(want, sizeof(want), "cannot create a file next to %s: No such file or directory",
                   path);
    assert_string_equal(f.message, want);
    assert_int_equal(f.out.fd, -1);
    /* Committing what could not be opened removes nothing and reports the first failure. */
    assert_int_equal(capture_file_commit(&f), -ENOENT);
    assert_string_equal(f.message, want);
    capture_file_free(&f);
}

/* A file size limit (SIGXFSZ ignored: EFBIG instead of the signal): the first failure is
 * recorded once, with its message; later failures do not replace it; commit then removes the
 * file and reports it, and the destination is never made. */
static void test_write_error_recorded_once(void **state)
{
    struct fixture *fx = *state;
    struct capture_file f;
    struct rlimit rl = fx->fsize;
    char want[PATH_MAX + 64], names[256], block[4096];
    void (*old)(int);
    int ro;

    if (fx->fsize.rlim_max != RLIM_INFINITY && fx->fsize.rlim_max < 2 * sizeof(block))
        skip();
    memset(block, 'x', sizeof(block));
    open_file(&f, fx);
    old = signal(SIGXFSZ, SIG_IGN);
    rl.rlim_cur = sizeof(block) + 100;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &rl), 0);
    assert_int_equal(capture_file_append(&f, block, sizeof(block)), 0);
    assert_int_equal(capture_file_append(&f, block, sizeof(block)), -EFBIG);
    (void)setrlimit(RLIMIT_FSIZE, &fx->fsize);
    (void)signal(SIGXFSZ, old);
    assert_int_equal(f.error, -EFBIG);
    assert_int_equal(f.len, sizeof(block)); /* an append that failed does not count */
    (void)snprintf(want, sizeof(want), "cannot write %s: File too large", fx->path);
    assert_string_equal(f.message, want);

    /* Later failures of every kind leave the first in place. */
    ro = open("/dev/null", O_RDONLY | O_CLOEXEC);
    assert_true(ro >= 0);
    assert_int_equal(capture_file_spool_write(&f, ro, "x", 1), -EBADF);
    (void)close(ro);
    assert_int_equal(capture_file_fail(&f, -ENODATA, "nothing to write"), -ENODATA);
    assert_int_equal(f.error, -EFBIG);
    assert_string_equal(f.message, want);
    /* Withdrawing does nothing once the file failed. */
    capture_file_withdraw(&f, 0, f.len);
    assert_int_equal(f.len, sizeof(block));

    assert_int_equal(capture_file_commit(&f), -EFBIG);
    assert_int_equal(f.out.fd, -1);
    assert_string_equal(f.message, want);
    dir_names(fx->dir, names, sizeof(names));
    assert_string_equal(names, ""); /* no temporary file, no destination */
    capture_file_free(&f);
}

/* A spool that cannot be written (a read-only descriptor): its message names the spool. */
static void test_spool_write_error(void **state)
{
    struct fixture *fx = *state;
    struct capture_file f;
    char want[PATH_MAX + 64];
    int ro = open("/dev/null", O_RDONLY | O_CLOEXEC);

    assert_true(ro >= 0);
    open_file(&f, fx);
    assert_int_equal(capture_file_spool_write(&f, ro, "abc", 3), -EBADF);
    (void)close(ro);
    assert_int_equal(f.error, -EBADF);
    (void)snprintf(want, sizeof(want), "cannot write a spool file next to %s: Bad file descriptor",
                   fx->path);
    assert_string_equal(f.message, want);
    capture_file_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_append_and_write_at, setup, teardown),
            cmocka_unit_test_setup_teardown(test_append_writer, setup, teardown),
            cmocka_unit_test_setup_teardown(test_reserve_filled_later, setup, teardown),
            cmocka_unit_test_setup_teardown(test_withdrawn_element_is_whitespace, setup, teardown),
            cmocka_unit_test_setup_teardown(test_commas_in_file_order, setup, teardown),
            cmocka_unit_test_setup_teardown(test_spool_append, setup, teardown),
            cmocka_unit_test_setup_teardown(test_spool_append_without_copy_file_range, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_spool_append_fallback_midway, setup, teardown),
            cmocka_unit_test_setup_teardown(test_spool_named_when_no_tmpfile, setup, teardown),
            cmocka_unit_test_setup_teardown(test_spool_shorter_than_asked, setup, teardown),
            cmocka_unit_test_setup_teardown(test_commit, setup, teardown),
            cmocka_unit_test_setup_teardown(test_relative_destination, setup, teardown),
            cmocka_unit_test_setup_teardown(test_abort_keeps_old, setup, teardown),
            cmocka_unit_test_setup_teardown(test_open_fails, setup, teardown),
            cmocka_unit_test_setup_teardown(test_write_error_recorded_once, setup, teardown),
            cmocka_unit_test_setup_teardown(test_spool_write_error, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
