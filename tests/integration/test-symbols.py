#!/usr/bin/env python3
"""Integration tests of the daemon's symbol service (issue 7): a child connected to
fleetprofd does not load debug info; its profiles (gathers and exit profiles) get their
names and lines from the daemon, which opens each module once for the whole fleet.

Workloads wait with a known stack (tests/workloads/sym-wait.c):
  read (libc) <- sym_wait_block <- sym_wait_probe <- sym_lib_static_fn <- sym_lib_global_fn
  (libsym-lib.so) <- main

Usage: test-symbols.py BUILD_DIR   (TAP output)
"""
import ctypes
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_check as pc  # noqa: E402
import taplib  # noqa: E402
from daemon_helper import Daemon  # noqa: E402
from wire import capture_ok, field, frame, read_frames, read_varint  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
CLI = os.path.join(BUILD, "tools", "fleetprof")
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")
SYM_WAIT = os.path.join(BUILD, "tests", "integration", "sym-wait")
NOSYMS = os.path.join(BUILD, "tests", "integration", "libsym-wait-nosyms.so")
SYM_LIB = os.path.join(BUILD, "tests", "unit", "profile", "libsym-lib.so")
WL_CXX = os.path.join(BUILD, "tests", "workloads", "wl-cxx")
HELLO, SYMBOLIZE, SYMBOLS = 1, 16, 17

# The wait stack, innermost last, as (function, module) pairs.
WAIT_STACK = [("main", "sym-wait"), ("sym_lib_global_fn", "libsym-lib.so"),
              ("sym_lib_static_fn", "libsym-lib.so"), ("sym_wait_probe", "sym-wait"),
              ("sym_wait_block", "sym-wait")]


# The cost rule (profile/symbols.h): no file:line in a module whose DWARF is compressed
# and over PROF_SYMBOLS_DEFAULT_MAX_COMPRESSED_DWARF; names always.
MAX_COMPRESSED_DWARF = 1 << 20


def elf_sections(data):
    """(name, flags, offset, size) of each section of a 64-bit little-endian ELF image."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3a)
    hdrs = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = hdrs[shstrndx][4]
    out = []
    for name, typ, flags, _, off, size in hdrs:
        end = data.index(b"\0", strtab + name)
        out.append((data[strtab + name:end].decode(), typ, flags, off, size))
    return out


def libc_compressed_dwarf_bytes():
    """Size of the compressed .debug_* sections of the installed debug file of the libc this
    process maps (/usr/lib/debug/.build-id/...), or 0 when there is none or it is not
    compressed."""
    with open(libc_mapping()[0], "rb") as f:
        data = f.read()
    if data[4] != 2 or data[5] != 1:
        return 0
    build_id = None
    for name, _, _, off, size in elf_sections(data):
        if name == ".note.gnu.build-id":
            namesz, descsz, _ = struct.unpack_from("<III", data, off)
            start = off + 12 + (namesz + 3) // 4 * 4
            build_id = data[start:start + descsz].hex()
    if not build_id:
        return 0
    path = f"/usr/lib/debug/.build-id/{build_id[:2]}/{build_id[2:]}.debug"
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        data = f.read()
    total, compressed = 0, False
    for name, typ, flags, _, size in elf_sections(data):
        if typ != 8 and name.startswith((".debug_", ".zdebug_")):  # 8: SHT_NOBITS
            total += size
            compressed |= bool(flags & 0x800) or name.startswith(".zdebug_")  # SHF_COMPRESSED
    return total if compressed else 0


def env(d=None, **extra):
    e = dict(os.environ, LD_PRELOAD=LIB, FLEETPROF_STARTUP="1", FLEETPROF_STACKWALK="dwarf")
    e.pop("FLEETPROF_SOCKET", None)
    if d:
        e["FLEETPROF_SOCKET"] = d.sock
    e.update({k: str(v) for k, v in extra.items()})
    return e


def start_wait(e, *args, exe=SYM_WAIT):
    p = subprocess.Popen([exe, *args], env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    line = p.stdout.readline()
    assert line.strip() == "ready", f"workload said {line!r}"
    time.sleep(0.3)  # a few samples in the wait
    return p


def finish(p):
    p.stdin.close()
    assert p.wait(timeout=20) == 0


def checked(path):
    doc = pc.load(path)
    problems = pc.check_profile(doc)
    assert not problems, f"{path}: " + "; ".join(problems[:5])
    return doc


def runtime_log(proc):
    (log,) = proc["profilingLog"].values()
    return log["runtime"]


def wait_frames(proc):
    """(location, line) of every frame of the main thread's stacks blocked in
    sym_wait_block."""
    chains = []
    for t in proc["threads"]:
        st, frames = t["stringTable"], t["frameTable"]["data"]
        stacks = t["stackTable"]["data"]
        for s in {row[0] for row in t["samples"]["data"] if row[0] is not None}:
            chain, i = [], s
            while i is not None:
                prefix, f = stacks[i][0], stacks[i][1]
                chain.append((st[frames[f][0]], frames[f][4]))
                i = prefix
            if any(loc.startswith("sym_wait_block ") or loc.startswith("sym_wait_probe ")
                   for loc, _ in chain):
                block = [line for loc, line in chain if loc.startswith("sym_wait_block ")]
                chains.append((block[0] if block else None, chain))
    # The process sits in read() at one line of sym_wait_block for the whole test. A sample
    # that lands while it prints "ready" (stdio frames, another line) or before it blocks is
    # a matter of timing, not of symbols: two runs must not be compared on it.
    lines = [line for line, _ in chains if line is not None]
    if lines:
        blocked = max(set(lines), key=lines.count)
        chains = [(line, chain) for line, chain in chains if line == blocked]
    return {frame for _, chain in chains for frame in chain}


def assert_wait_stack(frames, resolved_libsym=True):
    names = {loc for loc, _ in frames}
    for fn, mod in WAIT_STACK:
        if mod == "libsym-lib.so" and not resolved_libsym:
            continue
        loc = f"{fn} (in {mod})"
        assert loc in names, f"{loc} missing from {sorted(names)}"
        lines = [line for l, line in frames if l == loc]
        assert all(isinstance(x, int) and x > 0 for x in lines), f"{loc}: no line ({lines})"
    libc = [(loc, line) for loc, line in frames if loc.endswith("(in libc.so.6)")]
    assert libc, f"no libc frame: {names}"
    if LIBC_NAMES_ONLY:
        # libc's packaged DWARF is compressed and large: names, no lines (the cost rule).
        assert all(not line for _, line in libc), f"libc frames with lines: {libc}"


def one_process(doc, pid):
    procs = [p for p in doc["processes"] if p["meta"]["fleetprof"]["pid"] == pid]
    assert len(procs) == 1, f"pid {pid}: {len(procs)} processes"
    return procs[0]


def samples_by_time(proc):
    """{time: (location, line) chain, innermost first} of every sample with a stack."""
    out = {}
    for t in proc["threads"]:
        st, frames = t["stringTable"], t["frameTable"]["data"]
        stacks = t["stackTable"]["data"]
        for row in t["samples"]["data"]:
            chain, i = [], row[0]
            while i is not None:
                f = stacks[i][1]
                chain.append((st[frames[f][0]], frames[f][4]))
                i = stacks[i][0]
            if chain:
                out[(t["tid"], row[1])] = tuple(chain)
    return out


def test_service_gives_the_local_symbols(tmp):
    # One process, two symbolizers over the same samples: its gather is resolved by the
    # daemon; then the daemon goes away and its profile at exit (FLEETPROF_OUTPUT) is
    # resolved locally. Comparing samples of equal time compares the same addresses, which
    # two runs could not do: where a run's thread was last sampled before it blocked is a
    # matter of timing.
    local_out = os.path.join(tmp, "local.json")
    d = Daemon(tmp)
    try:
        p = start_wait(env(d, FLEETPROF_OUTPUT=local_out))
        out = os.path.join(tmp, "gather.json")
        capture_ok(d.sock, out)
        gathered = one_process(checked(out), p.pid)
        st = d.status()
    finally:
        d.stop()
    finish(p)
    local = checked(local_out)
    assert local["meta"]["fleetprof"]["pid"] == p.pid
    log = runtime_log(local)
    assert log["symbolModulesLoaded"] >= 3 and log["symbolServiceBatches"] == 0, log
    log = runtime_log(gathered)
    assert log["symbolModulesLoaded"] == 0, f"the child loaded symbols: {log}"
    assert log["symbolServiceBatches"] >= 1 and log["symbolServiceFailures"] == 0, log
    assert log["symbolServiceUnresolved"] == 0, log
    for doc in (gathered, local):
        assert_wait_stack(wait_frames(doc))
    service, resolved = samples_by_time(gathered), samples_by_time(local)
    shared = service.keys() & resolved.keys()
    assert len(shared) >= 0.9 * len(service) and len(shared) >= 100, \
        f"{len(shared)} of {len(service)} gathered samples are in the exit profile"
    differ = sorted(k for k in shared if service[k] != resolved[k])
    assert not differ, (f"{len(differ)} samples differ, e.g. at {differ[0]}: service "
                        f"{service[differ[0]]} vs local {resolved[differ[0]]}")
    assert st["symbol_modules_loaded"] >= 3, st
    if LIBC_NAMES_ONLY:
        assert "libc.so.6: names only" in d.log(), "the daemon did not log libc's cost rule"
        assert st["symbol_modules_names_only"] >= 1, st
    else:
        assert st["symbol_modules_names_only"] == 0, st


def test_exit_profile_is_resolved_by_the_service(tmp):
    d = Daemon(tmp)
    try:
        p = start_wait(env(d))
        finish(p)
        out = os.path.join(tmp, "exit.json")
        capture_ok(d.sock, out)
        exited = one_process(checked(out), p.pid)
        assert exited["meta"]["fleetprof"]["exit"] is True
        log = runtime_log(exited)
        assert log["symbolModulesLoaded"] == 0, f"the child loaded symbols: {log}"
        assert log["symbolServiceBatches"] >= 1 and log["symbolServiceFailures"] == 0, log
        assert log["symbolServiceUnresolved"] == 0, \
            (log, [t["stringTable"][row[t["frameTable"]["schema"]["location"]]]
                   for t in exited["threads"] for row in t["frameTable"]["data"]
                   if "0x" in t["stringTable"][row[t["frameTable"]["schema"]["location"]]]])
        assert_wait_stack(wait_frames(exited))
    finally:
        d.stop()


def test_fleet_loads_each_module_once(tmp):
    d = Daemon(tmp)
    pids = []
    try:
        def run_batch(n, parallel=10):
            for start in range(0, n, parallel):
                # 50 ms of CPU each, however long a busy machine makes that take.
                procs = [subprocess.Popen([WORKLOAD, "--cpu", "busy", "0.05"], env=env(d))
                         for _ in range(min(parallel, n - start))]
                pids.extend(p.pid for p in procs)
                for p in procs:
                    rc = p.wait(timeout=60)
                    assert rc == 0, f"child {p.pid} ended with {rc} (negative: killed by that signal)"

        run_batch(100)
        st = d.status()
        out = os.path.join(tmp, "fleet.json")
        capture_ok(d.sock, out)
        doc = checked(out)
        # Per child first: which one, and what its runtime says, if one went wrong.
        missing = set(pids) - {p["meta"]["fleetprof"]["pid"] for p in doc["processes"]}
        assert not missing, [(pid, [line for line in d.log().splitlines() if str(pid) in line])
                             for pid in sorted(missing)[:3]]
        sampled, unsampled = 0, []
        for proc in doc["processes"]:
            log = runtime_log(proc)
            pid = proc["meta"]["fleetprof"]["pid"]
            stacks = [s for t in proc["threads"] for s in pc.sample_stacks(t) if s]
            assert log["symbolModulesLoaded"] == 0, (pid, log)
            # Each child worked for 50 ms of CPU, so each was sampled (with the 50 ms
            # of wall time they used to get, a starved child had no stack and sent no
            # request); every child with a stack must have asked the service.
            if stacks:
                sampled += 1
                assert log["symbolServiceBatches"] >= 1, (pid, len(stacks), log)
            else:
                unsampled.append((pid, proc["meta"]["fleetprof"],
                                  [(t.get("name"), len(t["samples"]["data"]))
                                   for t in proc["threads"]], log))
        assert sampled == 100, f"only {sampled} of 100 children have sampled stacks: " \
            f"{unsampled[:2]}; daemon log: " \
            f"{[line for line in d.log().splitlines() if unsampled and str(unsampled[0][0]) in line]}"
        # A short-lived child's exit profile is built by the daemon from its region, with the
        # same cache and no request: those count as asked.
        built = d.log().count("exit profile built from its chunk region")
        assert st["symbol_requests"] + built >= sampled, (sampled, built, st)
        # Each module once for the fleet: at most one load per distinct module the children
        # map (the program, libc, the loader, libfleetprof and its libraries), not 100x.
        modules = {(lib["debugName"], lib.get("codeId")) for p in doc["processes"]
                   for lib in p["libs"]}
        loaded = st["symbol_modules_loaded"]
        assert 1 <= loaded <= len(modules), f"{loaded} loads for {len(modules)} modules: {st}"
        assert "wl_hot_leaf" in pc.functions(doc) or any(
            "wl_hot_leaf" in f for f in pc.functions(doc)), "no workload frames"
    finally:
        d.stop()


def hex_frames(proc):
    return {loc for loc, _ in wait_frames(proc) if loc.startswith("0x")}


def unnamed_frames(proc, module):
    """Wait-stack frames in module that no symbol names: "<module>+0x<offset> (in <module>)"."""
    return {loc for loc, _ in wait_frames(proc)
            if loc.startswith(module + "+0x") and loc.endswith(f" (in {module})")}


def assert_no_bare_address_in_a_module(proc):
    """A "0x..." frame is an address in no listed module; in a module it has a name."""
    for t in proc["threads"]:
        for loc in t["stringTable"]:
            if loc.startswith("0x"):
                a = int(loc, 16)
                inside = [m["name"] for m in proc["libs"] if m["start"] <= a < m["end"]]
                assert not inside, f"bare address {loc} inside {inside}"


def call_site_offset(module):
    """The offset that names a caller frame in module's only call: the address of the call's
    last byte (return address - 1), read from the disassembly, not from fleetprof."""
    out = subprocess.run(["objdump", "-d", module], check=True, capture_output=True,
                         text=True).stdout
    calls = [line for line in out.splitlines() if "\tcall" in line]
    assert len(calls) == 1, f"{module}: expected one call instruction: {calls}"
    addr, raw = calls[0].split("\t")[:2]
    return int(addr.strip().rstrip(":"), 16) + len(raw.split()) - 1


def fde_ranges(path):
    """The [start, end) of each function the module's .eh_frame describes (its FDEs), as
    readelf reads them, not as fleetprof does."""
    out = subprocess.run(["readelf", "--debug-dump=frames", path], check=True,
                         capture_output=True, text=True).stdout
    return [(int(a, 16), int(b, 16)) for a, b in re.findall(r"FDE .*pc=([0-9a-f]+)\.\.([0-9a-f]+)",
                                                            out)]


def fde_start(path, offset):
    """The first address of the function (FDE) that holds offset."""
    (start,) = [a for a, b in fde_ranges(path) if a <= offset < b]
    return start


def test_module_without_symbols(tmp):
    # sym-wait calls back through a module with no function symbols (linked -s, the function
    # hidden): its frame is named by module and the start of its function, as .eh_frame
    # gives it (the call instruction is inside that function), and the same whoever resolved
    # it. One process, two symbolizers over the same samples: a gather resolved by the
    # daemon, then its exit profile resolved locally once the daemon is gone (as in
    # test_service_gives_the_local_symbols).
    module = os.path.basename(NOSYMS)
    call = call_site_offset(NOSYMS)
    assert fde_start(NOSYMS, call) < call, "the call is not past its function's start"
    want = f"{module}+0x{fde_start(NOSYMS, call):x} (in {module})"
    local_out = os.path.join(tmp, "local.json")
    d = Daemon(tmp)
    try:
        p = start_wait(env(d, FLEETPROF_OUTPUT=local_out), NOSYMS)
        out = os.path.join(tmp, "nosyms.json")
        capture_ok(d.sock, out)
        service = one_process(checked(out), p.pid)
    finally:
        d.stop()
    finish(p)
    local = checked(local_out)
    assert runtime_log(service)["symbolModulesLoaded"] == 0
    assert runtime_log(service)["symbolServiceBatches"] >= 1
    assert runtime_log(local)["symbolServiceBatches"] == 0
    for name, proc in (("service", service), ("local", local)):
        names = {loc for loc, _ in wait_frames(proc)}
        assert "sym_wait_probe (in sym-wait)" in names, (name, names)
        assert "main (in sym-wait)" in names, (name, names)
        assert unnamed_frames(proc, module) == {want}, (name, want, names)
        assert not hex_frames(proc), (name, names)
        assert_no_bare_address_in_a_module(proc)
        assert [lib for lib in proc["libs"] if lib["name"] == module], \
            f"{name}: the symbol-less module is not in libs"
    by_service, by_local = samples_by_time(service), samples_by_time(local)
    shared = by_service.keys() & by_local.keys()
    assert shared, "no sample in both profiles"
    differ = sorted(k for k in shared if by_service[k] != by_local[k])
    assert not differ, (f"{len(differ)} samples differ, e.g. at {differ[0]}: service "
                        f"{by_service[differ[0]]} vs local {by_local[differ[0]]}")


def test_deleted_binary_still_running(tmp):
    exe = os.path.join(tmp, "sym-wait-copy")
    shutil.copy(SYM_WAIT, exe)
    d = Daemon(tmp)
    try:
        e = env(d, LD_LIBRARY_PATH=os.path.dirname(SYM_LIB))
        p = start_wait(e, exe=exe)
        os.unlink(exe)
        out = os.path.join(tmp, "deleted.json")
        capture_ok(d.sock, out)
        proc = one_process(checked(out), p.pid)
        finish(p)
        frames = wait_frames(proc)
        names = {loc for loc, _ in frames}
        # The daemon reads a deleted main program through /proc/PID/exe.
        assert "sym_wait_probe (in sym-wait-copy)" in names, names
        assert "sym_lib_static_fn (in libsym-lib.so)" in names, names
        assert runtime_log(proc)["symbolModulesLoaded"] == 0
    finally:
        d.stop()


def test_deleted_library_gets_a_clear_error(tmp):
    libdir = os.path.join(tmp, "lib")
    os.mkdir(libdir)
    shutil.copy(SYM_LIB, libdir)
    d = Daemon(tmp)
    try:
        p = start_wait(env(d, LD_LIBRARY_PATH=libdir))
        os.unlink(os.path.join(libdir, "libsym-lib.so"))
        out = os.path.join(tmp, "deleted-lib.json")
        capture_ok(d.sock, out)
        proc = one_process(checked(out), p.pid)
        finish(p)
        frames = wait_frames(proc)
        names = {loc for loc, _ in frames}
        assert "sym_wait_probe (in sym-wait)" in names, names
        # Unreadable, but known: its frames are named by module and offset, not by symbol
        # and never by a bare address.
        in_lib = {n for n in names if n.endswith("(in libsym-lib.so)")}
        assert in_lib and in_lib == unnamed_frames(proc, "libsym-lib.so"), names
        assert not hex_frames(proc), names
        assert_no_bare_address_in_a_module(proc)
        log = runtime_log(proc)
        assert log["symbolModuleErrors"] >= 1 and "libsym-lib.so" in log["symbolError"], log
        assert "libsym-lib.so" in d.log(), "the daemon did not log the unreadable module"
    finally:
        d.stop()


def test_stripped_library_with_debuglink(tmp):
    if not shutil.which("objcopy") or not shutil.which("strip"):
        raise AssertionError("objcopy/strip missing")
    libdir = os.path.join(tmp, "lib")
    os.mkdir(libdir)
    lib = os.path.join(libdir, "libsym-lib.so")
    shutil.copy(SYM_LIB, lib)
    subprocess.run(["objcopy", "--only-keep-debug", lib, lib + ".debug"], check=True)
    subprocess.run(["strip", "--strip-debug", "--strip-unneeded", lib], check=True)
    subprocess.run(["objcopy", "--add-gnu-debuglink=libsym-lib.so.debug", "libsym-lib.so"],
                   check=True, cwd=libdir)
    d = Daemon(tmp)
    try:
        p = start_wait(env(d, LD_LIBRARY_PATH=libdir))
        out = os.path.join(tmp, "stripped.json")
        capture_ok(d.sock, out)
        proc = one_process(checked(out), p.pid)
        finish(p)
        frames = wait_frames(proc)
        # The static function is only in the debug file's .symtab; its line too.
        assert_wait_stack(frames)
        assert runtime_log(proc)["symbolModulesLoaded"] == 0
    finally:
        d.stop()


# ---- hostile requests, from a scripted child speaking the protocol -------------------------

def packed(b):
    out, i = [], 0
    while i < len(b):
        v, i = read_varint(b, i)
        out.append(v)
    return out


def symbolize(sock, req_id, modules, addresses):
    parts = [field(1, req_id)]
    parts += [field(2, field(1, path) + field(2, bid)) for path, bid in modules]
    parts += [field(3, field(1, mod) + field(2, off)) for mod, off in addresses]
    sock.sendall(frame(SYMBOLIZE, b"".join(parts)))


def symbols_reply(sock, req_id, timeout=20):
    """Assembles the Symbols pieces answering req_id: dict of lists."""
    out = {"names": [], "files": [], "lines": [], "status": [], "module_errors": [],
           "error": ""}
    for num, msg in read_frames(sock, timeout=timeout):
        if num != SYMBOLS or msg.get(1, [0])[0] != req_id:
            continue
        assert msg.get(6, [0])[0] == len(out["names"]), "pieces out of order"
        out["names"] += [v.decode() for v in msg.get(2, [])]
        out["files"] += [v.decode() for v in msg.get(3, [])]
        out["lines"] += [x for v in msg.get(4, []) for x in packed(v)]
        out["status"] += [x for v in msg.get(8, []) for x in packed(v)]
        out["module_errors"] += [v.decode() for v in msg.get(9, [])]
        out["error"] = msg.get(5, [b""])[0].decode()
        if msg.get(7, [0])[0]:
            return out
    raise AssertionError(f"no complete Symbols reply to {req_id}")


def libc_mapping():
    """(path, load bias) of the libc this process maps."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and os.path.basename(parts[5]).startswith("libc.so") \
                    and int(parts[2], 16) == 0:
                return parts[5], int(parts[0].split("-")[0], 16)
    raise AssertionError("libc not mapped")


def scripted(d):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(d.sock)
    s.sendall(frame(HELLO, field(1, 1), field(2, 1), field(3, os.getpid()),
                    field(5, "scripted")))
    return s


def test_hostile_requests(tmp):
    d = Daemon(tmp)
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    try:
        s = scripted(d)
        libc, bias = libc_mapping()
        getpid = ctypes.cast(ctypes.CDLL(libc).getpid, ctypes.c_void_p).value
        # One legitimate module, and paths this process could not have mapped.
        symbolize(s, 10, [(libc, b""), ("/etc/passwd", b""), ("relative/libc.so.6", b""),
                          (fifo, b""), (SYM_LIB, b"")],
                  [(0, getpid - bias), (1, 0x10), (2, 0x10), (3, 0x10), (4, 0x1000)])
        r = symbols_reply(s, 10)
        assert r["error"] == "", r
        assert r["names"][0] in ("getpid", "__getpid", "__GI___getpid"), r
        assert r["status"][0] == 0 and all(x != 0 for x in r["status"][1:]), r
        assert r["module_errors"][0] == "", r
        assert "not mapped" in r["module_errors"][1], r
        assert "absolute" in r["module_errors"][2], r
        assert "not mapped" in r["module_errors"][3], r  # the FIFO: never opened
        assert "not mapped" in r["module_errors"][4], r
        assert r["names"][1:] == [""] * 4, r

        # A huge batch: refused with an error, the connection and the daemon carry on.
        symbolize(s, 11, [(libc, b"")], [(0, 0x1000 + i) for i in range(70000)])
        r = symbols_reply(s, 11)
        assert "too many addresses" in r["error"], r
        symbolize(s, 12, [(libc, b"")], [(0, getpid - bias)])
        assert symbols_reply(s, 12)["status"] == [0]

        # A frame beyond the limit drops this connection only.
        try:
            symbolize(s, 13, [(libc, b"")], [(0, 0x1000 + i) for i in range(700000)])
            s.settimeout(10)
            while s.recv(65536):
                pass
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            pass  # dropped while sending: expected
        s.close()
        assert d.alive(), d.log()
        st = d.status()
        assert st["symbol_requests"] >= 3, st

        # The service still works for a real child.
        p = start_wait(env(d))
        out = os.path.join(tmp, "after.json")
        capture_ok(d.sock, out)
        proc = one_process(checked(out), p.pid)
        finish(p)
        assert_wait_stack(wait_frames(proc))
    finally:
        d.stop()


VDSO_UNNAMED = re.compile(r"^\[vdso\]\+0x([0-9a-f]+)(?: \(called from ([^()]+)\))? \(in \[vdso\]\)$")


def sample_chains(proc):
    """The location chain, innermost first, of every sample with a stack."""
    chains = []
    for t in proc["threads"]:
        st, frames, stacks = t["stringTable"], t["frameTable"]["data"], t["stackTable"]["data"]
        for row in t["samples"]["data"]:
            chain, i = [], row[0]
            while i is not None:
                chain.append(st[frames[stacks[i][1]][0]])
                i = stacks[i][0]
            if chain:
                chains.append(chain)
    return chains


def check_vdso_frames(name, proc):
    """Every frame in the vdso is named: by its symbol, or "[vdso]+0x<offset>" inside the
    vdso's image, and "(called from X)" only where the unwinder showed X as its caller.
    Returns how many sampled frames were in the vdso."""
    (vdso,) = [m for m in proc["libs"] if m["name"] == "[vdso]"]
    seen = 0
    for chain in sample_chains(proc):
        for depth, loc in enumerate(chain):
            if loc.startswith("0x"):
                a = int(loc, 16)
                assert not vdso["start"] <= a < vdso["end"], f"{name}: bare vdso address {loc}"
            if not loc.endswith(" (in [vdso])"):
                continue
            seen += 1
            m = VDSO_UNNAMED.match(loc)
            if not m:  # a symbol: a plain name, not an address in disguise
                fn = loc[:-len(" (in [vdso])")]
                assert fn and not fn.startswith("0x") and "+0x" not in fn, f"{name}: {loc}"
                continue
            assert int(m.group(1), 16) < vdso["end"] - vdso["start"], f"{name}: {loc}"
            caller = chain[depth + 1] if depth + 1 < len(chain) else None
            if m.group(2) and caller and caller.endswith(" (in [vdso])"):
                assert caller == f"{m.group(2)} (in [vdso])", f"{name}: {loc} under {caller}"
    return seen


def test_vdso_frames_are_named(tmp):
    # The vdso has no file for the daemon or libdw to open: a clock-reading loop's frames in
    # the vdso get names from the process's own memory, with the service and without it.
    # Whether samples land there depends on the kernel: with some clock sources
    # clock_gettime is a syscall, with others (6.18, paravirtual clock) its hot code is a
    # local function that no dynamic symbol covers. So this checks the names of whatever
    # vdso frames were sampled and requires none; libsym-unnamed.so (tests/unit/profile/
    # test-gecko.c) and test_module_without_symbols cover unnamed code on every kernel.
    # The loop runs for CPU time (--cpu), not wall time: on a busy machine it does the same
    # work, later, and is sampled as often.
    local_out = os.path.join(tmp, "local.json")
    subprocess.run([WORKLOAD, "--cpu", "clock", "0.3"], env=env(FLEETPROF_OUTPUT=local_out), check=True,
                   timeout=30)
    d = Daemon(tmp)
    try:
        p = subprocess.Popen([WORKLOAD, "--cpu", "clock", "0.3"], env=env(d))
        assert p.wait(timeout=30) == 0
        out = os.path.join(tmp, "service.json")
        capture_ok(d.sock, out)
        service = one_process(checked(out), p.pid)
    finally:
        d.stop()
    for name, proc in (("local", checked(local_out)), ("service", service)):
        chains = sample_chains(proc)
        loop = sum(1 for c in chains if "wl_clock_loop (in workload)" in c)
        assert loop >= len(chains) // 2 and loop >= 20, \
            f"{name}: {loop} of {len(chains)} samples in the clock loop"
        seen = check_vdso_frames(name, proc)
        assert_no_bare_address_in_a_module(proc)
        print(f"# {name}: {seen} sampled frames in the vdso", flush=True)


def test_falls_back_to_local_without_a_daemon(tmp):
    # A socket path nobody listens on: the child profiles alone and resolves locally.
    out = os.path.join(tmp, "alone.json")
    e = env(FLEETPROF_OUTPUT=out, FLEETPROF_SOCKET=os.path.join(tmp, "nobody.sock"))
    p = start_wait(e)
    finish(p)
    proc = checked(out)
    assert_wait_stack(wait_frames(proc))
    log = runtime_log(proc)
    assert log["symbolServiceBatches"] == 0 and log["symbolModulesLoaded"] >= 3, log


def cxx_functions(doc):
    return {n for _, t in pc.all_threads(doc) for n in pc.frame_names(t)}


def test_cxx_names_are_demangled(tmp):
    """A C++ program's functions are shown demangled, by the daemon's service and by a
    process that symbolizes alone, in the profile and in the summary."""
    assert os.path.exists(WL_CXX), f"{WL_CXX} not built (no C++ compiler?)"
    want = "wl::Hot<int>::spin(int)"
    d = Daemon(tmp)
    try:
        r = subprocess.run([WL_CXX, "0.3"], env=env(d), capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        out = os.path.join(tmp, "cxx.json")
        capture_ok(d.sock, out)
        fns = cxx_functions(checked(out))
        assert any(n.startswith(want) for n in fns), sorted(fns)[:20]
        assert any(n.startswith("wl::run(double)") for n in fns), sorted(fns)[:20]
        assert not any("_ZN2wl" in n for n in fns), [n for n in fns if "_ZN2wl" in n]
        s = subprocess.run([CLI, "summary", out], capture_output=True, text=True, timeout=60)
        assert s.returncode == 0 and f"wl-cxx!{want}" in s.stdout, s.stdout[-2000:]
    finally:
        d.stop()
    alone = os.path.join(tmp, "alone.json")
    r = subprocess.run([WL_CXX, "0.3"], env=env(FLEETPROF_OUTPUT=alone), capture_output=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    fns = cxx_functions(checked(alone))
    assert any(n.startswith(want) for n in fns), sorted(fns)[:20]


def cpu_by_innermost_frame_in(proc, module):
    """{location: CPU ns} of the process's samples, by the innermost frame of module on each
    sample's stack (samples without one left out)."""
    out = {}
    for t in proc["threads"]:
        fs = t["frameTable"]["schema"]
        names = [t["stringTable"][row[fs["location"]]] for row in t["frameTable"]["data"]]
        st, ss = t["stackTable"]["data"], t["stackTable"]["schema"]
        sms = t["samples"]["schema"]
        for row in t["samples"]["data"]:
            idx = row[sms["stack"]]
            while idx is not None:
                name = names[st[idx][ss["frame"]]]
                if name.endswith(f" (in {module})"):
                    out[name] = out.get(name, 0) + (row[sms["threadCPUDelta"]] or 0)
                    break
                idx = st[idx][ss["prefix"]]
    return out


def by_daemon_and_locally(tmp, argv):
    """Runs argv under a daemon, its own profile to FLEETPROF_OUTPUT too; yields (who, file,
    its process) for the daemon's capture and for its own file."""
    d = Daemon(tmp)
    try:
        out = os.path.join(tmp, "by-daemon.json")
        local = os.path.join(tmp, "local.json")
        r = subprocess.run(argv, env=env(d, FLEETPROF_OUTPUT=local), capture_output=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        capture_ok(d.sock, out)
    finally:
        d.stop()
    for name, path in (("daemon", out), ("local", local)):
        (proc,) = [p for p in pc.all_processes(checked(path)) if p.get("threads")]
        yield name, path, proc


def test_a_stripped_program_is_ranked_by_function(tmp):
    """A stripped program (no .symtab, no debug file) with a known split: 60 ms of CPU in one
    function, 30 in another, each spread over many instructions. Its samples are two
    entries, each named by its function's start as the unstripped twin's symbol table gives
    it (`wl-stripped+0x<start>`), holding the split: not one entry per instruction."""
    stripped = os.path.join(BUILD, "tests", "workloads", "wl-stripped")
    full = stripped + "-full"
    syms = subprocess.run(["nm", full], check=True, capture_output=True, text=True).stdout
    start = {name: int(addr, 16) for addr, _, name in
             (line.split() for line in syms.splitlines() if len(line.split()) == 3)}
    want_a = f"wl-stripped+0x{start['stripped_work_a']:x} (in wl-stripped)"
    want_b = f"wl-stripped+0x{start['stripped_work_b']:x} (in wl-stripped)"
    assert "stripped_work_a" not in subprocess.run(["nm", "-D", stripped], capture_output=True,
                                                   text=True).stdout
    for name, path, proc in by_daemon_and_locally(tmp, [stripped, "60", "30"]):
        cpu = cpu_by_innermost_frame_in(proc, "wl-stripped")
        total = sum(cpu.values())
        a, b = cpu.get(want_a, 0), cpu.get(want_b, 0)
        assert a + b >= 0.9 * total, (name, want_a, want_b, cpu)
        # 60:30, on a kernel that samples every tick's worth of CPU.
        assert 1.4 < a / max(b, 1) < 2.8, (name, a / 1e6, b / 1e6, cpu)
        s = subprocess.run([CLI, "summary", path], capture_output=True, text=True, timeout=60)
        assert f"wl-stripped+0x{start['stripped_work_a']:x}" in s.stdout, s.stdout


def test_a_program_run_by_a_link_is_named_as_run(tmp):
    """redis-server is a link to redis-check-rdb: the maps name the file, the user ran the
    link. A stripped program run by a link of another name: its module, its frames and the
    summary say the link's name; the path (and debugName, for symbol servers) stay the
    file's."""
    stripped = os.path.join(BUILD, "tests", "workloads", "wl-stripped")
    link = os.path.join(tmp, "wl-as-run")
    os.symlink(stripped, link)
    for name, path, proc in by_daemon_and_locally(tmp, [link, "30", "30"]):
        (lib,) = [lib for lib in proc["libs"] if lib["path"] == os.path.realpath(stripped)]
        assert lib["name"] == "wl-as-run" and lib["debugName"] == "wl-stripped", (name, lib)
        cpu = cpu_by_innermost_frame_in(proc, "wl-as-run")
        assert cpu and all(loc.startswith("wl-as-run+0x") for loc in cpu), (name, cpu)
        assert sum(cpu.values()) >= 40_000_000, (name, cpu)
        s = subprocess.run([CLI, "summary", path], capture_output=True, text=True, timeout=60)
        assert "wl-as-run+0x" in s.stdout and "wl-stripped+0x" not in s.stdout, s.stdout


def test_a_stripped_debian_program_is_named_by_function_starts(tmp):
    """Debian's gzip is stripped (.eh_frame kept). Compressing 8 MiB: each of its frames is
    named by the start of a function its .eh_frame describes (read by readelf, not by us),
    and its CPU gathers in a few such functions instead of a scatter of addresses."""
    gzip = shutil.which("gzip")
    if not gzip or ".symtab" in subprocess.run(["readelf", "-S", gzip], capture_output=True,
                                               text=True).stdout:
        raise taplib.Skip(f"no stripped gzip here ({gzip})")
    data = os.path.join(tmp, "data")
    with open(data, "wb") as f:
        f.write(os.urandom(8 << 20))
    module = os.path.basename(os.path.realpath(gzip))
    starts = {a for a, _ in fde_ranges(os.path.realpath(gzip))}
    out = os.path.join(tmp, "gzip.json")
    r = subprocess.run([gzip, "-c", data], env=env(FLEETPROF_OUTPUT=out),
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    assert r.returncode == 0, r.stderr
    (proc,) = [p for p in pc.all_processes(checked(out)) if p.get("threads")]
    cpu = cpu_by_innermost_frame_in(proc, module)
    assert cpu, f"no frame in {module}"
    for loc in cpu:
        m = re.fullmatch(re.escape(module) + r"\+0x([0-9a-f]+) \(in " + re.escape(module) + r"\)",
                         loc)
        assert m and int(m[1], 16) in starts, f"{loc}: not a function start of {module}"
    top = max(cpu.values())
    assert len(cpu) <= 40 and top >= 0.2 * sum(cpu.values()), sorted(
        cpu.items(), key=lambda kv: -kv[1])[:10]


LIBC_NAMES_ONLY = libc_compressed_dwarf_bytes() > MAX_COMPRESSED_DWARF

taplib.run([
    test_service_gives_the_local_symbols,
    test_exit_profile_is_resolved_by_the_service,
    test_fleet_loads_each_module_once,
    test_module_without_symbols,
    test_deleted_binary_still_running,
    test_deleted_library_gets_a_clear_error,
    test_stripped_library_with_debuglink,
    test_hostile_requests,
    test_vdso_frames_are_named,
    test_falls_back_to_local_without_a_daemon,
    test_cxx_names_are_demangled,
    test_a_stripped_program_is_ranked_by_function,
    test_a_program_run_by_a_link_is_named_as_run,
    test_a_stripped_debian_program_is_named_by_function_starts,
])
