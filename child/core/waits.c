/* child/core/waits.c - where a thread waits: the blocking calls the program makes through
 * our interposers (child/entry/preload-waits.c) leave their call site here, so that the
 * sampler can draw the time a thread spends waiting at the stack where it waits, without
 * interrupting it (a signal would cut the wait short).
 *
 * The thread itself writes only a few words per call: the caller's return address, stack
 * and frame pointers (taken from the interposer's own frame), and a sequence number that is
 * odd while it waits. The sampler walks that stack later, on its own thread, from a copy:
 * the frames above the interposer do not change while the call blocks, and the sequence
 * number read again after the copy tells whether it still did (docs/threading.md,
 * "Waits").
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "child/core/core.h"

/* Nested calls (the runtime's own sleeps inside an interposed call) keep the outer one,
 * whose interposer's frame is wait_frame. A call left by a longjmp (a signal handler's
 * timeout) never ended: a new call made from higher up the stack than it shows that. */
static __thread unsigned wait_depth __attribute__((tls_model("initial-exec")));
static __thread uintptr_t wait_frame __attribute__((tls_model("initial-exec")));

void rt_wait_begin(uintptr_t frame, uintptr_t return_address, uintptr_t leaf)
{
    struct rt_thread *t = rt_self;
    uint32_t seq;

    if (wait_depth > 0 && frame > wait_frame)
        wait_depth = 0; /* the earlier call was left without its end */
    if (wait_depth++ > 0 || !t || !frame)
        return;
    wait_frame = frame;
    seq = atomic_load_explicit(&t->wait.seq, memory_order_relaxed);
    /* The interposer's frame: its saved frame pointer is the caller's, and the caller's
     * stack resumes just above the return address. */
    t->wait.regs.ip = return_address - 1; /* inside the call instruction */
    t->wait.regs.sp = frame + 16;
    t->wait.regs.bp = *(const uint64_t *)frame;
    t->wait.leaf = leaf;
    t->wait.since_ns = rt_now_ns();
    atomic_store_explicit(&t->wait.seq, seq | 1u, memory_order_release);
}

void rt_wait_end(void)
{
    struct rt_thread *t = rt_self;

    if (wait_depth == 0 || --wait_depth > 0 || !t)
        return;
    atomic_store_explicit(&t->wait.seq,
                          (atomic_load_explicit(&t->wait.seq, memory_order_relaxed) | 1u) + 1u,
                          memory_order_release);
}

/* The sampler's copy of a waiting thread's stack, and its unwinding (sampler-owned). */
static struct rt_capture walk;

int rt_wait_stack(struct rt_thread *t, uint32_t *ret_seq, uint64_t *ret_since_ns,
                  struct rt_capture **ret)
{
    uint32_t seq = atomic_load_explicit(&t->wait.seq, memory_order_acquire);
    uint64_t lo, hi;
    size_t len;

    if (!(seq & 1u))
        return -EAGAIN; /* not waiting */
    if (!walk.stack_copy && !(walk.stack_copy = malloc(RT_STACK_COPY_BYTES)))
        return -ENOMEM;
    walk.regs = t->wait.regs;
    walk.frames[0] = t->wait.leaf;
    *ret_since_ns = t->wait.since_ns;
    lo = walk.regs.sp;
    hi = t->stack_hi;
    if (lo < t->stack_lo || lo >= hi)
        return -EFAULT; /* not on the thread's stack as we know it */
    len = hi - lo < RT_STACK_COPY_BYTES ? hi - lo : RT_STACK_COPY_BYTES;
    memcpy(walk.stack_copy, (const void *)(uintptr_t)lo, len);
    walk.stack_copy_len = len;
    /* Still the same wait: the frames copied were those of that call. */
    if (atomic_load_explicit(&t->wait.seq, memory_order_acquire) != seq)
        return -EAGAIN;
    walk.flags = 0;
    walk.label_count = 0;
    if (rt.cfg.stackwalk == RT_STACKWALK_FP || rt_stackwalk_copy_init() < 0) {
        walk.frame_count =
                rt_fp_walk(walk.frames + 1, PROF_MAX_FRAMES - 1, walk.regs.ip, walk.regs.sp,
                           walk.regs.bp, lo, lo + len, walk.stack_copy, len);
    } else {
        rt_stackwalk_unwind_copy(&walk);
        memmove(walk.frames + 1, walk.frames, (PROF_MAX_FRAMES - 1) * sizeof(walk.frames[0]));
    }
    walk.frames[0] = t->wait.leaf;
    walk.frame_count =
            walk.frame_count + 1 > PROF_MAX_FRAMES ? PROF_MAX_FRAMES : walk.frame_count + 1;
    walk.cpu_delta_ns = 0;
    *ret_seq = seq;
    *ret = &walk;
    return 0;
}
