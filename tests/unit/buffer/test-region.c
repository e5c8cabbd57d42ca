/* Unit tests for shared chunk regions (buffer/region.h): a buffer whose chunks live in a
 * sealed memfd reads back, from a copy of the file alone, exactly as the buffer itself reads;
 * destroyed chunks give their pages back; the seal holds; damaged copies are survived. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "block-walk.h"
#include "buffer/chunk-manager.h"
#include "buffer/chunked-buffer.h"
#include "buffer/region.h"
#include "testlib.h"

#define CHUNK 4096u

struct fixture {
    struct buf_region *region;
    struct buf_chunk_manager *m;
    struct buf_chunked_buffer *b;
};

static void fill(struct fixture *f, uint64_t limit, int entries, struct test_rng *rng)
{
    uint8_t data[700];

    assert_int_equal(buf_region_new(CHUNK, NULL, &f->region), 0);
    assert_int_equal(buf_chunk_manager_local_new(limit, CHUNK, &f->m), 0);
    assert_int_equal(buf_chunk_manager_local_set_region(f->m, f->region), 0);
    assert_int_equal(buf_chunked_buffer_new(f->m, 4242, &f->b), 0);
    for (int i = 0; i < entries; i++) {
        size_t len = 1 + test_rng_range(rng, 0, (sizeof(data) - 1) - 1);

        for (size_t k = 0; k < len; k++)
            data[k] = (uint8_t)test_rng_next(rng);
        assert_int_equal(buf_chunked_buffer_put_bytes(f->b, data, len, NULL), 0);
    }
}

static void teardown(struct fixture *f)
{
    f->b = buf_chunked_buffer_free(f->b);
    f->m = buf_chunk_manager_free(f->m);
    f->region = buf_region_free(f->region);
}

/* What another process would do: read the whole file through its descriptor. */
static uint8_t *copy_file(int fd, size_t *ret_len)
{
    struct stat st;
    uint8_t *mem;

    assert_int_equal(fstat(fd, &st), 0);
    mem = malloc((size_t)st.st_size);
    assert_non_null(mem);
    assert_int_equal(pread(fd, mem, (size_t)st.st_size, 0), st.st_size);
    *ret_len = (size_t)st.st_size;
    return mem;
}

static void test_reads_back_like_the_buffer(void **state)
{
    struct test_rng rng;
    struct fixture f = {0};
    struct block_digest live = {0}, copy = {0};
    struct buf_region_stats stats;
    uint8_t *mem;
    size_t len;

    (void)state;
    test_rng_init(&rng, test_seed());
    /* Enough entries to fill several segments; no limit pressure: nothing destroyed. */
    fill(&f, 1u << 30, 300, &rng);
    assert_int_equal(buf_chunked_buffer_read_each(f.b, block_digest_cb, &live), 0);
    mem = copy_file(buf_region_fd(f.region), &len);
    assert_int_equal(buf_region_read_each(mem, len, block_digest_cb, &copy, &stats), 0);
    assert_true(live.blocks == 300);
    assert_true(copy.blocks == live.blocks);
    assert_true(copy.hash == live.hash);
    assert_int_equal(stats.pid, (int)getpid());
    assert_true(stats.corrupt_chunks == 0);
    assert_true(stats.chunks > 4); /* more than the first segment's slots */
    free(mem);
    teardown(&f);
}

static void test_destroyed_chunks_give_pages_back(void **state)
{
    struct test_rng rng;
    struct fixture f = {0};
    struct block_digest live = {0}, copy = {0};
    struct buf_region_stats stats;
    struct stat before, after;
    uint8_t *mem;
    size_t len;

    (void)state;
    test_rng_init(&rng, test_seed());
    fill(&f, 64u * CHUNK, 600, &rng);
    assert_int_equal(fstat(buf_region_fd(f.region), &before), 0);
    /* What DestroyReleasedChunksAtOrBefore does: every released chunk goes. */
    buf_chunked_buffer_destroy_at_or_before(f.b, UINT64_MAX);
    assert_int_equal(fstat(buf_region_fd(f.region), &after), 0);
    assert_true(after.st_size == before.st_size); /* the file never shrinks */
    assert_true(after.st_blocks < before.st_blocks);

    /* The copy still reads exactly what the buffer has left. */
    assert_int_equal(buf_chunked_buffer_read_each(f.b, block_digest_cb, &live), 0);
    mem = copy_file(buf_region_fd(f.region), &len);
    assert_int_equal(buf_region_read_each(mem, len, block_digest_cb, &copy, &stats), 0);
    assert_true(copy.blocks == live.blocks);
    assert_true(copy.hash == live.hash);
    assert_true(stats.corrupt_chunks == 0);
    free(mem);
    teardown(&f);
}

static void test_limit_pressure_reuses_slots(void **state)
{
    struct test_rng rng;
    struct fixture f = {0};
    struct block_digest live = {0}, copy = {0};
    uint8_t *mem;
    size_t len;

    (void)state;
    test_rng_init(&rng, test_seed());
    /* A limit of 8 chunks, 60 chunks' worth written: slots are reused, the file stays small. */
    fill(&f, 8u * CHUNK, 1000, &rng);
    assert_true(buf_region_size(f.region) <= BUF_REGION_HEADER_BYTES + 16u * 2 * CHUNK);
    assert_int_equal(buf_chunked_buffer_read_each(f.b, block_digest_cb, &live), 0);
    mem = copy_file(buf_region_fd(f.region), &len);
    assert_int_equal(buf_region_read_each(mem, len, block_digest_cb, &copy, NULL), 0);
    assert_true(live.blocks > 0 && live.blocks < 1000);
    assert_true(copy.blocks == live.blocks);
    assert_true(copy.hash == live.hash);
    free(mem);
    teardown(&f);
}

static void test_memfd_is_sealed_against_shrinking(void **state)
{
    struct buf_region *region;
    int fd, seals;

    (void)state;
    assert_int_equal(buf_region_new(CHUNK, NULL, &region), 0);
    fd = buf_region_fd(region);
    seals = fcntl(fd, F_GET_SEALS);
    assert_true(seals >= 0 && (seals & F_SEAL_SHRINK) && (seals & F_SEAL_SEAL));
    assert_int_equal(ftruncate(fd, 0), -1);
    assert_int_equal(errno, EPERM);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    region = buf_region_free(region);
}

/* The daemon's side maps the header page of the owner's descriptor on its own and stores the
 * eviction point there; the owner's load sees it through its own mapping. */
static void test_eviction_point_crosses_mappings(void **state)
{
    struct buf_region_header copy;
    struct buf_region *region;
    struct stat st;
    void *page;

    (void)state;
    assert_int_equal(buf_region_new(CHUNK, NULL, &region), 0);
    assert_int_equal(buf_region_eviction_ns(region), 0);
    assert_int_equal(fstat(buf_region_fd(region), &st), 0);
    page = mmap(NULL, BUF_REGION_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED,
                buf_region_fd(region), 0);
    assert_true(page != MAP_FAILED);
    memcpy(&copy, page, sizeof(copy));
    assert_int_equal(buf_region_header_check(&copy, (uint64_t)st.st_size), 0);
    assert_int_equal(copy.evict_ns, 0);
    buf_region_header_store_eviction(page, 12345);
    assert_int_equal(buf_region_eviction_ns(region), 12345);
    buf_region_header_store_eviction(page, 99999);
    assert_int_equal(buf_region_eviction_ns(region), 99999);
    /* The field is where the format says, in the zero area of the header page. */
    assert_int_equal(*(uint64_t *)((uint8_t *)page + BUF_REGION_EVICT_OFFSET), 99999);
    /* A file too short for its header, or a header that is not a region's, is refused. */
    assert_int_equal(buf_region_header_check(&copy, BUF_REGION_PAGE_BYTES), -EBADMSG);
    copy.magic ^= 1;
    assert_int_equal(buf_region_header_check(&copy, (uint64_t)st.st_size), -EBADMSG);
    assert_int_equal(munmap(page, BUF_REGION_PAGE_BYTES), 0);
    region = buf_region_free(region);
}

/* The children forked without a profiler, as another process reads them through the memfd:
 * the first BUF_REGION_UNPROFILED_MAX listed in order, every one counted. */
static void test_unprofiled_children_are_listed_then_counted(void **state)
{
    struct buf_region_header h;
    struct buf_region *region;

    (void)state;
    assert_int_equal(buf_region_new(CHUNK, NULL, &region), 0);
    assert_int_equal(pread(buf_region_fd(region), &h, sizeof(h), 0), (ssize_t)sizeof(h));
    assert_int_equal(h.slots_given_up, 0);
    assert_int_equal(h.unprofiled_count, 0);
    buf_region_mark_slots_given_up(region);
    for (int32_t pid = 1000; pid < 1000 + (int32_t)BUF_REGION_UNPROFILED_MAX + 3; pid++)
        buf_region_note_unprofiled_child(region, pid);
    assert_int_equal(pread(buf_region_fd(region), &h, sizeof(h), 0), (ssize_t)sizeof(h));
    assert_int_equal(h.slots_given_up, 1);
    assert_int_equal(h.unprofiled_count, BUF_REGION_UNPROFILED_MAX + 3);
    for (uint32_t i = 0; i < BUF_REGION_UNPROFILED_MAX; i++)
        assert_int_equal(h.unprofiled_pids[i], 1000 + (int32_t)i);
    region = buf_region_free(region);
}

static void test_file_region(void **state)
{
    char dir[] = "/tmp/fleetprof-region-XXXXXX";
    char path[64];
    struct test_rng rng;
    struct buf_region *region;
    struct buf_chunk_manager *m;
    struct buf_chunked_buffer *b;
    struct block_digest live = {0}, copy = {0};
    uint8_t data[100] = {1, 2, 3};
    uint8_t *mem;
    size_t len;
    int fd;

    (void)state;
    test_rng_init(&rng, test_seed());
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/fleetprof-1.chunks", dir);
    assert_int_equal(buf_region_new(CHUNK, path, &region), 0);
    assert_int_equal(buf_region_new(CHUNK, path, &(struct buf_region *){NULL}), -EEXIST);
    assert_int_equal(buf_chunk_manager_local_new(1u << 20, CHUNK, &m), 0);
    assert_int_equal(buf_chunk_manager_local_set_region(m, region), 0);
    assert_int_equal(buf_chunked_buffer_new(m, 1, &b), 0);
    for (int i = 0; i < 200; i++) {
        data[0] = (uint8_t)test_rng_next(&rng);
        assert_int_equal(buf_chunked_buffer_put_bytes(b, data, 1 + (size_t)i % 99, NULL), 0);
    }
    assert_int_equal(buf_chunked_buffer_read_each(b, block_digest_cb, &live), 0);
    /* As `fleetprof recover` after a crash: only the file is left. */
    fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    mem = copy_file(fd, &len);
    close(fd);
    assert_int_equal(buf_region_read_each(mem, len, block_digest_cb, &copy, NULL), 0);
    assert_true(copy.blocks == 200 && copy.hash == live.hash);
    free(mem);
    b = buf_chunked_buffer_free(b);
    m = buf_chunk_manager_free(m);
    region = buf_region_free(region);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

static void test_sizes_must_match(void **state)
{
    struct buf_region *region;
    struct buf_chunk_manager *m;

    (void)state;
    assert_int_equal(buf_region_new(0, NULL, &region), -EINVAL);
    assert_int_equal(buf_region_new(CHUNK, NULL, &region), 0);
    assert_int_equal(buf_chunk_manager_local_new(1u << 20, 2 * CHUNK, &m), 0);
    assert_int_equal(buf_chunk_manager_local_set_region(m, region), -EINVAL);
    m = buf_chunk_manager_free(m);
    assert_int_equal(buf_chunk_manager_single_new(CHUNK, &m), 0);
    assert_int_equal(buf_chunk_manager_local_set_region(m, region), -EINVAL);
    m = buf_chunk_manager_free(m);
    region = buf_region_free(region);
}

static void test_description_is_read_whole(void **state)
{
    struct buf_region *region;
    const uint8_t *meta;
    uint8_t *mem, *big;
    size_t len, meta_len;

    (void)state;
    assert_int_equal(buf_region_new(CHUNK, NULL, &region), 0);
    mem = copy_file(buf_region_fd(region), &len);
    assert_int_equal(buf_region_read_meta(mem, len, &meta, &meta_len), -ENOENT);
    free(mem);

    assert_int_equal(buf_region_set_meta(region, "first", 5), 0);
    assert_int_equal(buf_region_set_meta(region, "second!", 7), 0);
    mem = copy_file(buf_region_fd(region), &len);
    assert_int_equal(buf_region_read_meta(mem, len, &meta, &meta_len), 0);
    assert_true(meta_len == 7 && memcmp(meta, "second!", 7) == 0);

    /* The owner died while writing the next one over the current area's bytes, or they were
     * damaged: the previous description is whole, and better than none. */
    mem[BUF_REGION_PAGE_BYTES + 0 * BUF_REGION_META_BYTES + 2] ^= 1; /* seq 2 is area 0 */
    assert_int_equal(buf_region_read_meta(mem, len, &meta, &meta_len), 0);
    assert_true(meta_len == 5 && memcmp(meta, "first", 5) == 0);
    mem[BUF_REGION_PAGE_BYTES + 1 * BUF_REGION_META_BYTES + 1] ^= 1;
    assert_int_equal(buf_region_read_meta(mem, len, &meta, &meta_len), -ENOENT);
    assert_int_equal(buf_region_read_meta(mem, 100, &meta, &meta_len), -EBADMSG);
    free(mem);

    big = calloc(1, BUF_REGION_META_BYTES + 1);
    assert_non_null(big);
    assert_int_equal(buf_region_set_meta(region, big, BUF_REGION_META_BYTES + 1), -E2BIG);
    assert_int_equal(buf_region_set_meta(region, big, BUF_REGION_META_BYTES), 0);
    free(big);
    region = buf_region_free(region);
}

/* A hostile writer: the copy is damaged in every way the reader must survive. */
static void test_damaged_copies_are_survived(void **state)
{
    struct test_rng rng;
    struct fixture f = {0};
    struct block_digest d;
    struct buf_region_stats stats;
    uint8_t *mem, *bad;
    size_t len;

    (void)state;
    test_rng_init(&rng, test_seed());
    fill(&f, 1u << 30, 200, &rng);
    mem = copy_file(buf_region_fd(f.region), &len);
    bad = malloc(len);
    assert_non_null(bad);

    /* A bad region header: nothing is read. */
    memcpy(bad, mem, len);
    bad[0] ^= 0xff;
    assert_int_equal(buf_region_read_each(bad, len, block_digest_cb, &d, NULL), -EBADMSG);
    assert_int_equal(buf_region_read_each(mem, 10, block_digest_cb, &d, NULL), -EBADMSG);

    /* A chunk whose used length points past its end: counted corrupt, others read. */
    memcpy(bad, mem, len);
    {
        struct buf_chunk_header h;
        uint8_t *at = bad + BUF_REGION_HEADER_BYTES + BUF_REGION_CHUNK_OFFSET;

        memcpy(&h, at, sizeof(h));
        h.past_last_block_offset = 0x7fffffff;
        memcpy(at, &h, sizeof(h));
    }
    d = (struct block_digest){0};
    assert_int_equal(buf_region_read_each(bad, len, block_digest_cb, &d, &stats), 0);
    assert_true(stats.corrupt_chunks == 1);
    assert_true(d.blocks > 0 && d.blocks < 200);

    /* Random bytes anywhere, and a truncated file: never a crash, at most all corrupt. */
    for (int round = 0; round < 2000; round++) {
        size_t n = len;

        memcpy(bad, mem, len);
        for (int k = 0; k < 1 + round % 16; k++)
            bad[test_rng_range(&rng, 0, (len)-1)] = (uint8_t)test_rng_next(&rng);
        if (round % 3 == 0)
            n = test_rng_range(&rng, 0, (len + 1) - 1);
        d = (struct block_digest){0};
        (void)buf_region_read_each(bad, n, block_digest_cb, &d, &stats);
        assert_true(d.blocks <= 200 + 16);
    }
    free(bad);
    free(mem);
    teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_reads_back_like_the_buffer),
            cmocka_unit_test(test_destroyed_chunks_give_pages_back),
            cmocka_unit_test(test_limit_pressure_reuses_slots),
            cmocka_unit_test(test_memfd_is_sealed_against_shrinking),
            cmocka_unit_test(test_eviction_point_crosses_mappings),
            cmocka_unit_test(test_unprofiled_children_are_listed_then_counted),
            cmocka_unit_test(test_file_region),
            cmocka_unit_test(test_sizes_must_match),
            cmocka_unit_test(test_description_is_read_whole),
            cmocka_unit_test(test_damaged_copies_are_survived),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
