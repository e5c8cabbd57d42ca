#!/usr/bin/env python3
"""Programs that use SIGPROF themselves see what they would see without the profiler:
their own handler by every route, a blocked SIGPROF, and the disposition and mask an exec'd
program starts with; nor do programs that block every signal, take SIGPROF from a signalfd
or sigtimedwait, recurse deep under a small stack limit, run under RLIMIT_SIGPENDING of 1 or
make a user namespace see a signal of ours. Each case runs tests/workloads/wl-signals twice,
without and with LD_PRELOAD=libfleetprof.so, and compares what it reports; the counts
asserted are exact (handler calls while the program sends itself none, kill() calls, signals
from a tgkill), never rates.

Usage: test-signals.py BUILD_DIR   (meson passes it; output is TAP)
"""
import glob
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_check as pc  # noqa: E402
import taplib  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
WL = os.path.join(BUILD, "tests", "workloads", "wl-signals")


def run(tmp, argv, preload=True, timeout=60, ulimit=None):
    """Runs the workload; with ulimit (say "-s 1024"), under a shell that sets that limit and
    execs it. The shell execs env, which adds LD_PRELOAD: the shell itself is not profiled
    (the profile would be its, the exec's)."""
    e = {k: v for k, v in os.environ.items()
         if k != "LD_PRELOAD" and not k.startswith("FLEETPROF_")}
    cmd = [WL] + argv
    if preload:
        e.update({"FLEETPROF_STARTUP": "1", "FLEETPROF_OUTPUT": os.path.join(tmp, "p-%p.json")})
        if ulimit:
            cmd = ["env", f"LD_PRELOAD={LIB}"] + cmd
        else:
            e["LD_PRELOAD"] = LIB
    if ulimit:
        # dash (/bin/sh on Debian) has no `ulimit -i`; bash has every limit.
        shell = "sh"
        if ulimit.startswith("-i"):
            shell = shutil.which("bash")
            if not shell:
                raise taplib.Skip(f"no bash here for `ulimit {ulimit}`")
        cmd = [shell, "-c", f'ulimit {ulimit} && exec "$0" "$@"'] + cmd
    return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)


def lines(r, kind):
    return [line for line in r.stdout.splitlines() if line.startswith(kind + ":")]


def counts(r):
    out = {}
    for line in lines(r, "count"):
        k, v = line.split(":", 1)[1].strip().split("=")
        out[k] = float(v)
    return out


def both(tmp, argv, ulimit=None):
    """Runs argv without, then with the profiler; asserts the same exit and reports."""
    plain = run(tmp, argv, preload=False, ulimit=ulimit)
    assert plain.returncode == 0, f"{argv} fails even without the profiler: {plain.stderr}"
    prof = run(tmp, argv, ulimit=ulimit)
    assert prof.returncode == 0, \
        f"{argv} with the profiler ended with {prof.returncode} (-27: killed by SIGPROF): " \
        f"{prof.stderr}\n{prof.stdout}"
    assert lines(prof, "report") == lines(plain, "report"), \
        "the program saw something else with the profiler:\n" \
        + "\n".join(f"  without: {a}\n  with:    {b}"
                    for a, b in zip(lines(plain, "report"), lines(prof, "report")) if a != b) \
        + f"\n(all: {lines(prof, 'report')})"
    return plain, prof


def only_profile(tmp):
    paths = sorted(glob.glob(os.path.join(tmp, "p-*.json")))
    assert len(paths) == 1, f"expected one profile, found {paths}"
    doc = pc.load(paths[0])
    problems = pc.check_profile(doc)
    assert not problems, f"{paths[0]} is not a valid profile:\n" + "\n".join(problems[:20])
    return doc


def runtime_log(doc):
    return doc["profilingLog"][str(doc["meta"]["fleetprof"]["pid"])]["runtime"]


def samples_in(doc, function):
    return sum(1 for t in doc["threads"] for s in pc.sample_stacks(t) if function in s)


KILLS = 25


def own_handler(tmp, how):
    # The handler is installed by `how`; the program spins 100 ms of CPU sending itself no
    # SIGPROF, then runs its own ITIMER_PROF (10 ms) for 0.3 s of CPU and kill()s itself
    # KILLS times. Before, every route but sigaction() and signal() replaced the runtime's
    # handler with glibc's own __sigaction: the program's handler got our 1 kHz of samples.
    plain, prof = both(tmp, ["own", how, "0.3", str(KILLS)])
    for r, who in ((plain, "without"), (prof, "with")):
        c = counts(r)
        assert c["quiet_calls"] == 0, \
            f"{who} the profiler, {how}: its handler ran {c['quiet_calls']:.0f} times while " \
            "the program sent itself no SIGPROF"
        assert c["itimer_calls"] >= 1, f"{who}: its handler never ran for its ITIMER_PROF"
        assert c["kill_calls"] == KILLS, f"{who}: {c['kill_calls']} of {KILLS} kills handled"
        assert c["tkill_calls"] == 0, f"{who}: {c['tkill_calls']} of our samples reached it"
    return only_profile(tmp)


def test_own_handler_by_sigaction(tmp):
    doc = own_handler(tmp, "sigaction")
    assert runtime_log(doc)["samplingStopped"] == ""
    assert samples_in(doc, "wl_spin") > 0, "no samples of the program"


def test_own_handler_by_signal_bsd_signal_and_ssignal(tmp):
    for how in ("signal", "bsd_signal", "ssignal"):
        sub = os.path.join(tmp, how)
        os.mkdir(sub)
        assert runtime_log(own_handler(sub, how))["samplingStopped"] == ""


def test_own_handler_by_sysv_signal_one_shot(tmp):
    # One-shot: the handler puts itself back each time; SA_RESETHAND and SA_NODEFER read
    # back as set.
    for how in ("sysv_signal", "__sysv_signal"):
        sub = os.path.join(tmp, how)
        os.mkdir(sub)
        doc = own_handler(sub, how)
        assert runtime_log(doc)["samplingStopped"] == ""
        assert samples_in(doc, "wl_spin") > 0, "no samples of the program"


def test_own_handler_by_sigset_with_sig_hold(tmp):
    # Return values and masks of sigset(own), sigset(SIG_HOLD) twice, sigset(own) again are
    # in the reports compared with the run without the profiler.
    doc = own_handler(tmp, "sigset")
    assert runtime_log(doc)["samplingStopped"] == ""
    assert samples_in(doc, "wl_spin") > 0, "no samples of the program"


def raw_handler(tmp, how):
    doc = own_handler(tmp, how)
    stopped = runtime_log(doc)["samplingStopped"]
    assert "rt_sigaction" in stopped, f"the profile does not say why sampling stopped: {stopped!r}"
    return doc


def test_own_handler_by_raw_rt_sigaction_stops_sampling_and_says_so(tmp):
    # A raw rt_sigaction system call cannot be interposed. The program reads its action back
    # with sigaction() at once: that call finds the kernel's action is not ours.
    raw_handler(tmp, "raw")


def test_raw_rt_sigaction_never_read_back_is_found_by_the_sampler(tmp):
    # No sigaction() call after the replacement: the sampler's own check finds it before
    # its next signal. (A sample sent in the microseconds before the replacement could
    # still reach the program's handler: the workload replaces it while idle.)
    raw_handler(tmp, "raw-unread")


def test_blocked_sigprof_is_harmless(tmp):
    # The main thread and a second thread spin with SIGPROF blocked (our samples wait), the
    # thread ends so; the main thread unblocks and goes on. The program's own handler gets
    # none of ours, the program does not die, and it is sampled once it unblocks.
    plain, prof = both(tmp, ["block", "0.2"])
    assert counts(prof)["tkill_calls"] == 0, "our samples reached the program's handler"
    doc = only_profile(tmp)
    assert samples_in(doc, "wl_spin_unblocked") > 0, "no samples once SIGPROF was unblocked"


def exec_report(tmp, setup):
    plain, prof = both(tmp, ["exec", setup, "0.05"])
    exec_lines = [line for line in lines(prof, "report") if "exec'd" in line]
    assert any("survived" in line for line in exec_lines), prof.stdout
    return exec_lines


def test_exec_default_disposition_stays_default(tmp):
    # Before, the runtime ignored SIGPROF before exec: the new program started with it
    # ignored.
    got = exec_report(tmp, "default")
    assert "report: exec'd handler=SIG_DFL flags= blocked=0" in got, got
    assert "report: exec'd pending=0 SigIgn=0 SigBlk=0 SigPnd=0 ShdPnd=0" in got, got


def test_exec_program_handler_becomes_default(tmp):
    got = exec_report(tmp, "handler")
    assert "report: exec'd handler=SIG_DFL flags= blocked=0" in got, got


def test_exec_ignored_stays_ignored(tmp):
    got = exec_report(tmp, "ignore")
    assert "report: exec'd pending=0 SigIgn=1 SigBlk=0 SigPnd=0 ShdPnd=0" in got, got


def test_exec_blocked_mask_kept_and_no_sample_pending(tmp):
    # The program spins with SIGPROF blocked: a sample of ours waits on it when it execs.
    # It must not cross the exec (with SIG_DFL it kills the new program when it unblocks).
    got = exec_report(tmp, "block")
    assert "report: exec'd pending=0 SigIgn=0 SigBlk=1 SigPnd=0 ShdPnd=0" in got, got
    got = exec_report(tmp, "ignore-block")
    assert "report: exec'd pending=0 SigIgn=1 SigBlk=1 SigPnd=0 ShdPnd=0" in got, got


def test_a_failed_exec_changes_nothing_and_sampling_goes_on(tmp):
    # A sample of ours waits (SIGPROF blocked) when an exec fails: the exec took it, so the
    # runtime signals that thread again; without that the thread was never sampled again.
    plain, prof = both(tmp, ["exec-fail", "0.2"])
    doc = only_profile(tmp)
    assert samples_in(doc, "wl_after_failed_exec") > 0, "no samples after the failed exec"


NO_STACK = "(no stack"
ENDED_UNSAMPLED = "(no stack: the thread ended before its first sample)"


def other_threads(doc):
    """The program's threads but its main one."""
    pid = doc["meta"]["fleetprof"]["pid"]
    return [t for t in doc["threads"] if str(t["tid"]) != str(pid)]


def stack_kinds(t):
    """{"real": samples with a stack of the program, pseudo-frame text: samples without}."""
    kinds = {}
    for s in pc.sample_stacks(t):
        key = s[0] if len(s) == 1 and s[0].startswith(NO_STACK) else "real"
        kinds[key] = kinds.get(key, 0) + 1
    return kinds


def test_thread_blocking_every_signal_sees_none_of_ours(tmp):
    # A thread blocks every signal and spins 1 s of its own CPU in blocked_spin, then asks
    # sigpending(): before, a sample of ours waited there (pending_sigprof=1), and the
    # thread, which ran the whole time, was said to have ended before its first sample.
    both(tmp, ["block-all-thread", "1"])
    doc = only_profile(tmp)
    pid = str(doc["meta"]["fleetprof"]["pid"])
    assert "runtime" in doc.get("profilingLog", {}).get(pid, {}), \
        f"no profilingLog[{pid}].runtime: {sorted(doc.get('profilingLog', {}))}"
    threads = other_threads(doc)
    assert len(threads) == 1, f"threads besides the main one: {[t['name'] for t in threads]}"
    kinds = stack_kinds(threads[0])
    assert kinds, "the thread that spun 1 s has no samples"
    wrong = {k: n for k, n in kinds.items() if k != "real" and "blocks" not in k}
    assert not wrong, f"samples of the blocking thread without a stack, for a reason other " \
        f"than its blocking the signal: {wrong} (all: {kinds})"


def consumer(tmp, way):
    # The program blocks SIGPROF and takes it itself (way: signalfd, sigtimedwait) while its
    # ITIMER_PROF (10 ms) runs for 0.5 s of its CPU. Its timer's signals come with SI_KERNEL;
    # a sample of ours (SI_TKILL) taken by it is counted as foreign.
    plain, prof = both(tmp, [way, "0.5"])
    assert "report: got_some=1" in lines(plain, "report"), \
        f"its own ITIMER_PROF never reached it, even without the profiler: {plain.stdout}"


def test_signalfd_reads_only_the_programs_own_sigprof(tmp):
    consumer(tmp, "signalfd")


def test_sigtimedwait_takes_only_the_programs_own_sigprof(tmp):
    consumer(tmp, "sigtimedwait")


def test_deep_recursion_under_a_small_stack_limit(tmp):
    # 1,010 frames of ~700 bytes under `ulimit -s 1024`, the samples landing at the bottom:
    # the program fits with room to spare, and a handler of ours on its stack must too.
    plain, prof = both(tmp, ["deep-recursion", "0.3"], ulimit="-s 1024")
    spare = counts(plain)["stack_spare_kib"]
    assert spare >= 150, f"only {spare:.0f} KiB of the 1 MiB stack left at the bottom " \
        "without the profiler: the test needs ~150"
    assert "report: depth=1010" in lines(prof, "report"), prof.stdout
    assert samples_in(only_profile(tmp), "wl_spin") > 0, \
        "no samples at the bottom of the recursion: the case proved nothing"


def test_the_programs_signals_during_samples_all_arrive_in_order(tmp):
    # The handler's walk blocks every signal for its length (libunwind's own mask changes
    # are then left undone): a program's queued real-time signals that arrive meanwhile wait
    # and are delivered after it, every one and in order, as without us. 400 signals while
    # the main thread spins 0.4 s at the bottom of a deep recursion, where walks are long.
    plain, prof = both(tmp, ["rt-flood", "0.4", "400"])
    assert "report: received=400 in_order=1" in lines(prof, "report"), prof.stdout
    assert "report: blocked_held=1 unblocked_delivered=1" in lines(prof, "report"), prof.stdout
    assert samples_in(only_profile(tmp), "wl_spin") > 0, \
        "no samples at the bottom of the recursion: the case proved nothing"


def test_rlimit_sigpending_of_one(tmp):
    # `ulimit -i 1`: the user may have one signal queued with its siginfo. A second sample
    # of ours in flight then arrives without one (si_code SI_USER, no pid), like a kill()
    # of the program's. Two threads spin 0.5 s each in sigpending_spin.
    both(tmp, ["rlimit-sigpending", "0.5"], ulimit="-i 1")
    doc = only_profile(tmp)
    threads = other_threads(doc)
    assert len(threads) == 2, f"threads besides the main one: {[t['name'] for t in threads]}"
    for t in threads:
        kinds = stack_kinds(t)
        assert ENDED_UNSAMPLED not in kinds, \
            f"{t['name']} spun 0.5 s but is said to have ended before its first sample: {kinds}"
        sampled = any("sigpending_spin" in s for s in pc.sample_stacks(t))
        unexplained = {k: n for k, n in kinds.items()
                       if k != "real" and "RLIMIT_SIGPENDING" not in k}
        assert sampled or (kinds and not unexplained), \
            f"{t['name']}: no sample in sigpending_spin, and samples without a stack that do " \
            f"not name RLIMIT_SIGPENDING: {kinds}"


UNSHARE_GAP = ("the runtime's threads make the process multithreaded: unshare(CLONE_NEWUSER) "
               "fails with EINVAL until no thread is started before the program needs one "
               "(documented)")


def test_mask_changes_leave_errno_and_the_mask_as_without_us(tmp):
    # The runtime's sigprocmask()/pthread_sigmask() (they stop a thread's timer while it
    # blocks SIGPROF) left EINVAL in errno after a successful call: PostgreSQL's postmaster
    # restores its mask between a select() cut short and its check of errno, and shut down.
    both(tmp, ["mask-errno"])


def test_unshare_user_namespace(tmp):
    # unshare(CLONE_NEWUSER) needs a single-threaded process. A known, documented gap.
    plain = run(tmp, ["unshare-user"], preload=False)
    assert plain.returncode == 0, plain.stderr
    if lines(plain, "report") != ["report: unshare=0"]:
        raise taplib.Skip(f"unshare(CLONE_NEWUSER) fails even without the profiler "
                          f"({lines(plain, 'report')}): user namespaces are not allowed here")
    prof = run(tmp, ["unshare-user"])
    assert prof.returncode == 0, f"with the profiler: {prof.returncode}: {prof.stderr}"
    if lines(prof, "report") == ["report: unshare=EINVAL"]:
        raise taplib.Skip(UNSHARE_GAP)
    assert lines(prof, "report") == lines(plain, "report"), \
        f"with the profiler: {lines(prof, 'report')}, without: {lines(plain, 'report')}"


taplib.run([
    test_mask_changes_leave_errno_and_the_mask_as_without_us,
    test_own_handler_by_sigaction,
    test_own_handler_by_signal_bsd_signal_and_ssignal,
    test_own_handler_by_sysv_signal_one_shot,
    test_own_handler_by_sigset_with_sig_hold,
    test_own_handler_by_raw_rt_sigaction_stops_sampling_and_says_so,
    test_raw_rt_sigaction_never_read_back_is_found_by_the_sampler,
    test_blocked_sigprof_is_harmless,
    test_exec_default_disposition_stays_default,
    test_exec_program_handler_becomes_default,
    test_exec_ignored_stays_ignored,
    test_exec_blocked_mask_kept_and_no_sample_pending,
    test_a_failed_exec_changes_nothing_and_sampling_goes_on,
    test_thread_blocking_every_signal_sees_none_of_ours,
    test_signalfd_reads_only_the_programs_own_sigprof,
    test_sigtimedwait_takes_only_the_programs_own_sigprof,
    test_deep_recursion_under_a_small_stack_limit,
    test_the_programs_signals_during_samples_all_arrive_in_order,
    test_rlimit_sigpending_of_one,
    test_unshare_user_namespace,
])
