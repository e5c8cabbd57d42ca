/* tests/unit/ipc/gen-ipc-corpus.c - writes seed inputs for the ipc fuzzers.
 *
 * Usage: gen-ipc-corpus DIR  ->  DIR/ipc-envelope/<msg>  (one packed Envelope, no prefix)
 *                                DIR/ipc-frame/<msg>     (split seed byte + one frame)
 *                                DIR/ipc-frame/all       (split seed byte + every frame)
 * The format of ipc-frame inputs is described in tests/fuzz/fuzz-ipc-frame.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ipc-samples.h"
#include "ipc/ipc.h"

static int write_file(const char *dir, const char *sub, const char *name, const uint8_t *data,
                      size_t len)
{
    char path[4096];
    FILE *f;

    (void)snprintf(path, sizeof(path), "%s/%s", dir, sub);
    if (mkdir(path, 0755) < 0 && errno != EEXIST)
        return -1;
    (void)snprintf(path, sizeof(path), "%s/%s/seed-%s", dir, sub, name);
    f = fopen(path, "wb");
    if (!f)
        return -1;
    if (fwrite(data, 1, len, f) != len) {
        (void)fclose(f);
        return -1;
    }
    return fclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    size_t n, all_len = 1;
    const Fleetprof__Envelope *const *samples = ipc_samples(&n);
    uint8_t *all = malloc(1 << 16);

    if (argc != 2 || !all) {
        fprintf(stderr, "usage: gen-ipc-corpus DIR\n");
        return 2;
    }
    all[0] = 0x5a;
    for (size_t i = 0; i < n; i++) {
        size_t frame = ipc_frame_size(samples[i]);
        uint8_t buf[4096];
        ssize_t w;

        buf[0] = (uint8_t)(i * 37);
        w = ipc_frame_encode(samples[i], buf + 1, sizeof(buf) - 1);
        if (w < 0 || (size_t)w != frame || all_len + frame > (1 << 16))
            return 1;
        memcpy(all + all_len, buf + 1, frame);
        all_len += frame;
        if (write_file(argv[1], "ipc-frame", ipc_msg_name(samples[i]->msg_case), buf, frame + 1) <
            0)
            return 1;
        /* The envelope alone: skip the length prefix. */
        w = (ssize_t)(frame - fleetprof__envelope__get_packed_size(samples[i]));
        if (write_file(argv[1], "ipc-envelope", ipc_msg_name(samples[i]->msg_case), buf + 1 + w,
                       frame - (size_t)w) < 0)
            return 1;
    }
    if (write_file(argv[1], "ipc-frame", "all", all, all_len) < 0)
        return 1;
    free(all);
    printf("wrote %zu messages\n", n);
    return 0;
}
