/* Unit tests for reading chunk images from untrusted memory (buf_chunk_images_read_each):
 * a faithful copy reads back like the buffer itself; damaged copies are survived. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "block-walk.h"
#include "buffer/chunk-manager.h"
#include "buffer/chunked-buffer.h"
#include "testlib.h"

struct image {
    uint8_t *mem;
    size_t len, cap;
};

static int append_image(const struct buf_chunk *chunk, void *userdata)
{
    struct image *img = userdata;
    const uint8_t *p;
    size_t n;

    buf_chunk_image(chunk, &p, &n);
    if (img->len + n > img->cap) {
        img->cap = (img->len + n) * 2;
        img->mem = realloc(img->mem, img->cap);
        assert_non_null(img->mem);
    }
    memcpy(img->mem + img->len, p, n);
    img->len += n;
    return 0;
}

static void make_buffer(struct test_rng *rng, struct buf_chunk_manager **ret_m,
                        struct buf_chunked_buffer **ret_b, struct image *img)
{
    uint8_t data[300];

    assert_int_equal(buf_chunk_manager_local_new(16 * 512, 512, ret_m), 0);
    assert_int_equal(buf_chunked_buffer_new(*ret_m, 99, ret_b), 0);
    for (int i = 0; i < 300; i++) {
        size_t len = (size_t)test_rng_range(rng, 1, sizeof(data));

        test_rng_fill(rng, data, len);
        assert_int_equal(buf_chunked_buffer_put_bytes(*ret_b, data, len, NULL), 0);
    }
    memset(img, 0, sizeof(*img));
    assert_int_equal(buf_chunked_buffer_each_chunk(*ret_b, append_image, img), 0);
}

static void test_faithful_copy_reads_the_same(void **state)
{
    struct test_rng rng;
    struct buf_chunk_manager *m;
    struct buf_chunked_buffer *b;
    struct image img;
    struct block_digest live = {0xcbf29ce484222325u, 0}, copy = {0xcbf29ce484222325u, 0};
    struct buf_images_stats st;

    (void)state;
    test_rng_init(&rng, test_seed());
    make_buffer(&rng, &m, &b, &img);
    assert_int_equal(buf_chunked_buffer_read_each(b, block_digest_cb, &live), 0);
    assert_int_equal(buf_chunk_images_read_each(img.mem, img.len, block_digest_cb, &copy, &st), 0);
    assert_true(live.blocks > 20);
    assert_true(copy.blocks == live.blocks);
    assert_true(copy.hash == live.hash);
    assert_true(st.corrupt_chunks == 0 && st.skipped_tails == 0);
    assert_true(st.chunks == img.len / (512 + BUF_CHUNK_HEADER_BYTES));
    free(img.mem);
    b = buf_chunked_buffer_free(b);
    m = buf_chunk_manager_free(m);
}

static void test_damaged_copies(void **state)
{
    struct test_rng rng;
    struct buf_chunk_manager *m;
    struct buf_chunked_buffer *b;
    struct image img;
    struct buf_images_stats st;
    struct block_digest d = {0, 0};
    size_t one = 512 + BUF_CHUNK_HEADER_BYTES;
    uint8_t *copy;
    struct buf_chunk_header h;

    (void)state;
    test_rng_init(&rng, test_seed());
    make_buffer(&rng, &m, &b, &img);
    copy = malloc(img.len);
    assert_non_null(copy);

    /* Truncated image: the images no longer tile the memory. */
    assert_int_equal(buf_chunk_images_read_each(img.mem, img.len - 1, block_digest_cb, &d, &st),
                     -EBADMSG);

    /* Bad magic in the second chunk stops the walk there. */
    memcpy(copy, img.mem, img.len);
    copy[one] ^= 0xff;
    assert_int_equal(buf_chunk_images_read_each(copy, img.len, block_digest_cb, &d, &st), -EBADMSG);
    assert_true(st.chunks == 0 || st.chunks == 1);

    /* A block count that lies makes that chunk corrupt; the others still read. */
    memcpy(copy, img.mem, img.len);
    memcpy(&h, copy + 2 * one, sizeof(h));
    h.block_count += 3;
    memcpy(copy + 2 * one, &h, sizeof(h));
    assert_int_equal(buf_chunk_images_read_each(copy, img.len, block_digest_cb, &d, &st), 0);
    assert_true(st.corrupt_chunks == 1);
    assert_true(st.chunks == img.len / one - 1);

    /* Offsets past the buffer. */
    memcpy(copy, img.mem, img.len);
    memcpy(&h, copy, sizeof(h));
    h.past_last_block_offset = h.buffer_bytes + 1;
    memcpy(copy, &h, sizeof(h));
    assert_int_equal(buf_chunk_images_read_each(copy, img.len, block_digest_cb, &d, &st), 0);
    assert_true(st.corrupt_chunks == 1);

    /* Only the first full chunk: its straddling last block has no tail to read. */
    memcpy(&h, img.mem, sizeof(h));
    if (h.past_last_block_offset == h.buffer_bytes) {
        assert_int_equal(buf_chunk_images_read_each(img.mem, one, block_digest_cb, &d, &st), 0);
        assert_true(st.chunks == 1);
    }

    /* Random damage never crashes or reads out of bounds (ASan builds check the latter). */
    for (int i = 0; i < 2000; i++) {
        memcpy(copy, img.mem, img.len);
        for (int k = 0; k < 4; k++)
            copy[test_rng_range(&rng, 0, img.len - 1)] = (uint8_t)test_rng_next(&rng);
        (void)buf_chunk_images_read_each(copy, img.len, block_digest_cb, &d, &st);
    }
    free(copy);
    free(img.mem);
    b = buf_chunked_buffer_free(b);
    m = buf_chunk_manager_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_faithful_copy_reads_the_same),
            cmocka_unit_test(test_damaged_copies),
    };
    return cmocka_run_group_tests_name("buffer-chunk-images", tests, NULL, NULL);
}
