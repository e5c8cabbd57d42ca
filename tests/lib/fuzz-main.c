/* tests/lib/fuzz-main.c - replays fuzz inputs in ordinary builds (systemd's pattern).
 *
 * Each argument is a corpus file (or a directory of them); every file is fed once to
 * LLVMFuzzerTestOneInput. A crash or sanitizer report fails the test; the corpus thus
 * stays a regression suite without clang or libFuzzer.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *data = NULL;
    size_t size = 0, cap = 0, n;

    if (!f) {
        fprintf(stderr, "fuzz-main: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    do {
        if (size == cap) {
            uint8_t *grown;

            cap = cap ? cap * 2 : 4096;
            grown = realloc(data, cap);
            if (!grown) {
                free(data);
                (void)fclose(f);
                return -1;
            }
            data = grown;
        }
        n = fread(data + size, 1, cap - size, f);
        size += n;
    } while (n > 0);
    (void)fclose(f);
    (void)LLVMFuzzerTestOneInput(data, size);
    free(data);
    return 0;
}

static int replay(const char *path, unsigned *count)
{
    struct stat st;
    DIR *dir;
    struct dirent *de;
    int r = 0;

    if (stat(path, &st) < 0) {
        fprintf(stderr, "fuzz-main: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        (*count)++;
        return replay_file(path);
    }
    dir = opendir(path);
    if (!dir)
        return -1;
    while ((de = readdir(dir))) {
        char *child;

        if (de->d_name[0] == '.')
            continue;
        if (asprintf(&child, "%s/%s", path, de->d_name) < 0) {
            r = -1;
            break;
        }
        if (replay(child, count) < 0)
            r = -1;
        free(child);
    }
    (void)closedir(dir);
    return r;
}

int main(int argc, char **argv)
{
    unsigned count = 0;
    int failed = 0;

    for (int i = 1; i < argc; i++)
        if (replay(argv[i], &count) < 0)
            failed = 1;
    printf("replayed %u inputs\n", count);
    if (count == 0) {
        fprintf(stderr, "fuzz-main: no corpus input given\n");
        return 1;
    }
    return failed;
}
