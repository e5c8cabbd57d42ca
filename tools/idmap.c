/* tools/idmap.c - pairs of numbers to dense ids. */
#include "tools/idmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t a, uint64_t b)
{
    uint64_t h = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull);

    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 29);
}

static int idmap_rehash(struct idmap *m, size_t nslots)
{
    struct idmap_slot *slots = calloc(nslots, sizeof(*slots));

    if (!slots)
        return -ENOMEM;
    for (size_t i = 0; i < m->nslots; i++) {
        size_t j;

        if (!m->slots[i].id1)
            continue;
        j = mix(m->slots[i].a, m->slots[i].b) & (nslots - 1);
        while (slots[j].id1)
            j = (j + 1) & (nslots - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->nslots = nslots;
    return 0;
}

uint32_t idmap_get(struct idmap *m, uint64_t a, uint64_t b, uint32_t next)
{
    size_t i;

    if ((m->n + 1) * 2 > m->nslots && idmap_rehash(m, m->nslots ? m->nslots * 2 : 256) < 0)
        return UINT32_MAX;
    for (i = mix(a, b) & (m->nslots - 1); m->slots[i].id1; i = (i + 1) & (m->nslots - 1))
        if (m->slots[i].a == a && m->slots[i].b == b)
            return m->slots[i].id1 - 1;
    m->slots[i] = (struct idmap_slot){.a = a, .b = b, .id1 = next + 1};
    m->n++;
    return next;
}

void idmap_done(struct idmap *m)
{
    free(m->slots);
    memset(m, 0, sizeof(*m));
}
