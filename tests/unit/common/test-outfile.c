/* Unit tests for common/outfile.h: a file for the user appears whole under its name or not at
 * all, with mode 0600 less the umask, and no temporary file is left behind in any case. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/outfile.h"
#include "testlib.h"

/* Entries in dir other than . and .. */
static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    assert_non_null(d);
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    (void)closedir(d);
    return n;
}

static void read_back(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    assert_true(fd >= 0);
    n = read(fd, buf, size - 1);
    assert_true(n >= 0);
    buf[n] = '\0';
    (void)close(fd);
}

static void write_file(const char *path, const char *text, int result, int want)
{
    struct fleetprof_outfile f;

    assert_int_equal(fleetprof_outfile_open(&f, path), 0);
    assert_int_equal(write(f.fd, text, strlen(text)), (ssize_t)strlen(text));
    assert_int_equal(fleetprof_outfile_commit(&f, result), want);
    assert_int_equal(f.fd, -1);
    assert_null(f.tmp);
}

static void test_a_committed_file_replaces_the_old_one_whole(void **state)
{
    char *dir = test_tmpdir("outfile"), path[PATH_MAX], buf[64];
    struct stat st;
    mode_t old = umask(022);

    (void)state;
    (void)snprintf(path, sizeof(path), "%s/out.json", dir);
    write_file(path, "first", 0, 0);
    write_file(path, "second", 0, 0);
    read_back(path, buf, sizeof(buf));
    assert_string_equal(buf, "second");
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(entries(dir), 1);
    (void)umask(old);
    test_rmtree(dir);
    free(dir);
}

static void test_a_failed_write_leaves_the_old_file_and_no_temporary(void **state)
{
    char *dir = test_tmpdir("outfile"), path[PATH_MAX], buf[64];
    struct fleetprof_outfile f;

    (void)state;
    (void)snprintf(path, sizeof(path), "%s/out.json", dir);
    write_file(path, "good", 0, 0);
    write_file(path, "half", -ENOSPC, -ENOSPC);
    read_back(path, buf, sizeof(buf));
    assert_string_equal(buf, "good");
    assert_int_equal(entries(dir), 1);
    /* Abandoned before any commit (the writer gave up): nothing new either. */
    assert_int_equal(fleetprof_outfile_open(&f, path), 0);
    assert_int_equal(entries(dir), 2);
    fleetprof_outfile_abort(&f);
    fleetprof_outfile_abort(&f); /* idempotent */
    assert_int_equal(entries(dir), 1);
    test_rmtree(dir);
    free(dir);
}

static void test_a_destination_that_cannot_be_written_is_refused_at_open(void **state)
{
    char *dir = test_tmpdir("outfile"), path[PATH_MAX];
    struct fleetprof_outfile f;

    (void)state;
    (void)snprintf(path, sizeof(path), "%s/missing/out.json", dir);
    assert_int_equal(fleetprof_outfile_open(&f, path), -ENOENT);
    assert_int_equal(f.fd, -1);
    fleetprof_outfile_abort(&f); /* safe after a failed open */
    /* A rename that fails (onto a directory) removes the temporary file. */
    (void)snprintf(path, sizeof(path), "%s/adir", dir);
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(fleetprof_outfile_open(&f, path), 0);
    assert_int_equal(fleetprof_outfile_commit(&f, 0), -EISDIR);
    assert_int_equal(entries(dir), 1);
    test_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_a_committed_file_replaces_the_old_one_whole),
            cmocka_unit_test(test_a_failed_write_leaves_the_old_file_and_no_temporary),
            cmocka_unit_test(test_a_destination_that_cannot_be_written_is_refused_at_open),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
