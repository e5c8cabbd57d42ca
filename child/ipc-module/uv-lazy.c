/* child/ipc-module/uv-lazy.c - the module's libuv table (uv-lazy.h), filled on first need. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

/* Not uv-lazy.h's macros here: this file fills the table by name. */
#include <uv.h>

#define UV_LAZY_NO_MACROS
#include "child/ipc-module/uv-lazy.h"

struct uv_lazy_table uv_lazy;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_result = -ELIBACC;
static char load_reason[200];

static void load(void)
{
    void *handle = dlopen("libuv.so.1", RTLD_NOW | RTLD_LOCAL);
    const char *e;

    if (!handle) {
        e = dlerror();
        (void)snprintf(load_reason, sizeof(load_reason), "%s", e ? e : "libuv.so.1");
        return;
    }
#define UV_LAZY_RESOLVE(name)                                                            \
    if (!(*(void **)&uv_lazy.name = dlsym(handle, #name))) {                             \
        (void)snprintf(load_reason, sizeof(load_reason), "libuv.so.1 has no %s", #name); \
        return;                                                                          \
    }
    UV_LAZY_FUNCTIONS(UV_LAZY_RESOLVE)
#undef UV_LAZY_RESOLVE
    load_result = 0; /* the handle is kept: never unloaded, as the module itself */
}

int uv_lazy_load(char *reason, size_t reason_len)
{
    (void)pthread_once(&once, load);
    if (load_result < 0 && reason && reason_len)
        (void)snprintf(reason, reason_len, "%s", load_reason);
    return load_result;
}
