/* profile/symbols.c - the symbol cache on top of libdwfl; see symbols.h.
 *
 * One Dwfl per module, each reported at its ELF addresses (dwfl_report_elf with base 0 and
 * add_p_vaddr, so module address == ELF vaddr; the vdso, reported from memory, gets a bias
 * that we read back), so that a module can be dropped alone with dwfl_end(). Modules sit in
 * a hash map (by key) and an LRU list; each keeps its resolved addresses in an array indexed
 * by a map from address. Strings are copied into one interning pool that lives as long as the
 * cache, so callers may keep them across evictions.
 */
#include "symbols.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <limits.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>

#include "common/grow.h"
#include "common/hash.h"
#include "common/map.h"
#include "libs.h"

#define STR_BLOCK_BYTES    (64 * 1024)
#define MODULE_FIXED_BYTES 4096 /* libdwfl's per-module structures, roughly */
#define MAX_VDSO_BYTES     (1024 * 1024)
#define DEFAULT_DEBUG_PATH "/usr/lib/debug" /* libdwfl's default absolute directory */

/* --- interned strings ------------------------------------------------------------ */

struct str_block {
    struct str_block *next;
    size_t used;
    size_t cap;
    char data[];
};

struct str_pool {
    struct str_block *blocks;  /* owned; newest first */
    struct fleetprof_map copy; /* FNV-1a of a string -> (uintptr_t) its copy in blocks */
    size_t bytes;
};

struct str_key {
    const char *str;
    size_t len;
};

static bool str_same(const void *ctx, const void *key, uint64_t value)
{
    const struct str_key *k = key;
    const char *copy = (const char *)(uintptr_t)value;

    (void)ctx;
    return strncmp(copy, k->str, k->len) == 0 && copy[k->len] == '\0';
}

/* Returns the pool's copy of str[0..len) (NUL-terminated), or NULL when out of memory. */
static const char *str_pool_intern(struct str_pool *pool, const char *str, size_t len)
{
    struct str_key key = {str, len};
    uint64_t h = fleetprof_fnv1a64(str, len, FLEETPROF_FNV64_SEED), found;
    struct str_block *b = pool->blocks;
    size_t map_cap = pool->copy.cap;
    char *copy;

    if (fleetprof_map_find(&pool->copy, h, str_same, NULL, &key, &found))
        return (const char *)(uintptr_t)found;
    /* Room first, so that adding the copy below cannot fail. */
    if (fleetprof_map_reserve(&pool->copy, 1) < 0)
        return NULL;
    pool->bytes += (pool->copy.cap - map_cap) * sizeof(struct fleetprof_map_slot);
    if (!b || b->cap - b->used < len + 1) {
        size_t cap = len + 1 > STR_BLOCK_BYTES ? len + 1 : STR_BLOCK_BYTES;

        b = malloc(sizeof(*b) + cap);
        if (!b)
            return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = pool->blocks;
        pool->blocks = b;
        pool->bytes += sizeof(*b) + cap;
    }
    copy = b->data + b->used;
    memcpy(copy, str, len);
    copy[len] = '\0';
    b->used += len + 1;
    (void)fleetprof_map_set(&pool->copy, h, str_same, NULL, &key, (uintptr_t)copy);
    return copy;
}

static void str_pool_done(struct str_pool *pool)
{
    while (pool->blocks) {
        struct str_block *next = pool->blocks->next;

        free(pool->blocks);
        pool->blocks = next;
    }
    fleetprof_map_free(&pool->copy);
    memset(pool, 0, sizeof(*pool));
}

/* Folds "//", "/./" and "dir/../" out of a path, lexically (good enough for display; a
 * symlinked directory could make it differ from the real file). Returns the length written
 * to out, or 0 when out is too small. */
static size_t fold_path(const char *in, char *out, size_t out_size)
{
    bool absolute = in[0] == '/';
    size_t root = absolute ? 1 : 0;
    size_t len = root, poppable = 0;

    if (out_size < 2)
        return 0;
    if (absolute)
        out[0] = '/';
    while (*in) {
        const char *comp, *end;
        size_t clen;

        while (*in == '/')
            in++;
        if (!*in)
            break;
        comp = in;
        end = strchr(comp, '/');
        if (!end)
            end = comp + strlen(comp);
        clen = (size_t)(end - comp);
        in = end;
        if (clen == 1 && comp[0] == '.')
            continue;
        if (clen == 2 && comp[0] == '.' && comp[1] == '.') {
            if (poppable > 0) {
                while (len > root && out[len - 1] != '/')
                    len--;
                if (len > root)
                    len--; /* the separator before it */
                poppable--;
                continue;
            }
            if (absolute)
                continue; /* "/.." is "/" */
        } else {
            poppable++;
        }
        if (len + (len > root) + clen + 1 > out_size)
            return 0;
        if (len > root)
            out[len++] = '/';
        memcpy(out + len, comp, clen);
        len += clen;
    }
    if (len == 0)
        out[len++] = '.';
    out[len] = '\0';
    return len;
}

/* --- modules ------------------------------------------------------------------------ */

struct sym_entry {
    const char *function; /* interned; NULL when status < 0 */
    const char *file;     /* interned; may be NULL */
    uint32_t line;
    int16_t status; /* 0 or -ENOENT */
};

/* One symbol of a module that can name code, in a table sorted by address: libdwfl's
 * dwfl_module_addrinfo() scans the whole symbol table on each call (~120 us in libc),
 * binary search takes well under a microsecond once the table is built (~1 ms). */
struct sym_func {
    uint64_t addr;    /* module address */
    uint64_t size;    /* 0 = unknown (assembly labels, _init) */
    uint64_t end;     /* for size 0: the end of the symbol's section (UINT64_MAX: unknown) */
    const char *name; /* borrowed from libdwfl: the module's string table */
    unsigned rank;    /* preference among symbols at one address, higher first */
};

struct sym_key {
    const uint8_t *build_id; /* borrowed */
    size_t build_id_len;
    const char *path; /* borrowed; part of the key only without a build-id */
    dev_t dev;
    ino_t ino;
    int64_t mtime_ns;
    int64_t size;
};

struct sym_module {
    struct sym_module *lru_prev; /* towards the most recently used */
    struct sym_module *lru_next;
    uint64_t hash;

    /* The key. */
    uint8_t build_id[PROF_BUILD_ID_MAX];
    size_t build_id_len;
    char *path; /* owned; NULL for a build-id key without a path */
    dev_t dev;
    ino_t ino;
    int64_t mtime_ns;
    int64_t size;

    int error;          /* 0 = usable; else the negative errno of the failed open */
    char *error_msg;    /* owned; set when error != 0 */
    Dwfl *dwfl;         /* owned */
    Dwfl_Module *mod;   /* borrowed from dwfl */
    uint64_t bias;      /* module address = ELF vaddr + bias */
    char *image;        /* owned; an in-memory ELF libdwfl reads (the vdso), or NULL */
    size_t file_bytes;  /* ELF file + debug file + DWARF sections libdw decompressed */
    bool debug_counted; /* the debug file's size is in file_bytes */
    bool dwarf_counted; /* the DWARF sections' sizes are in file_bytes */
    bool lines_checked; /* the cost rule ran: lines_refused is the verdict */
    bool lines_refused; /* compressed DWARF over the limit: names only, DWARF never opened */

    struct sym_func *funcs; /* owned; sorted by addr, one per address; built on first use */
    size_t func_count;
    bool funcs_built;

    /* Resolved addresses: a dense array, and fleetprof_map_mix64(vaddr) -> index in it
     * (one-to-one, so the entries need not keep their vaddr). */
    struct sym_entry *entries; /* owned */
    size_t entry_count, entry_cap;
    struct fleetprof_map entry_index;
    size_t bytes; /* counted against the limit (in prof_symbols.module_bytes) */
};

struct prof_symbols {
    Dwfl_Callbacks callbacks; /* libdwfl keeps a pointer to it: lives as long as the cache */
    char *debuginfo_path;     /* owned, or NULL; callbacks.debuginfo_path points here */
    size_t limit;
    size_t max_modules;
    size_t max_compressed_dwarf; /* the cost rule's limit, see symbols.h */
    bool names_only;

    struct fleetprof_map modules; /* key_hash() -> (uintptr_t) module */
    struct sym_module *lru_head;  /* most recently used */
    struct sym_module *lru_tail;
    size_t module_bytes;

    struct str_pool strings;
    struct prof_symbols_stats stats;
    char last_error[256];
};

static void set_error(struct prof_symbols *s, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

static void set_error(struct prof_symbols *s, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(s->last_error, sizeof(s->last_error), fmt, ap);
    va_end(ap);
}

static uint64_t key_hash(const struct sym_key *k)
{
    uint64_t h = FLEETPROF_FNV64_SEED;

    if (k->build_id_len > 0)
        return fleetprof_fnv1a64(k->build_id, k->build_id_len, h);
    h = fleetprof_fnv1a64(k->path, strlen(k->path), h);
    h = fleetprof_fnv1a64(&k->dev, sizeof(k->dev), h);
    h = fleetprof_fnv1a64(&k->ino, sizeof(k->ino), h);
    h = fleetprof_fnv1a64(&k->mtime_ns, sizeof(k->mtime_ns), h);
    return fleetprof_fnv1a64(&k->size, sizeof(k->size), h);
}

static bool key_equal(const struct sym_module *m, const struct sym_key *k)
{
    if (m->build_id_len != k->build_id_len)
        return false;
    if (k->build_id_len > 0)
        return memcmp(m->build_id, k->build_id, k->build_id_len) == 0;
    return m->dev == k->dev && m->ino == k->ino && m->mtime_ns == k->mtime_ns &&
           m->size == k->size && m->path && strcmp(m->path, k->path) == 0;
}

static void account(struct prof_symbols *s, struct sym_module *m)
{
    size_t bytes = sizeof(*m) + MODULE_FIXED_BYTES + m->file_bytes +
                   m->entry_cap * sizeof(m->entries[0]) +
                   m->entry_index.cap * sizeof(m->entry_index.slots[0]) +
                   m->func_count * sizeof(m->funcs[0]);

    s->module_bytes = s->module_bytes - m->bytes + bytes;
    m->bytes = bytes;
}

static void lru_unlink(struct prof_symbols *s, struct sym_module *m)
{
    if (m->lru_prev)
        m->lru_prev->lru_next = m->lru_next;
    else
        s->lru_head = m->lru_next;
    if (m->lru_next)
        m->lru_next->lru_prev = m->lru_prev;
    else
        s->lru_tail = m->lru_prev;
    m->lru_prev = m->lru_next = NULL;
}

static void lru_push_front(struct prof_symbols *s, struct sym_module *m)
{
    m->lru_prev = NULL;
    m->lru_next = s->lru_head;
    if (s->lru_head)
        s->lru_head->lru_prev = m;
    s->lru_head = m;
    if (!s->lru_tail)
        s->lru_tail = m;
}

static void module_free(struct sym_module *m)
{
    if (m->dwfl)
        dwfl_end(m->dwfl);
    free(m->image);
    free(m->funcs);
    free(m->entries);
    fleetprof_map_free(&m->entry_index);
    free(m->error_msg);
    free(m->path);
    free(m);
}

/* Whether the module stored is the one looked for (key: a struct sym_key). Inline: every
 * resolve looks its module up, and GCC then leaves no call in the probe. */
static inline bool module_same(const void *ctx, const void *key, uint64_t value)
{
    (void)ctx;
    return key_equal((const struct sym_module *)(uintptr_t)value, key);
}

/* Whether the module stored is key itself: to remove or add a module, without comparing
 * keys. */
static bool module_is(const void *ctx, const void *key, uint64_t value)
{
    (void)ctx;
    return (uintptr_t)key == value;
}

/* Unlinks m from the table and the LRU list, and frees it. */
static void module_drop(struct prof_symbols *s, struct sym_module *m)
{
    (void)fleetprof_map_remove(&s->modules, m->hash, module_is, NULL, m);
    lru_unlink(s, m);
    s->module_bytes -= m->bytes;
    module_free(m);
}

/* Drops least recently used modules until the cache is within its limits; never keep. */
static void enforce_limit(struct prof_symbols *s, const struct sym_module *keep)
{
    while ((s->module_bytes + s->strings.bytes > s->limit || s->modules.count > s->max_modules) &&
           s->lru_tail && s->lru_tail != keep) {
        module_drop(s, s->lru_tail);
        s->stats.modules_evicted++;
    }
}

static struct sym_module *module_find(struct prof_symbols *s, const struct sym_key *k,
                                      uint64_t hash)
{
    uint64_t m;

    return fleetprof_map_find(&s->modules, hash, module_same, NULL, k, &m)
                   ? (struct sym_module *)(uintptr_t)m
                   : NULL;
}

/* Stores a malloc'd message in *ret_msg when ret_msg is not NULL (NULL if out of memory). */
static void set_msg(char **ret_msg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void set_msg(char **ret_msg, const char *fmt, ...)
{
    va_list ap;

    if (!ret_msg)
        return;
    va_start(ap, fmt);
    if (vasprintf(ret_msg, fmt, ap) < 0)
        *ret_msg = NULL;
    va_end(ap);
}

/* Checks that path is a readable regular file starting with the ELF magic, so that the
 * common failures get a precise errno (libdwfl folds them into "not a valid ELF file").
 * Stores its size in *ret_size. */
static int check_elf_file(const char *path, size_t *ret_size)
{
    unsigned char magic[SELFMAG];
    struct stat st;
    ssize_t n;
    int fd, r = 0;

    /* O_NONBLOCK: a FIFO planted at a module's path must not hang the caller. */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0) {
        r = -errno;
        goto out;
    }
    if (S_ISDIR(st.st_mode)) {
        r = -EISDIR;
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        r = -ENOEXEC;
        goto out;
    }
    n = pread(fd, magic, sizeof(magic), 0);
    if (n < 0)
        r = -errno;
    else if (n != (ssize_t)sizeof(magic) || memcmp(magic, ELFMAG, SELFMAG) != 0)
        r = -ENOEXEC;
    else
        *ret_size = (size_t)st.st_size;
out:
    (void)close(fd);
    return r;
}

/* Checks that the module reported last carries the wanted build-id (when one is wanted),
 * then makes it m's. Takes ownership of dwfl in every case. */
static int module_adopt(struct sym_module *m, Dwfl *dwfl, Dwfl_Module *mod, const uint8_t *id,
                        size_t id_len)
{
    const unsigned char *bits = NULL;
    GElf_Addr note_vaddr, bias = 0;
    int n;

    if (id_len > 0) {
        n = dwfl_module_build_id(mod, &bits, &note_vaddr);
        if (n <= 0 || (size_t)n < id_len || memcmp(bits, id, id_len) != 0) {
            dwfl_end(dwfl);
            return -ESTALE;
        }
    }
    if (!dwfl_module_getelf(mod, &bias)) {
        dwfl_end(dwfl);
        return -ENOEXEC;
    }
    m->dwfl = dwfl;
    m->mod = mod;
    m->bias = bias;
    return 0;
}

/* Opens the ELF file at path into m. On failure returns a negative errno and, when
 * ret_msg is not NULL, a malloc'd description in *ret_msg. */
static int open_file(struct prof_symbols *s, struct sym_module *m, const char *path,
                     const uint8_t *id, size_t id_len, char **ret_msg)
{
    const char *slash = strrchr(path, '/');
    Dwfl_Module *mod;
    size_t size = 0;
    Dwfl *dwfl;
    int r;

    r = check_elf_file(path, &size);
    if (r < 0) {
        set_msg(ret_msg, "%s: %s", path, r == -ENOEXEC ? "not an ELF file" : strerror(-r));
        return r;
    }
    dwfl = dwfl_begin(&s->callbacks);
    if (!dwfl)
        return -ENOMEM;
    dwfl_report_begin(dwfl);
    mod = dwfl_report_elf(dwfl, slash ? slash + 1 : path, path, -1, 0, true);
    if (dwfl_report_end(dwfl, NULL, NULL) != 0 || !mod) {
        set_msg(ret_msg, "%s: %s", path, dwfl_errmsg(-1));
        dwfl_end(dwfl);
        return -ENOEXEC;
    }
    r = module_adopt(m, dwfl, mod, id, id_len);
    if (r == -ESTALE)
        set_msg(ret_msg, "%s: the file has another build-id (replaced since loaded?)", path);
    else if (r < 0)
        set_msg(ret_msg, "%s: %s", path, dwfl_errmsg(-1));
    else
        m->file_bytes = size;
    return r;
}

/* Looks for the module by build-id in each absolute directory of the debuginfo path:
 * DIR/.build-id/xx/rest (a link to the binary, installed by debug packages), then
 * DIR/.build-id/xx/rest.debug (the separate debug file: it keeps the symbol table and
 * the program headers, so it resolves on its own). Returns 0 or -ENOENT. */
static int open_by_build_id(struct prof_symbols *s, struct sym_module *m, const uint8_t *id,
                            size_t id_len)
{
    char hex[2 * PROF_BUILD_ID_MAX + 1];
    char *path, *save = NULL, *dir;
    int r = -ENOENT;

    if (id_len < 2)
        return -ENOENT;
    for (size_t i = 0; i < id_len; i++)
        (void)snprintf(hex + 2 * i, 3, "%02x", id[i]);
    path = strdup(s->debuginfo_path ? s->debuginfo_path : DEFAULT_DEBUG_PATH);
    if (!path)
        return -ENOMEM;
    for (dir = strtok_r(path, ":", &save); dir && r < 0; dir = strtok_r(NULL, ":", &save)) {
        static const char *const suffixes[] = {"", ".debug"};

        if (dir[0] == '+' || dir[0] == '-')
            dir++;
        if (dir[0] != '/')
            continue;
        for (size_t i = 0; i < 2 && r < 0; i++) {
            char *file;

            if (asprintf(&file, "%s/.build-id/%.2s/%s%s", dir, hex, hex + 2, suffixes[i]) < 0) {
                free(path);
                return -ENOMEM;
            }
            r = open_file(s, m, file, id, id_len, NULL);
            free(file);
            if (r == -ENOMEM) {
                free(path);
                return r;
            }
            if (r < 0)
                r = -ENOENT;
        }
    }
    free(path);
    return r;
}

/* The vdso has no file, but every process of this kernel maps the same one: when the
 * wanted build-id is our own vdso's, libdwfl reads a copy of our image. Returns 0 or
 * -ENOENT. */
static int open_own_vdso(struct prof_symbols *s, struct sym_module *m, const uint8_t *id,
                         size_t id_len)
{
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)getauxval(AT_SYSINFO_EHDR);
    size_t size, mapped = 0;
    long page;
    Dwfl_Module *mod;
    Dwfl *dwfl;
    char *image;
    int r;

    if (!eh || id_len == 0 || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
        return -ENOENT;
    /* The section headers come last in the image the kernel maps. */
    size = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
    for (size_t i = 0; i < eh->e_phnum; i++) {
        const ElfW(Phdr) *ph = (const ElfW(Phdr) *)((const char *)eh + eh->e_phoff) + i;

        if (ph->p_type == PT_LOAD && ph->p_offset + ph->p_filesz > mapped)
            mapped = ph->p_offset + ph->p_filesz;
    }
    /* The kernel maps whole pages of the image: the section headers follow the loaded
     * bytes, inside the last page. */
    page = sysconf(_SC_PAGESIZE);
    if (page > 0)
        mapped = (mapped + (size_t)page - 1) & ~((size_t)page - 1);
    if (eh->e_shoff == 0 || size > mapped || size > MAX_VDSO_BYTES)
        return -ENOENT;
    image = malloc(size);
    if (!image)
        return -ENOMEM;
    memcpy(image, eh, size);
    dwfl = dwfl_begin(&s->callbacks);
    if (!dwfl) {
        free(image);
        return -ENOMEM;
    }
    dwfl_report_begin(dwfl);
    mod = dwfl_report_offline_memory(dwfl, "[vdso]", "[vdso]", image, size);
    if (dwfl_report_end(dwfl, NULL, NULL) != 0 || !mod) {
        dwfl_end(dwfl);
        free(image);
        return -ENOENT;
    }
    r = module_adopt(m, dwfl, mod, id, id_len);
    if (r < 0) {
        free(image);
        return -ENOENT;
    }
    m->image = image;
    m->file_bytes = size;
    return 0;
}

/* Opens m's module, trying in turn: the file at path, the build-id directories, our vdso.
 * Records the outcome in m (error, error_msg) and the stats, except -ENOMEM, which the
 * caller does not cache. */
static int module_open(struct prof_symbols *s, struct sym_module *m, const char *path,
                       const uint8_t *id, size_t id_len)
{
    char *msg = NULL;
    int r = -ENOENT, r2;

    if (path)
        r = open_file(s, m, path, id, id_len, &msg);
    if (r < 0 && r != -ENOMEM && id_len > 0) {
        r2 = open_by_build_id(s, m, id, id_len);
        if (r2 == 0 || r2 == -ENOMEM)
            r = r2;
    }
    if (r < 0 && r != -ENOMEM && !path && id_len > 0) {
        r2 = open_own_vdso(s, m, id, id_len);
        if (r2 == 0 || r2 == -ENOMEM)
            r = r2;
    }
    if (r == 0 || r == -ENOMEM) {
        free(msg);
        s->stats.modules_loaded += r == 0;
        return r;
    }
    if (!msg && !path) {
        char hex[2 * PROF_BUILD_ID_MAX + 1] = "";

        for (size_t i = 0; i < id_len; i++)
            (void)snprintf(hex + 2 * i, 3, "%02x", id[i]);
        if (asprintf(&msg, "no file found for build-id %s", hex) < 0)
            msg = NULL;
    }
    m->error = r;
    m->error_msg = msg;
    s->stats.modules_failed++;
    return r;
}

static struct sym_module *module_create(const struct sym_key *k, uint64_t hash)
{
    struct sym_module *m = calloc(1, sizeof(*m));

    if (!m)
        return NULL;
    m->hash = hash;
    if (k->build_id_len > 0)
        memcpy(m->build_id, k->build_id, k->build_id_len);
    m->build_id_len = k->build_id_len;
    m->dev = k->dev;
    m->ino = k->ino;
    m->mtime_ns = k->mtime_ns;
    m->size = k->size;
    if (k->path) {
        m->path = strdup(k->path);
        if (!m->path) {
            free(m);
            return NULL;
        }
    }
    return m;
}

/* Adds m, which is not in the table: the caller reserved room for it (so this cannot fail)
 * before opening it. */
static void module_insert(struct prof_symbols *s, struct sym_module *m)
{
    (void)fleetprof_map_set(&s->modules, m->hash, module_is, NULL, m, (uintptr_t)m);
    lru_push_front(s, m);
    account(s, m);
}

/* --- per-address entries ------------------------------------------------------------ */

static struct sym_entry *entry_find(const struct sym_module *m, uint64_t vaddr)
{
    uint64_t i;

    return fleetprof_map_find(&m->entry_index, fleetprof_map_mix64(vaddr), NULL, NULL, NULL, &i)
                   ? &m->entries[i]
                   : NULL;
}

/* Returns a zeroed entry for vaddr (not yet in the table), or NULL when out of memory. */
static struct sym_entry *entry_add(struct prof_symbols *s, struct sym_module *m, uint64_t vaddr)
{
    size_t entry_cap = m->entry_cap, index_cap = m->entry_index.cap;
    struct sym_entry *e = NULL;

    if (FLEETPROF_GROW(m->entries, m->entry_cap, m->entry_count + 1) == 0 &&
        fleetprof_map_set(&m->entry_index, fleetprof_map_mix64(vaddr), NULL, NULL, NULL,
                          m->entry_count) == 0) {
        e = &m->entries[m->entry_count++];
        memset(e, 0, sizeof(*e));
    }
    if (m->entry_cap != entry_cap || m->entry_index.cap != index_cap)
        account(s, m);
    return e;
}

/* Adds the size of the separate debug file once libdwfl has found one. */
static void count_debug_file(struct prof_symbols *s, struct sym_module *m)
{
    const char *mainfile = NULL, *debugfile = NULL;
    struct stat st;

    if (m->debug_counted)
        return;
    (void)dwfl_module_info(m->mod, NULL, NULL, NULL, NULL, NULL, &mainfile, &debugfile);
    if (!debugfile)
        return;
    m->debug_counted = true;
    if (mainfile && strcmp(mainfile, debugfile) == 0)
        return;
    if (stat(debugfile, &st) == 0) {
        m->file_bytes += (size_t)st.st_size;
        account(s, m);
    }
}

/* Returns the size of the .debug_* sections of dw's ELF as libdw holds them: debug packages
 * (Debian's, Fedora's) compress them, and libdw inflates them on the heap when it opens the
 * DWARF (measured: ~36 ms of the first file:line lookup in libc, for ~10 MB). */
static size_t dwarf_sections_bytes(Dwarf *dw)
{
    Elf *elf = dw ? dwarf_getelf(dw) : NULL;
    Elf_Scn *scn = NULL;
    size_t shstrndx, total = 0;

    if (!elf || elf_getshdrstrndx(elf, &shstrndx) != 0)
        return 0;
    while ((scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr shdr;
        const char *name;

        if (!gelf_getshdr(scn, &shdr) || shdr.sh_type == SHT_NOBITS)
            continue;
        name = elf_strptr(elf, shstrndx, shdr.sh_name);
        if (name && strncmp(name, ".debug_", 7) == 0)
            total += (size_t)shdr.sh_size;
    }
    return total;
}

/* Adds what libdw holds for the module's DWARF (and its dwz file), once it is loaded. */
static void count_dwarf(struct prof_symbols *s, struct sym_module *m)
{
    Dwarf_Addr bias;
    Dwarf *dw;

    if (m->dwarf_counted)
        return;
    m->dwarf_counted = true;
    dw = dwfl_module_getdwarf(m->mod, &bias); /* already loaded (or failed): cheap */
    if (!dw)
        return;
    m->file_bytes += dwarf_sections_bytes(dw) + dwarf_sections_bytes(dwarf_getalt(dw));
    account(s, m);
}

/* --- the cost rule: which modules get file:line ------------------------------------ */

/* What libdw would face opening the DWARF of one ELF file, from its section headers. */
struct dwarf_cost {
    bool present;        /* .debug_info, .debug_line or .debug_frame: libdw reads DWARF here */
    bool compressed;     /* some .debug_* section is SHF_COMPRESSED, or a .zdebug_* one */
    uint64_t file_bytes; /* the .debug_* / .zdebug_* sections' size in the file */
};

static void dwarf_cost_scan(Elf *elf, struct dwarf_cost *ret_cost)
{
    Elf_Scn *scn = NULL;
    size_t shstrndx;

    *ret_cost = (struct dwarf_cost){0};
    if (!elf || elf_getshdrstrndx(elf, &shstrndx) != 0)
        return;
    while ((scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr shdr;
        const char *name, *base;
        bool gnu_compressed;

        if (!gelf_getshdr(scn, &shdr) || shdr.sh_type == SHT_NOBITS)
            continue;
        name = elf_strptr(elf, shstrndx, shdr.sh_name);
        if (!name)
            continue;
        gnu_compressed = strncmp(name, ".zdebug_", 8) == 0;
        if (!gnu_compressed && strncmp(name, ".debug_", 7) != 0)
            continue;
        base = name + (gnu_compressed ? 8 : 7);
        if (strcmp(base, "info") == 0 || strcmp(base, "line") == 0 || strcmp(base, "frame") == 0)
            ret_cost->present = true;
        if (gnu_compressed || (shdr.sh_flags & SHF_COMPRESSED))
            ret_cost->compressed = true;
        ret_cost->file_bytes += shdr.sh_size;
    }
}

/* Scans the ELF file open at fd (borrowed). */
static void dwarf_cost_scan_fd(int fd, struct dwarf_cost *ret_cost)
{
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);

    dwarf_cost_scan(elf && elf_kind(elf) == ELF_K_ELF ? elf : NULL, ret_cost);
    if (elf)
        (void)elf_end(elf);
}

/* Scans path when it is a regular ELF file other than the module's own (main_st) that
 * carries the module's build-id (any file when id_len is 0), as libdwfl's search accepts
 * a debug file. Returns true when it does. */
static bool debug_candidate(const char *path, const struct stat *main_st, const void *id,
                            int id_len, struct dwarf_cost *ret_cost)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    const void *file_id = NULL;
    bool ok = false;
    struct stat st;
    Elf *elf;

    if (fd < 0)
        return false;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        (st.st_dev != main_st->st_dev || st.st_ino != main_st->st_ino)) {
        elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
        if (elf && elf_kind(elf) == ELF_K_ELF) {
            ssize_t n = dwelf_elf_gnu_build_id(elf, &file_id);

            ok = id_len <= 0 || (n == id_len && memcmp(file_id, id, (size_t)n) == 0);
            if (ok)
                dwarf_cost_scan(elf, ret_cost);
        }
        if (elf)
            (void)elf_end(elf);
    }
    (void)close(fd);
    return ok;
}

/* Tries name (and base, when not NULL) in the places one entry of the debuginfo path names
 * for a module file in directory dir (NULL: the current one), as libdwfl's
 * find_debuginfo_in_path() does: "" = dir; relative = dir/entry; absolute = entry/<dir>,
 * then entry/<dir minus its leading components>, ..., then entry itself. */
static bool debug_in_entry(const char *entry, const char *dir, const char *name, const char *base,
                           const struct stat *main_st, const void *id, int id_len,
                           struct dwarf_cost *ret_cost)
{
    const char *files[2] = {name, base};
    const char *sub = dir;
    char path[PATH_MAX];

    for (;;) {
        if (entry[0] == '/') {
            if (!dir || dir[0] != '/')
                return false;
            sub = strchr(sub, '/');
            if (sub)
                sub++;
            if (sub && !*sub)
                return false;
        }
        for (size_t i = 0; i < 2; i++) {
            int n;

            if (!files[i])
                continue;
            if (entry[0] == '/')
                n = sub ? snprintf(path, sizeof(path), "%s/%s/%s", entry, sub, files[i])
                        : snprintf(path, sizeof(path), "%s/%s", entry, files[i]);
            else if (entry[0])
                n = snprintf(path, sizeof(path), "%s/%s/%s", dir ? dir : ".", entry, files[i]);
            else
                n = snprintf(path, sizeof(path), "%s/%s", dir ? dir : ".", files[i]);
            if (n > 0 && (size_t)n < sizeof(path) &&
                debug_candidate(path, main_st, id, id_len, ret_cost))
                return true;
            if (entry[0] == '\0')
                break; /* the module's own directory: the given name only */
        }
        if (entry[0] != '/' || !sub)
            return false;
    }
}

/* Finds the separate debug file libdwfl's standard search (dwfl_standard_find_debuginfo)
 * would pick for m and scans it; returns true when one was found. The search is done here
 * because libdwfl runs it only inside dwfl_module_getdwarf(), which opens (inflates) the
 * DWARF at once, and the standard search cannot be run ahead on m's module: it attaches what
 * it finds to the module as a side effect. Same order: DIR/.build-id/xx/rest.debug for each
 * absolute DIR of the debuginfo path, then the .gnu_debuglink name (or NAME.debug) by path,
 * for the file's name and its real path; files must carry m's build-id. Not asked:
 * debuginfod (a file it would download is not vetted). */
static bool debug_file_cost(const struct prof_symbols *s, const struct sym_module *m,
                            const char *mainfile, struct dwarf_cost *ret_cost)
{
    const char *search = s->debuginfo_path ? s->debuginfo_path : ":.debug:" DEFAULT_DEBUG_PATH;
    const unsigned char *id = NULL;
    const char *link, *names[2];
    char *canon, *paths = NULL, *save, *entry, hex[2 * PROF_BUILD_ID_MAX + 1];
    GElf_Addr note_vaddr, bias;
    GElf_Word crc = 0;
    struct stat main_st = {0};
    int id_len = dwfl_module_build_id(m->mod, &id, &note_vaddr);
    bool found = false;

    (void)stat(mainfile, &main_st);
    if (id_len > 0 && (size_t)id_len <= PROF_BUILD_ID_MAX) {
        for (int i = 0; i < id_len; i++)
            (void)snprintf(hex + 2 * i, 3, "%02x", id[i]);
        paths = strdup(search);
        for (entry = paths ? strtok_r(paths, ":", &save) : NULL; entry && !found;
             entry = strtok_r(NULL, ":", &save)) {
            char path[PATH_MAX];
            int n;

            entry += entry[0] == '+' || entry[0] == '-';
            n = snprintf(path, sizeof(path), "%s/.build-id/%.2s/%s.debug", entry, hex, hex + 2);
            found = entry[0] == '/' && n > 0 && (size_t)n < sizeof(path) &&
                    debug_candidate(path, &main_st, id, id_len, ret_cost);
        }
        free(paths);
    }
    link = dwelf_elf_gnu_debuglink(dwfl_module_getelf(m->mod, &bias), &crc);
    canon = realpath(mainfile, NULL);
    names[0] = mainfile;
    names[1] = canon && strcmp(canon, mainfile) != 0 ? canon : NULL;
    for (size_t k = 0; k < 2 && !found; k++) {
        const char *slash = names[k] ? strrchr(names[k], '/') : NULL;
        const char *base = slash ? slash + 1 : names[k];
        char *dir = slash ? strndup(names[k], (size_t)(slash - names[k])) : NULL, *made = NULL;

        if (!names[k] || (slash && !dir) || (!link && asprintf(&made, "%s.debug", base) < 0)) {
            free(dir);
            continue;
        }
        paths = strdup(search);
        /* strsep, not strtok: an empty entry (the file's directory) counts. */
        for (char *rest = paths; rest && !found;) {
            entry = strsep(&rest, ":");
            entry += entry[0] == '+' || entry[0] == '-';
            found = debug_in_entry(entry, slash == names[k] ? "/" : dir, link ? link : made,
                                   link ? NULL : base, &main_st, id, id_len > 0 ? id_len : 0,
                                   ret_cost);
        }
        free(paths);
        free(made);
        free(dir);
    }
    free(canon);
    return found;
}

static void lines_refuse_if_costly(struct prof_symbols *s, struct sym_module *m,
                                   const struct dwarf_cost *cost)
{
    if (cost->compressed && cost->file_bytes > s->max_compressed_dwarf) {
        m->lines_refused = true;
        s->stats.modules_names_only++;
    }
}

/* The cost rule (symbols.h): returns whether m's file:line may be looked up. Decided once
 * per module, from the section headers of the file libdw would read DWARF from: m's file
 * when it has DWARF (libdw tries it first), else its separate debug file. Opening
 * compressed DWARF inflates all of it (libc's: 3.6 MiB to 9.6 MiB, 33-42 ms) before the
 * first line, while the symbol table that names functions is not compressed (< 1 ms). */
static bool lines_allowed(struct prof_symbols *s, struct sym_module *m)
{
    const char *mainfile = NULL, *debugfile = NULL;
    struct dwarf_cost cost;
    GElf_Addr bias;

    if (m->lines_checked)
        return !m->lines_refused;
    m->lines_checked = true;
    dwarf_cost_scan(dwfl_module_getelf(m->mod, &bias), &cost);
    if (cost.present || m->image) {
        lines_refuse_if_costly(s, m, &cost);
        return !m->lines_refused;
    }
    (void)dwfl_module_info(m->mod, NULL, NULL, NULL, NULL, NULL, &mainfile, &debugfile);
    if (debugfile && (!mainfile || strcmp(debugfile, mainfile) != 0)) {
        /* A file without .symtab had libdwfl find its debug file for the names. */
        int fd = open(debugfile, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

        if (fd >= 0) {
            dwarf_cost_scan_fd(fd, &cost);
            (void)close(fd);
        }
    } else if (!mainfile || !debug_file_cost(s, m, mainfile, &cost)) {
        return true; /* no debug file: dwfl_module_getdwarf() finds no DWARF, cheaply */
    }
    lines_refuse_if_costly(s, m, &cost);
    return !m->lines_refused;
}

/* Returns the length of a symbol name without its ELF version ("realpath@@GLIBC_2.3"
 * becomes "realpath"): debug files' .symtab spell versioned definitions that way. */
static size_t unversioned_len(const char *name)
{
    const char *at = strchr(name, '@');

    return at && at != name ? (size_t)(at - name) : strlen(name);
}

static int cmp_func(const void *a, const void *b)
{
    const struct sym_func *x = a, *y = b;

    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    return (x->rank < y->rank) - (x->rank > y->rank);
}

/* Which symbol names an address when several start there, as libdwfl prefers: one with a
 * size, a function, then global over weak over local (glibc's __getpid over its weak alias
 * getpid). */
static unsigned func_rank(const GElf_Sym *sym)
{
    unsigned type = GELF_ST_TYPE(sym->st_info), bind = GELF_ST_BIND(sym->st_info);
    unsigned rank = (sym->st_size > 0) << 3 | (type == STT_FUNC || type == STT_GNU_IFUNC) << 2;

    return rank | (bind == STB_GLOBAL ? 3 : bind == STB_WEAK ? 2 : bind == STB_LOCAL ? 1 : 0);
}

/* Builds m's sorted symbol table from libdwfl's view of it: .symtab (from the file or its
 * debug file) when there is one, else .dynsym, plus the .gnu_debugdata mini symbol table.
 * Returns 0 or -ENOMEM. */
static int build_funcs(struct prof_symbols *s, struct sym_module *m)
{
    int n = dwfl_module_getsymtab(m->mod);
    struct sym_func *funcs;
    size_t count = 0, out = 0;

    m->funcs_built = true;
    if (n <= 1)
        return 0;
    funcs = malloc((size_t)n * sizeof(*funcs));
    if (!funcs)
        return -ENOMEM;
    for (int i = 1; i < n; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        GElf_Word shndx;
        Elf *elf = NULL;
        Dwarf_Addr bias = 0;
        const char *name = dwfl_module_getsym_info(m->mod, i, &sym, &addr, &shndx, &elf, &bias);
        unsigned type = GELF_ST_TYPE(sym.st_info);

        if (!name || !name[0] || shndx == SHN_UNDEF || shndx == SHN_ABS || addr == 0)
            continue;
        if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE)
            continue;
        funcs[count].addr = addr;
        funcs[count].size = sym.st_size;
        funcs[count].end = UINT64_MAX;
        if (sym.st_size == 0 && elf) {
            /* A label names code up to the next symbol, but not past its section (_fini
             * must not name .plt or padding after .fini). */
            GElf_Shdr shdr;
            Elf_Scn *scn = elf_getscn(elf, shndx);

            if (scn && gelf_getshdr(scn, &shdr))
                funcs[count].end = shdr.sh_addr + shdr.sh_size + bias;
        }
        funcs[count].name = name;
        funcs[count].rank = func_rank(&sym);
        count++;
    }
    qsort(funcs, count, sizeof(*funcs), cmp_func);
    /* One entry per address: the preferred name, the largest size. */
    for (size_t i = 0; i < count; i++) {
        if (out > 0 && funcs[out - 1].addr == funcs[i].addr) {
            if (funcs[i].size > funcs[out - 1].size)
                funcs[out - 1].size = funcs[i].size;
            if (funcs[out - 1].size == 0 && funcs[i].end < funcs[out - 1].end)
                funcs[out - 1].end = funcs[i].end;
            continue;
        }
        funcs[out++] = funcs[i];
    }
    if (out == 0) {
        free(funcs);
        return 0;
    }
    m->funcs = funcs;
    m->func_count = out;
    account(s, m);
    return 0;
}

/* Returns the symbol naming module address addr, or NULL: the nearest one starting at or
 * before addr whose [start, start + size) contains it (looking back past a few nested
 * symbols), else the sizeless label that starts last at or before addr, within its
 * section. */
static const struct sym_func *find_func(const struct sym_module *m, uint64_t addr)
{
    size_t lo = 0, hi = m->func_count, idx;
    const struct sym_func *f;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (m->funcs[mid].addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    idx = lo - 1;
    for (size_t back = 0; back < 16 && back <= idx; back++) {
        f = &m->funcs[idx - back];
        if (f->size > 0 && addr - f->addr < f->size)
            return f;
    }
    f = &m->funcs[idx];
    /* A label runs up to the next symbol (which starts past addr) or its section's end. */
    return f->size == 0 && addr < f->end ? f : NULL;
}

/* libstdc++'s demangler (the Itanium C++ ABI's, which Rust's legacy symbols follow too):
 * declared here, as it has no C header. */
char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

char *prof_symbol_demangle(const char *name, size_t len)
{
    char *copy, *out;
    int status = -1;

    /* Only Itanium-mangled names; anything else (C, already readable) is left alone. */
    if (len < 3 || name[0] != '_' || name[1] != 'Z')
        return NULL;
    copy = strndup(name, len);
    if (!copy)
        return NULL;
    out = __cxa_demangle(copy, NULL, NULL, &status);
    free(copy);
    if (status != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* DW_EH_PE_datarel | DW_EH_PE_sdata4: .eh_frame_hdr's table as GNU ld writes it, each entry
 * two 32-bit offsets from the section's start (a function's first address, its FDE). */
#define EH_HDR_TABLE_DATAREL_SDATA4 0x3b
/* udata4, sdata4 and their pc-relative forms: the 4-byte encodings of the header's own two
 * fields that GNU ld and lld write. */
static bool eh_pe_is_4_bytes(uint8_t enc)
{
    return enc != 0xff && ((enc & 0x0f) == 0x03 || (enc & 0x0f) == 0x0b);
}

/* The first address (ELF vaddr) of the function that vaddr is in, from the search table of
 * the module's .eh_frame_hdr: the greatest start at or below vaddr. False without a table
 * this reads. */
static bool eh_frame_hdr_start(const struct sym_module *m, uint64_t vaddr, uint64_t *ret_start)
{
    GElf_Addr bias;
    Elf *elf = dwfl_module_getelf(m->mod, &bias);
    Elf_Scn *scn = NULL;
    size_t shstrndx;

    if (!elf || elf_getshdrstrndx(elf, &shstrndx) != 0)
        return false;
    while ((scn = elf_nextscn(elf, scn))) {
        GElf_Shdr shdr;
        const char *name;
        Elf_Data *data;
        const uint8_t *p;
        uint32_t count;
        size_t lo, hi;

        if (!gelf_getshdr(scn, &shdr) || !(name = elf_strptr(elf, shstrndx, shdr.sh_name)) ||
            strcmp(name, ".eh_frame_hdr") != 0)
            continue;
        data = elf_getdata(scn, NULL);
        p = data ? data->d_buf : NULL;
        /* version 1, then the encodings of eh_frame_ptr, fde_count and the table */
        if (!p || data->d_size < 12 || p[0] != 1 || !eh_pe_is_4_bytes(p[1]) ||
            !eh_pe_is_4_bytes(p[2]) || p[3] != EH_HDR_TABLE_DATAREL_SDATA4)
            return false;
        memcpy(&count, p + 8, sizeof(count));
        if (count == 0 || count > (data->d_size - 12) / 8)
            return false;
        /* The greatest entry whose start is at or below vaddr. */
        lo = 0;
        hi = count;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            int32_t rel;

            memcpy(&rel, p + 12 + mid * 8, sizeof(rel));
            if ((uint64_t)((int64_t)shdr.sh_addr + rel) <= vaddr)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == 0)
            return false;
        {
            int32_t rel;

            memcpy(&rel, p + 12 + (lo - 1) * 8, sizeof(rel));
            *ret_start = (uint64_t)((int64_t)shdr.sh_addr + rel);
        }
        return true;
    }
    return false;
}

/* Code that no symbol covers (a stripped program without its debug file): named by the start
 * of its function, "<module>+0x<start>" as addr2line takes it, so that the samples of a
 * function are one entry, not one per instruction. Stripping keeps .eh_frame: an FDE must
 * cover the address (its call-frame information, from libdw), and the search table of
 * .eh_frame_hdr gives the FDE's first address. Into buf; false when either is missing. */
static bool cfi_function_name(const struct sym_module *m, uint64_t vaddr, char *buf, size_t size)
{
    Dwarf_Addr bias;
    Dwarf_Frame *frame = NULL;
    Dwarf_CFI *cfi = dwfl_module_eh_cfi(m->mod, &bias);
    const char *slash = m->path ? strrchr(m->path, '/') : NULL;
    uint64_t start;
    int n;

    if (!m->path || !cfi || dwarf_cfi_addrframe(cfi, vaddr + m->bias - bias, &frame) != 0) {
        free(frame);
        return false;
    }
    free(frame);
    if (!eh_frame_hdr_start(m, vaddr, &start))
        return false;
    n = snprintf(buf, size, "%s+0x%" PRIx64, slash ? slash + 1 : m->path, start);
    return n > 0 && (size_t)n < size;
}

/* Resolves vaddr in m with libdwfl into e. Returns 0 or -ENOMEM. */
static int entry_resolve(struct prof_symbols *s, struct sym_module *m, uint64_t vaddr,
                         struct sym_entry *e)
{
    GElf_Addr addr = vaddr + m->bias;
    const struct sym_func *func;
    const char *name;
    char start_name[PATH_MAX + 32];

    /* The full .symtab names static functions too; without one (stripped, no debug file)
     * only .dynsym's exported functions are known. */
    if (!m->funcs_built && build_funcs(s, m) < 0)
        return -ENOMEM;
    func = find_func(m, addr);
    if (!func && cfi_function_name(m, vaddr, start_name, sizeof(start_name))) {
        e->function = str_pool_intern(&s->strings, start_name, strlen(start_name));
        if (!e->function)
            return -ENOMEM;
        count_debug_file(s, m);
        return 0;
    }
    if (!func) {
        e->status = -ENOENT;
        count_debug_file(s, m);
        return 0;
    }
    name = func->name;
    {
        /* C++ and Rust names readable wherever they are shown (profile, summary, exports):
         * `bitmap_set_bit(bitmap_head*, int)`, not `_Z14bitmap_set_bitP11bitmap_headi`. */
        size_t len = unversioned_len(name);
        char *demangled = prof_symbol_demangle(name, len);

        e->function = demangled ? str_pool_intern(&s->strings, demangled, strlen(demangled))
                                : str_pool_intern(&s->strings, name, len);
        free(demangled);
    }
    if (!e->function)
        return -ENOMEM;

    if (!s->names_only && lines_allowed(s, m)) {
        Dwfl_Line *line = dwfl_module_getsrc(m->mod, addr);
        const char *file = NULL;
        int lineno = 0;

        if (line)
            file = dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL);
        count_dwarf(s, m);
        if (file && file[0]) {
            char folded[PATH_MAX];
            size_t len = fold_path(file, folded, sizeof(folded));

            e->file = len > 0 ? str_pool_intern(&s->strings, folded, len)
                              : str_pool_intern(&s->strings, file, strlen(file));
            if (!e->file)
                return -ENOMEM;
            e->line = lineno > 0 ? (uint32_t)lineno : 0;
        }
    }
    count_debug_file(s, m);
    return 0;
}

/* --- API ----------------------------------------------------------------------------- */

int prof_symbols_new_with_options(const struct prof_symbols_options *options,
                                  struct prof_symbols **ret_symbols)
{
    struct prof_symbols *s;

    if (!ret_symbols)
        return -EINVAL;
    s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->limit = PROF_SYMBOLS_DEFAULT_LIMIT;
    s->max_modules = PROF_SYMBOLS_DEFAULT_MAX_MODULES;
    s->max_compressed_dwarf = PROF_SYMBOLS_DEFAULT_MAX_COMPRESSED_DWARF;
    if (options) {
        if (options->memory_limit_bytes > 0)
            s->limit = options->memory_limit_bytes;
        if (options->max_modules > 0)
            s->max_modules = options->max_modules;
        s->names_only = options->names_only;
        if (options->max_compressed_dwarf_bytes > 0)
            s->max_compressed_dwarf = options->max_compressed_dwarf_bytes;
        if (options->debuginfo_path) {
            s->debuginfo_path = strdup(options->debuginfo_path);
            if (!s->debuginfo_path) {
                free(s);
                return -ENOMEM;
            }
        }
    }

    s->callbacks.find_elf = dwfl_build_id_find_elf;
    s->callbacks.find_debuginfo = dwfl_standard_find_debuginfo;
    s->callbacks.section_address = dwfl_offline_section_address;
    s->callbacks.debuginfo_path = s->debuginfo_path ? &s->debuginfo_path : NULL;
    *ret_symbols = s;
    return 0;
}

int prof_symbols_new(size_t memory_limit_bytes, struct prof_symbols **ret_symbols)
{
    struct prof_symbols_options options = {.memory_limit_bytes = memory_limit_bytes};

    return prof_symbols_new_with_options(&options, ret_symbols);
}

struct prof_symbols *prof_symbols_free(struct prof_symbols *s)
{
    if (!s)
        return NULL;
    while (s->lru_head)
        module_drop(s, s->lru_head);
    fleetprof_map_free(&s->modules);
    str_pool_done(&s->strings);
    free(s->debuginfo_path);
    free(s);
    return NULL;
}

int prof_symbols_resolve(struct prof_symbols *s, const char *path, const uint8_t *build_id,
                         size_t build_id_len, uint64_t vaddr, struct prof_symbol *ret_symbol)
{
    struct sym_key key = {0};
    struct sym_module *m;
    struct sym_entry *e;
    uint64_t hash;
    int r;

    if (!s || !ret_symbol || (!path && build_id_len == 0) || (build_id_len > 0 && !build_id))
        return -EINVAL;
    key.build_id = build_id;
    key.build_id_len = build_id_len > PROF_BUILD_ID_MAX ? PROF_BUILD_ID_MAX : build_id_len;
    key.path = path;
    if (key.build_id_len == 0) {
        struct stat st;

        /* Without a build-id, a rebuilt file must not hit the old module: key on the
         * file's identity and version. A missing file gets an all-zero identity. */
        if (stat(path, &st) == 0) {
            key.dev = st.st_dev;
            key.ino = st.st_ino;
            key.mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
            key.size = (int64_t)st.st_size;
        }
    }
    hash = key_hash(&key);
    s->stats.lookups++;

    m = module_find(s, &key, hash);
    if (m) {
        lru_unlink(s, m);
        lru_push_front(s, m);
    } else {
        if (fleetprof_map_reserve(&s->modules, 1) < 0)
            return -ENOMEM;
        m = module_create(&key, hash);
        if (!m)
            return -ENOMEM;
        r = module_open(s, m, path, key.build_id, key.build_id_len);
        if (r == -ENOMEM) {
            module_free(m);
            return r; /* not cached: it may work next time */
        }
        module_insert(s, m);
    }
    if (m->error < 0) {
        set_error(s, "%s", m->error_msg ? m->error_msg : strerror(-m->error));
        r = m->error;
        enforce_limit(s, m);
        return r;
    }

    e = entry_find(m, vaddr);
    if (e) {
        s->stats.cache_hits++;
    } else {
        e = entry_add(s, m, vaddr);
        if (!e)
            return -ENOMEM;
        r = entry_resolve(s, m, vaddr, e);
        if (r < 0) {
            /* Leave a negative entry rather than a half-filled one. */
            e->function = e->file = NULL;
            e->line = 0;
            e->status = -ENOENT;
            return r;
        }
    }
    r = e->status;
    if (r == 0) {
        ret_symbol->function = e->function;
        ret_symbol->file = e->file;
        ret_symbol->line = e->line;
    } else {
        set_error(s, "%s: no symbol at 0x%" PRIx64,
                  m->path ? m->path : (m->image ? "[vdso]" : "module"), vaddr);
    }
    enforce_limit(s, m);
    return r;
}

int prof_symbols_resolve_address(struct prof_symbols *s, const struct prof_libs *libs,
                                 uint64_t runtime_addr, bool is_return_address,
                                 struct prof_symbol *ret_symbol, const struct prof_lib **ret_lib)
{
    const struct prof_lib *lib;
    struct prof_symbol sym;
    uint64_t vaddr;
    int r;

    if (!s || !libs || !ret_symbol)
        return -EINVAL;
    lib = prof_libs_lookup(libs, runtime_addr);
    if (!lib) {
        set_error(s, "0x%" PRIx64 ": in no module", runtime_addr);
        return -ENXIO;
    }
    vaddr = runtime_addr - lib->bias - (is_return_address ? 1 : 0);
    r = prof_symbols_resolve(s, lib->path, lib->build_id, lib->build_id_len, vaddr, &sym);
    if (r < 0)
        return r;
    *ret_symbol = sym;
    if (ret_lib)
        *ret_lib = lib;
    return 0;
}

void prof_symbols_get_stats(const struct prof_symbols *s, struct prof_symbols_stats *ret_stats)
{
    if (!s || !ret_stats)
        return;
    *ret_stats = s->stats;
    ret_stats->modules_cached = s->modules.count;
    ret_stats->string_bytes = s->strings.bytes;
    ret_stats->memory_bytes = s->module_bytes + s->strings.bytes;
}

const char *prof_symbols_get_last_error(const struct prof_symbols *s)
{
    return s ? s->last_error : "";
}
