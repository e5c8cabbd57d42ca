/* tests/fuzz/fuzz-maps.c - the /proc/PID/maps parser (profile/maps.c).
 *
 * The daemon parses the maps of a child that asks for symbols, and a child chooses the
 * names of the files it maps: any bytes but NUL and newline. Input: a maps text. Every
 * parsed line must have start < end and a path inside the text, with no " (deleted)" left
 * on a deleted one; lookups of each line's first and last byte must not fail on a sorted
 * parse. Any crash, sanitizer report or broken invariant is a bug.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "profile/maps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct prof_maps maps;
    char *text = malloc(size + 1);
    bool sorted = true;

    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    if (prof_maps_parse(text, size, &maps) < 0)
        return 0;
    for (size_t i = 0; i < maps.count; i++) {
        const struct prof_map *m = &maps.map[i];
        size_t len = strlen(m->path);

        if (m->start >= m->end || m->path < maps.text || m->path + len > maps.text + size)
            abort();
        if (m->deleted && (len < 1 || m->path[0] != '/'))
            abort();
        if (i > 0 && maps.map[i - 1].end > m->start)
            sorted = false;
    }
    for (size_t i = 0; sorted && i < maps.count; i++) {
        if (prof_maps_find(&maps, maps.map[i].start) != &maps.map[i] ||
            prof_maps_find(&maps, maps.map[i].end - 1) != &maps.map[i])
            abort();
    }
    if (maps.count > 0 && sorted && prof_maps_find(&maps, maps.map[maps.count - 1].end))
        abort();
    prof_maps_done(&maps);
    return 0;
}
