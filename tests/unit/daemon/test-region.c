/* Unit tests for daemon/region.c: a child's chunk region on the daemon's side. Only a memfd
 * sealed against shrinking, of a size a region of the daemon's limits can have, is kept (the
 * others are refused, said and closed); its header page is mapped for evictions only when the
 * child reads them there and the header is a region's; the eviction points stored there only
 * grow, and the child reads them with its own reader (buffer/region.h); what the header says
 * of an exec or a written profile is read back. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "buffer/region.h"
#include "daemon-fixture.h"
#include "testlib.h"

#define KIB 1024u

static bool fd_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

/* A memfd of size bytes (zeros, or the first page of from), with seals. */
static int memfd_of(uint64_t size, const void *page, int seals)
{
    int fd = memfd_create("test-region", MFD_CLOEXEC | (seals ? MFD_ALLOW_SEALING : 0));

    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    if (page)
        assert_int_equal(pwrite(fd, page, BUF_REGION_PAGE_BYTES, 0), BUF_REGION_PAGE_BYTES);
    if (seals)
        assert_int_equal(fcntl(fd, F_ADD_SEALS, seals), 0);
    return fd;
}

static void test_a_descriptor_that_is_no_memory_file_is_refused(void **state)
{
    struct fx f;
    struct conn *c;
    int p[2], dir;

    (void)state;
    fx_setup(&f, NULL);
    c = fx_child(&f, 100, "piped");
    assert_int_equal(pipe(p), 0);
    daemon__region_accept(c, p[0], true);
    assert_int_equal(c->region_fd, -1);
    assert_null(c->evict_page);
    assert_false(fd_open(p[0])); /* closed */
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_WARNING,
                                  "child 100 (piped): chunk region refused: not a memory file; it "
                                  "will not be recovered if it dies"),
                     1);
    (void)close(p[1]);

    dir = open(f.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(dir >= 0);
    daemon__region_accept(c, dir, false);
    assert_int_equal(c->region_fd, -1);
    assert_false(fd_open(dir));
    assert_int_equal(fx_logged(&f, "not a memory file"), 2);
    fx_teardown(&f);
}

/* A file the child could shrink would fault a reader that mapped it. */
static void test_a_file_not_sealed_against_shrinking_is_refused(void **state)
{
    char path[400];
    struct fx f;
    struct conn *c;
    int fd;

    (void)state;
    fx_setup(&f, NULL);
    c = fx_child(&f, 101, "unsealed");
    fd = memfd_of(64 * KIB, NULL, 0); /* no sealing at all */
    daemon__region_accept(c, fd, false);
    assert_int_equal(c->region_fd, -1);
    assert_false(fd_open(fd));
    fd = memfd_of(64 * KIB, NULL, F_SEAL_GROW | F_SEAL_SEAL); /* sealed, not against shrinking */
    daemon__region_accept(c, fd, false);
    assert_int_equal(c->region_fd, -1);
    assert_false(fd_open(fd));
    (void)snprintf(path, sizeof(path), "%s/plain", f.dir); /* a regular file: no seals */
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    daemon__region_accept(c, fd, false);
    assert_int_equal(c->region_fd, -1);
    assert_false(fd_open(fd));
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_WARNING,
                                  "child 101 (unsealed): chunk region refused: not sealed against "
                                  "shrinking (F_SEAL_SHRINK), so reading it could fault"),
                     3);
    fx_teardown(&f);
}

/* A region claiming more than the daemon's limits allow would make it copy without bound. */
static void test_a_region_too_large_is_refused(void **state)
{
    struct daemon_options o = {.chunk_bytes = 64 * KIB, .process_limit_bytes = 1024 * KIB};
    struct fx f;
    struct conn *c;
    uint64_t limit;
    int fd;

    (void)state;
    fx_setup(&f, &o);
    limit = daemon__region_limit(f.d);
    /* The header, and twice the buffer limit's chunks in slots of a chunk and two pages. */
    assert_true(limit == BUF_REGION_HEADER_BYTES + 2 * (1024 * KIB + 8 * (64 * KIB + 8192)));
    c = fx_child(&f, 102, "huge");
    fd = memfd_of(limit + 1, NULL, F_SEAL_SHRINK);
    daemon__region_accept(c, fd, false);
    assert_int_equal(c->region_fd, -1);
    assert_false(fd_open(fd));
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_WARNING,
                                  "child 102 (huge): chunk region refused: larger than a region "
                                  "of its buffer limit can be"),
                     1);
    fd = memfd_of(limit, NULL, F_SEAL_SHRINK); /* at the limit: kept */
    daemon__region_accept(c, fd, false);
    assert_int_equal(c->region_fd, fd);
    assert_int_equal(fx_logged(&f, "refused"), 1);
    fx_teardown(&f);
}

static void test_the_limit_follows_the_options(void **state)
{
    struct fx f;

    (void)state;
    fx_setup(&f, NULL); /* daemon_new's defaults: 64 MiB per process, 256 KiB chunks */
    assert_true(daemon__region_limit(f.d) ==
                BUF_REGION_HEADER_BYTES + 2 * ((64ull << 20) + 8 * (256 * KIB + 8192)));
    /* Options left at zero count as those defaults. */
    f.d->opt.chunk_bytes = 0;
    f.d->opt.process_limit_bytes = 0;
    assert_true(daemon__region_limit(f.d) ==
                BUF_REGION_HEADER_BYTES + 2 * ((64ull << 20) + 8 * (256 * KIB + 8192)));
    f.d->opt.chunk_bytes = 256 * KIB;
    f.d->opt.process_limit_bytes = 64ull << 20;
    fx_teardown(&f);
}

/* A child that does not read its evictions in its region: its region is kept, nothing mapped,
 * destroy requests go by message. */
static void test_a_sealed_region_is_kept_without_its_page_unless_asked(void **state)
{
    struct buf_region *region = fx_region_new(64 * KIB);
    struct daemon_stats s;
    struct fx f;
    struct conn *c;
    int fd = fx_region_dup(region);

    (void)state;
    fx_setup(&f, NULL);
    c = fx_child(&f, 103, "kept");
    daemon__region_accept(c, fd, false);
    assert_int_equal(c->region_fd, fd);
    assert_null(c->evict_page);
    assert_false(daemon__region_evict(c, 1000));
    assert_true(buf_region_eviction_ns(region) == 0);
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.region_evictions, 0);
    assert_int_equal(c->region_evictions, 0);
    assert_int_equal(fx_logged(&f, "refused"), 0);
    fx_teardown(&f);
    buf_region_free(region);
}

/* Asked, with a region's header: the page is mapped, and the points stored there are what the
 * child reads, growing only (a point that goes back is counted, not stored). */
static void test_eviction_points_reach_the_child_and_only_grow(void **state)
{
    static const uint64_t asked[] = {100, 300, 200, 300, 400};
    static const uint64_t seen[] = {100, 300, 300, 300, 400};
    struct buf_region *region = fx_region_new(64 * KIB);
    struct daemon_stats s;
    struct fx f;
    struct conn *c;

    (void)state;
    /* Whatever the child's page says before is not the daemon's point. */
    buf_region_header_store_eviction(buf_region_header_page(region), 5000);
    fx_setup(&f, NULL);
    c = fx_child(&f, 104, "reader");
    daemon__region_accept(c, fx_region_dup(region), true);
    assert_true(c->region_fd >= 0);
    assert_non_null(c->evict_page);
    assert_true(c->evict_ns == 0);
    for (size_t i = 0; i < sizeof(asked) / sizeof(asked[0]); i++) {
        assert_true(daemon__region_evict(c, asked[i]));
        assert_true(buf_region_eviction_ns(region) == seen[i]);
        assert_true(c->evict_ns == seen[i]);
        assert_int_equal(c->region_evictions, i + 1);
        daemon_get_stats(f.d, &s);
        assert_int_equal(s.region_evictions, i + 1);
    }
    assert_int_equal(fx_logged(&f, "evictions go by message"), 0);
    fx_teardown(&f);
    buf_region_free(region);
}

/* Asked, but the page cannot serve: the region is kept (it can still be recovered), the
 * evictions go by message, and the log says why. */
static void test_no_eviction_page_when_the_header_cannot_serve(void **state)
{
    struct buf_region *region = fx_region_new(64 * KIB);
    uint8_t page[BUF_REGION_PAGE_BYTES];
    struct fx f;
    struct conn *c;
    int fd;

    (void)state;
    assert_int_equal(pread(buf_region_fd(region), page, sizeof(page), 0), (ssize_t)sizeof(page));
    fx_setup(&f, NULL);
    c = fx_child(&f, 105, "odd");

    fd = memfd_of(8192, NULL, F_SEAL_SHRINK); /* zeros: no region's header */
    daemon__region_accept(c, fd, true);
    assert_int_equal(c->region_fd, fd);
    assert_null(c->evict_page);
    assert_false(daemon__region_evict(c, 10));
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_INFO,
                                  "child 105 (odd): evictions go by message, not through its "
                                  "region: its header is not a chunk region's"),
                     1);
    daemon__region_release(c);

    fd = memfd_of(100, NULL, F_SEAL_SHRINK);
    daemon__region_accept(c, fd, true);
    assert_int_equal(c->region_fd, fd);
    assert_null(c->evict_page);
    assert_int_equal(fx_logged(&f, "region: shorter than its header page"), 1);
    daemon__region_release(c);

    /* A region's header in a file sealed against writes: it cannot be mapped writable. */
    fd = memfd_of(buf_region_size(region), page, F_SEAL_SHRINK | F_SEAL_WRITE);
    daemon__region_accept(c, fd, true);
    assert_int_equal(c->region_fd, fd);
    assert_null(c->evict_page);
    assert_int_equal(fx_logged(&f, "evictions go by message"), 3);
    daemon__region_release(c);

    /* The same header in a writable one: mapped. */
    fd = memfd_of(buf_region_size(region), page, F_SEAL_SHRINK);
    daemon__region_accept(c, fd, true);
    assert_non_null(c->evict_page);
    assert_int_equal(fx_logged(&f, "evictions go by message"), 3);
    fx_teardown(&f);
    buf_region_free(region);
}

static void test_release_is_idempotent(void **state)
{
    struct buf_region *region = fx_region_new(64 * KIB);
    struct fx f;
    struct conn *c;
    int fd = fx_region_dup(region);

    (void)state;
    fx_setup(&f, NULL);
    c = fx_child(&f, 106, "leaving");
    daemon__region_accept(c, fd, true);
    assert_non_null(c->evict_page);
    daemon__region_release(c);
    assert_null(c->evict_page);
    assert_int_equal(c->region_fd, -1);
    assert_false(fd_open(fd));
    daemon__region_release(c);
    assert_null(c->evict_page);
    assert_int_equal(c->region_fd, -1);
    assert_false(daemon__region_evict(c, 50));
    assert_true(buf_region_eviction_ns(region) == 0);
    /* The child's region lives on with the child. */
    assert_true(fd_open(buf_region_fd(region)));
    fx_teardown(&f);
    buf_region_free(region);
}

static void test_the_header_says_exec_and_profile_written(void **state)
{
    struct buf_region *region = fx_region_new(64 * KIB);
    uint8_t garbage[BUF_REGION_PAGE_BYTES];
    int fd = buf_region_fd(region), zeros, ones, shorter;

    (void)state;
    assert_false(daemon__region_execd(fd));
    assert_false(daemon__region_profile_written(fd));
    assert_int_equal(daemon__region_exec_cpu(fd), 0);
    buf_region_mark_exec(region, daemon__now_ns(), "/bin/true", 123456789);
    assert_true(daemon__region_execd(fd));
    assert_false(daemon__region_profile_written(fd));
    /* What the image's profile charged the thread that exec'd, for the next image. */
    assert_int_equal(daemon__region_exec_cpu(fd), 123456789);
    buf_region_mark_exec(region, 0, NULL, 0); /* the exec failed: the image lives on */
    assert_false(daemon__region_execd(fd));
    assert_int_equal(daemon__region_exec_cpu(fd), 0);
    buf_region_mark_profile_written(region);
    assert_true(daemon__region_profile_written(fd));
    assert_false(daemon__region_execd(fd));

    /* Not a region: neither, whatever its bytes. */
    zeros = memfd_of(BUF_REGION_PAGE_BYTES, NULL, 0);
    assert_false(daemon__region_execd(zeros));
    assert_false(daemon__region_profile_written(zeros));
    memset(garbage, 0xff, sizeof(garbage)); /* every field set, but no region's magic */
    ones = memfd_of(BUF_REGION_PAGE_BYTES, garbage, 0);
    assert_false(daemon__region_execd(ones));
    assert_false(daemon__region_profile_written(ones));
    shorter = memfd_of(16, NULL, 0);
    assert_int_equal(daemon__region_exec_cpu(ones), 0);
    assert_int_equal(daemon__region_exec_cpu(shorter), 0);
    assert_false(daemon__region_execd(shorter));
    assert_false(daemon__region_profile_written(shorter));
    assert_false(daemon__region_execd(-1));
    assert_false(daemon__region_profile_written(-1));
    (void)close(zeros);
    (void)close(ones);
    (void)close(shorter);
    buf_region_free(region);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_a_descriptor_that_is_no_memory_file_is_refused),
            cmocka_unit_test(test_a_file_not_sealed_against_shrinking_is_refused),
            cmocka_unit_test(test_a_region_too_large_is_refused),
            cmocka_unit_test(test_the_limit_follows_the_options),
            cmocka_unit_test(test_a_sealed_region_is_kept_without_its_page_unless_asked),
            cmocka_unit_test(test_eviction_points_reach_the_child_and_only_grow),
            cmocka_unit_test(test_no_eviction_page_when_the_header_cannot_serve),
            cmocka_unit_test(test_release_is_idempotent),
            cmocka_unit_test(test_the_header_says_exec_and_profile_written),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
