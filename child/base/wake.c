/* child/base/wake.c - the sampler's wake-up, see wake.h. */
#include "child/base/wake.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

/* 1 when the sampler must stop sleeping. A plain sleep made every exit wait for the current
 * tick: up to a whole interval. */
static _Atomic uint32_t wake_word;

/* FUTEX_WAIT_BITSET takes an absolute monotonic timeout, with the same timer slack as
 * clock_nanosleep. */
void rt_wake_sleep_until(const struct timespec *ts)
{
    while (atomic_load(&wake_word) == 0) {
        long r = syscall(SYS_futex, &wake_word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, 0, ts, NULL,
                         FUTEX_BITSET_MATCH_ANY);

        if (r < 0 && errno == ETIMEDOUT)
            break;
    }
    atomic_store(&wake_word, 0);
}

void rt_sampler_wake(void)
{
    int saved_errno = errno;

    atomic_store(&wake_word, 1);
    (void)syscall(SYS_futex, &wake_word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, NULL, NULL, 0);
    errno = saved_errno;
}

void rt_wake_reset(void)
{
    atomic_store(&wake_word, 0);
}
