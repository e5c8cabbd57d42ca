/* child/ipc-module/uv-lazy.h - libuv for libfleetprof-ipc.so, reached through a table filled
 * when the module's IPC thread is first started (uv_lazy_load()).
 *
 * Most profiled processes never start that thread (a light connection, ipc.c), and loading
 * libuv cost each of them 0.27 ms of CPU (its mapping, relocations and unmapping: measured with
 * a program that only dlopen()s it). So the module does not link libuv: this header, included
 * first in every source of the module that calls it (meson: -include), declares libuv's
 * functions as usual and then names each one the module uses as a pointer of the table. A
 * libuv function missing from the table is an undefined symbol, which -z defs makes a link
 * error. The table's types are libuv's own (typeof), so a changed signature is a build error.
 */
#ifndef FLEETPROF_CHILD_IPC_MODULE_UV_LAZY_H
#define FLEETPROF_CHILD_IPC_MODULE_UV_LAZY_H

#include <uv.h>

#define UV_LAZY_FUNCTIONS(X) \
    X(uv_accept)             \
    X(uv_async_init)         \
    X(uv_async_send)         \
    X(uv_backend_fd)         \
    X(uv_buf_init)           \
    X(uv_close)              \
    X(uv_fileno)             \
    X(uv_is_active)          \
    X(uv_is_closing)         \
    X(uv_loop_close)         \
    X(uv_loop_init)          \
    X(uv_pipe_init)          \
    X(uv_pipe_open)          \
    X(uv_pipe_pending_count) \
    X(uv_read_start)         \
    X(uv_run)                \
    X(uv_shutdown)           \
    X(uv_timer_init)         \
    X(uv_timer_start)        \
    X(uv_timer_stop)         \
    X(uv_try_write)          \
    X(uv_write)

struct uv_lazy_table {
#define UV_LAZY_MEMBER(name) __typeof__(name) *name;
    UV_LAZY_FUNCTIONS(UV_LAZY_MEMBER)
#undef UV_LAZY_MEMBER
};

extern struct uv_lazy_table uv_lazy __attribute__((visibility("hidden")));

/* Loads libuv (RTLD_LOCAL) and fills the table, once; later calls return the first result.
 * 0, or -ELIBACC with why in reason (NUL-terminated). Never from a signal handler. */
int uv_lazy_load(char *reason, size_t reason_len) __attribute__((visibility("hidden")));

#ifndef UV_LAZY_NO_MACROS
#define uv_accept             (uv_lazy.uv_accept)
#define uv_async_init         (uv_lazy.uv_async_init)
#define uv_async_send         (uv_lazy.uv_async_send)
#define uv_backend_fd         (uv_lazy.uv_backend_fd)
#define uv_buf_init           (uv_lazy.uv_buf_init)
#define uv_close              (uv_lazy.uv_close)
#define uv_fileno             (uv_lazy.uv_fileno)
#define uv_is_active          (uv_lazy.uv_is_active)
#define uv_is_closing         (uv_lazy.uv_is_closing)
#define uv_loop_close         (uv_lazy.uv_loop_close)
#define uv_loop_init          (uv_lazy.uv_loop_init)
#define uv_pipe_init          (uv_lazy.uv_pipe_init)
#define uv_pipe_open          (uv_lazy.uv_pipe_open)
#define uv_pipe_pending_count (uv_lazy.uv_pipe_pending_count)
#define uv_read_start         (uv_lazy.uv_read_start)
#define uv_run                (uv_lazy.uv_run)
#define uv_shutdown           (uv_lazy.uv_shutdown)
#define uv_timer_init         (uv_lazy.uv_timer_init)
#define uv_timer_start        (uv_lazy.uv_timer_start)
#define uv_timer_stop         (uv_lazy.uv_timer_stop)
#define uv_try_write          (uv_lazy.uv_try_write)
#define uv_write              (uv_lazy.uv_write)
#endif /* !UV_LAZY_NO_MACROS */

#endif /* FLEETPROF_CHILD_IPC_MODULE_UV_LAZY_H */
