/* json/json-internal.h - definitions shared by json/ and its unit tests only. */
#ifndef FLEETPROF_JSON_JSON_INTERNAL_H
#define FLEETPROF_JSON_JSON_INTERNAL_H

/* writer.c: whether a memory writer may map its big chunks (JSON__WRITER_CHUNK_MMAP, the
 * default where transparent huge pages are not off). Tests set it to take each path whatever
 * the kernel does: without it every chunk is a malloc'd small one, as when mmap fails. Setting
 * it also forgets an earlier MADV_HUGEPAGE failure and skips the sysfs check. Returns the
 * previous set. Not thread-safe: for tests, before any writer is used. */
enum {
    JSON__WRITER_CHUNK_MMAP = 1u << 0,
};
unsigned json__writer_chunk_ways(unsigned ways);

#endif /* FLEETPROF_JSON_JSON_INTERNAL_H */
