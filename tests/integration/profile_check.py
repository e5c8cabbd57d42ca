"""Checks a Gecko profile (shared/gecko-format.md) the way the Firefox Profiler front-end
would load it, plus the invariants the front-end does not check but silently renders wrong
(section 13): backward stack prefixes, sorted sample times, valid indexes and phases.

Usage: python3 profile_check.py FILE...   (exit 1 and one line per problem if invalid)
Library: check_profile(doc) -> list of problems; helpers to query functions and samples.
"""
import gzip
import json
import re
import sys

FRAME_COLUMNS = ["location", "relevantForJS", "innerWindowID", "line", "column",
                 "category", "subcategory"]
MARKER_COLUMNS = ["name", "startTime", "endTime", "phase", "category", "data"]
COLORS = {"transparent", "purple", "green", "orange", "yellow", "lightblue", "blue",
          "brown", "magenta", "red", "lightred", "darkgrey", "grey"}
# Marker schemas (section 8): where a marker may show, and the field formats the front-end
# knows; a field of a numeric format must hold a number, of a string format a string.
DISPLAY_LOCATIONS = {"marker-chart", "marker-table", "timeline-overview", "timeline-memory",
                     "timeline-ipc", "timeline-fileio", "timeline-network", "stack-chart"}
STRING_FORMATS = {"url", "file-path", "sanitized-string", "string"}
INDEX_FORMATS = {"unique-string", "flow-id", "terminating-flow-id"}
NUMBER_FORMATS = {"duration", "time", "seconds", "milliseconds", "microseconds", "nanoseconds",
                  "bytes", "percentage", "integer", "decimal", "hexadecimal", "pid", "tid"}
FIELD_FORMATS = STRING_FORMATS | INDEX_FORMATS | NUMBER_FORMATS | {"list"}
# Marker types the front-end handles itself (moved to allocation tables, special tracks):
# a schema of ours must not take one of these names ("Text" is ours to redefine).
RESERVED_MARKER_TYPES = {"JS allocation", "Native allocation", "GCMajor", "GCSlice", "IPC",
                         "CompositorScreenshot", "Network", "FileIO", "Log"}


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data)


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _schema(table, where, problems, required):
    if not isinstance(table, dict) or "schema" not in table or "data" not in table:
        problems.append(f"{where}: not a schema+data table")
        return None
    schema = table["schema"]
    for key, idx in schema.items():
        if not is_int(idx):
            problems.append(f"{where}: schema {key} is not an integer (fieldIndex must be a number)")
    for key in required:
        if key not in schema:
            problems.append(f"{where}: schema lacks {key}")
    if not isinstance(table["data"], list):
        problems.append(f"{where}: data is not an array")
        return None
    return schema


def _col(row, schema, key):
    idx = schema.get(key)
    if idx is None or idx >= len(row):
        return None
    return row[idx]


def check_meta(meta, where, problems, top):
    if not isinstance(meta, dict):
        problems.append(f"{where}: no meta")
        return []
    v = meta.get("version")
    if not is_int(v) or not 3 <= v <= 36:
        problems.append(f"{where}: meta.version {v!r} not in 3..36")
    if not is_num(meta.get("startTime")):
        problems.append(f"{where}: meta.startTime missing")
    if "shutdownTime" not in meta or not (meta["shutdownTime"] is None or is_num(meta["shutdownTime"])):
        problems.append(f"{where}: meta.shutdownTime missing or not number/null")
    if top and not (is_num(meta.get("interval")) and meta["interval"] > 0):
        problems.append(f"{where}: meta.interval missing or not > 0")
    if not isinstance(meta.get("markerSchema"), list):
        problems.append(f"{where}: meta.markerSchema is not an array")
    cats = meta.get("categories")
    if not isinstance(cats, list) or not cats:
        problems.append(f"{where}: meta.categories missing")
        return []
    if not any(c.get("color") == "grey" for c in cats):
        problems.append(f"{where}: no grey category")
    for i, c in enumerate(cats):
        if c.get("color") not in COLORS:
            problems.append(f"{where}: category {i} has unknown color {c.get('color')!r}")
        if not isinstance(c.get("subcategories"), list) or not c["subcategories"]:
            problems.append(f"{where}: category {i} has no subcategories")
    if top and meta.get("presymbolicated") is not True:
        problems.append(f"{where}: meta.presymbolicated is not true")
    return cats


def check_marker_schemas(meta, where, problems):
    """meta.markerSchema entries: a name, display locations the front-end knows, fields with
    a key and a known format (or a static label + value), label templates as strings."""
    for i, s in enumerate(meta.get("markerSchema") or []):
        w = f"{where}: markerSchema[{i}]"
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            problems.append(f"{w} has no name")
            continue
        w = f"{where}: markerSchema {s['name']}"
        if s["name"] in RESERVED_MARKER_TYPES:
            problems.append(f"{w}: a marker type the front-end handles specially")
        display = s.get("display")
        if not isinstance(display, list) or not set(display) <= DISPLAY_LOCATIONS:
            problems.append(f"{w}: display {display!r} not a list of known locations")
        for key in ("tooltipLabel", "tableLabel", "chartLabel"):
            if key in s and not isinstance(s[key], str):
                problems.append(f"{w}: {key} is not a string")
        fields = s.get("data")
        if not isinstance(fields, list):
            problems.append(f"{w}: data is not an array of fields")
            continue
        keys = set()
        for f in fields:
            if not isinstance(f, dict):
                problems.append(f"{w}: a field is not an object")
            elif "key" in f:
                fmt = f.get("format")
                if not (fmt in FIELD_FORMATS or isinstance(fmt, dict) and fmt.get("type") == "table"):
                    problems.append(f"{w}: field {f['key']} has unknown format {fmt!r}")
                if f["key"] in keys:
                    problems.append(f"{w}: field {f['key']} twice")
                keys.add(f["key"])
            elif not ("label" in f and "value" in f):
                problems.append(f"{w}: a field has neither a key nor a label and value")


def check_counter(c, where, problems):
    """One counter: name, category and description strings; rows [time, count(, number)]
    of the schema's width (the front-end turns the columns into arrays of one length),
    numbers where numbers go, times sorted."""
    for key in ("name", "category"):
        if not isinstance(c.get(key), str):
            problems.append(f"{where}: counter {key} is not a string")
    if "description" in c and not isinstance(c["description"], str):
        problems.append(f"{where}: counter description is not a string")
    cs = _schema(c.get("samples"), where, problems, ["time", "count"])
    if cs is None:
        return
    width = max(cs.values()) + 1 if cs else 0
    times = []
    for i, r in enumerate(c["samples"]["data"]):
        if not isinstance(r, list) or len(r) != width:
            problems.append(f"{where}: row {i} is not {width} columns wide")
            continue
        t, n, num = _col(r, cs, "time"), _col(r, cs, "count"), _col(r, cs, "number")
        if not is_num(t) or not is_num(n):
            problems.append(f"{where}: row {i} time or count is not a number")
            continue
        if "number" in cs and not (num is None or is_int(num) and num >= 0):
            problems.append(f"{where}: row {i} number {num!r}")
        times.append(t)
    if times != sorted(times):
        problems.append(f"{where}: counter {c.get('name')} times not sorted")


def check_thread(t, where, problems, cats, schemas):
    for key in ("name", "processType", "pid", "tid"):
        if key not in t:
            problems.append(f"{where}: no {key}")
    if not is_num(t.get("registerTime")):
        problems.append(f"{where}: registerTime missing")
    if "unregisterTime" not in t or not (t["unregisterTime"] is None or is_num(t["unregisterTime"])):
        problems.append(f"{where}: unregisterTime missing")
    strings = t.get("stringTable")
    if not isinstance(strings, list) or not all(isinstance(s, str) for s in strings):
        problems.append(f"{where}: stringTable is not an array of strings")
        return
    n_str = len(strings)

    ft = t.get("frameTable")
    fs = _schema(ft, where + ".frameTable", problems, FRAME_COLUMNS)
    n_frames = 0
    if fs is not None:
        n_frames = len(ft["data"])
        for i, row in enumerate(ft["data"]):
            loc = _col(row, fs, "location")
            if not is_int(loc) or not 0 <= loc < n_str:
                problems.append(f"{where}: frame {i} location {loc!r} not a string index")
            cat = _col(row, fs, "category")
            sub = _col(row, fs, "subcategory")
            if cat is not None:
                if not is_int(cat) or not 0 <= cat < len(cats):
                    problems.append(f"{where}: frame {i} category {cat!r} out of range")
                elif sub is None or not is_int(sub) or not 0 <= sub < len(cats[cat]["subcategories"]):
                    problems.append(f"{where}: frame {i} subcategory {sub!r} invalid")
            line = _col(row, fs, "line")
            if line is not None and not is_int(line):
                problems.append(f"{where}: frame {i} line {line!r} not an integer")

    st = t.get("stackTable")
    ss = _schema(st, where + ".stackTable", problems, ["prefix", "frame"])
    n_stacks = 0
    if ss is not None:
        n_stacks = len(st["data"])
        for i, row in enumerate(st["data"]):
            prefix = _col(row, ss, "prefix")
            frame = _col(row, ss, "frame")
            if prefix is not None and (not is_int(prefix) or not 0 <= prefix < i):
                problems.append(f"{where}: stack {i} prefix {prefix!r} does not point backwards")
            if not is_int(frame) or not 0 <= frame < n_frames:
                problems.append(f"{where}: stack {i} frame {frame!r} out of range")

    sm = t.get("samples")
    sms = _schema(sm, where + ".samples", problems, ["stack", "time"])
    if sms is not None:
        if "eventDelay" not in sms and "responsiveness" not in sms:
            problems.append(f"{where}: samples lack eventDelay/responsiveness")
        last = None
        for i, row in enumerate(sm["data"]):
            stack = _col(row, sms, "stack")
            time = _col(row, sms, "time")
            if stack is not None and (not is_int(stack) or not 0 <= stack < n_stacks):
                problems.append(f"{where}: sample {i} stack {stack!r} out of range")
            if not is_num(time):
                problems.append(f"{where}: sample {i} time {time!r}")
            elif last is not None and time < last:
                problems.append(f"{where}: sample {i} time {time} before {last}")
            else:
                last = time
            cpu = _col(row, sms, "threadCPUDelta")
            if cpu is not None and (not is_num(cpu) or cpu < 0):
                problems.append(f"{where}: sample {i} threadCPUDelta {cpu!r}")

    mk = t.get("markers")
    ms = _schema(mk, where + ".markers", problems, MARKER_COLUMNS)
    if ms is not None:
        for i, row in enumerate(mk["data"]):
            name = _col(row, ms, "name")
            start, end = _col(row, ms, "startTime"), _col(row, ms, "endTime")
            phase, cat = _col(row, ms, "phase"), _col(row, ms, "category")
            data = _col(row, ms, "data")
            if not is_int(name) or not 0 <= name < n_str:
                problems.append(f"{where}: marker {i} name {name!r} not a string index")
            if phase not in (0, 1, 2, 3):
                problems.append(f"{where}: marker {i} phase {phase!r} (Unhandled marker phase type)")
            if start is None and end is None:
                problems.append(f"{where}: marker {i} has null start and end time")
            if phase == 0 and start is None or phase == 1 and (start is None or end is None) \
                    or phase == 2 and start is None or phase == 3 and end is None:
                problems.append(f"{where}: marker {i} times do not match phase {phase}")
            if not is_int(cat) or not 0 <= cat < len(cats):
                problems.append(f"{where}: marker {i} category {cat!r} out of range")
            if data is not None and not isinstance(data, dict):
                problems.append(f"{where}: marker {i} data is not an object")
            if isinstance(data, dict) and data.get("type") in schemas:
                for field in schemas[data["type"]].get("data", []):
                    key = field.get("key")
                    fmt = field.get("format")
                    if key not in data or data[key] is None:
                        continue
                    if fmt in INDEX_FORMATS:
                        if not is_int(data[key]) or not 0 <= data[key] < n_str:
                            problems.append(f"{where}: marker {i} {fmt} {key} not an index")
                    elif fmt in NUMBER_FORMATS and not is_num(data[key]):
                        problems.append(f"{where}: marker {i} {fmt} field {key} is not a number")
                    elif fmt in STRING_FORMATS and not isinstance(data[key], str):
                        problems.append(f"{where}: marker {i} {fmt} field {key} is not a string")
            if isinstance(data, dict) and "stack" in data:
                cause = data["stack"]
                cs = cause.get("samples", {})
                rows = cs.get("data", [])
                for r in rows:
                    if r[0] is not None and not 0 <= r[0] < n_stacks:
                        problems.append(f"{where}: marker {i} cause stack out of range")


def check_process(p, where, problems, top, root_cats=None):
    if not isinstance(p, dict):
        problems.append(f"{where}: not an object")
        return
    cats = check_meta(p.get("meta"), where, problems, top)
    if isinstance(p.get("meta"), dict):
        check_marker_schemas(p["meta"], where, problems)
    if root_cats is not None:
        cats = root_cats  # per-thread data uses the top-level categories
    schemas = {s.get("name"): s for s in (p.get("meta") or {}).get("markerSchema", []) or []
               if isinstance(s, dict)}
    for key in ("threads", "libs", "processes"):
        if not isinstance(p.get(key), list):
            problems.append(f"{where}: {key} is not an array")
    if not top and p.get("processes"):
        problems.append(f"{where}: a sub-process must have processes: []")
    if "pausedRanges" in p and not isinstance(p["pausedRanges"], list):
        problems.append(f"{where}: pausedRanges is not an array")
    for i, lib in enumerate(p.get("libs") or []):
        for key in ("start", "end", "offset"):
            if not is_int(lib.get(key)):
                problems.append(f"{where}: libs[{i}].{key} is not an integer")
    threads = p.get("threads") or []
    for i, t in enumerate(threads):
        check_thread(t, f"{where}.threads[{i}]", problems, cats, schemas)
    mains = [t for t in threads if t.get("name") == "GeckoMain"]
    counters = p.get("counters") or []
    if counters and not mains:
        problems.append(f"{where}: has counters but no GeckoMain thread (they would be dropped)")
    if len({t.get("pid") for t in mains}) != len(mains):
        problems.append(f"{where}: two GeckoMain threads share a pid")
    for i, c in enumerate(counters):
        check_counter(c, f"{where}.counters[{i}]", problems)
    if "profileGatheringLog" in p and not top:
        problems.append(f"{where}: profileGatheringLog is only read at the top level")


def check_profile(doc):
    problems = []
    if not isinstance(doc, dict) or "meta" not in doc:
        return ["This does not appear to be a valid Gecko Profile, there is no meta field."]
    check_process(doc, "root", problems, True)
    root_cats = (doc.get("meta") or {}).get("categories") or []
    for i, p in enumerate(doc.get("processes") or []):
        check_process(p, f"processes[{i}]", problems, False, root_cats)
    total_threads = len(doc.get("threads") or []) + sum(len(p.get("threads") or [])
                                                       for p in doc.get("processes") or [])
    if total_threads == 0:
        problems.append("No threads were captured")
    return problems


def load_valid(path):
    """The profile at path, asserting that it is valid (each problem listed)."""
    doc = load(path)
    problems = check_profile(doc)
    assert not problems, f"{path} is not a valid profile:\n" + "\n".join(problems[:20])
    return doc


def all_processes(doc):
    yield doc
    for p in doc.get("processes") or []:
        yield p


def all_threads(doc):
    for p in all_processes(doc):
        for t in p.get("threads") or []:
            yield p, t


FUNC_RE = re.compile(r"^(.*) \(in ([^)]*)\)$")


def frame_names(t):
    """Function name of each frame (the part before ' (in lib)')."""
    fs = t["frameTable"]["schema"]
    names = []
    for row in t["frameTable"]["data"]:
        loc = t["stringTable"][row[fs["location"]]]
        m = FUNC_RE.match(loc)
        names.append(m.group(1) if m else loc)
    return names


def sample_stacks(t):
    """Each sample's stack as a list of function names, root first (None stacks skipped)."""
    names = frame_names(t)
    ss = t["stackTable"]["schema"]
    stacks = t["stackTable"]["data"]
    sms = t["samples"]["schema"]
    out = []
    cache = {}
    for row in t["samples"]["data"]:
        idx = row[sms["stack"]]
        if idx is None:
            continue
        if idx not in cache:
            chain = []
            i = idx
            while i is not None:
                chain.append(names[stacks[i][ss["frame"]]])
                i = stacks[i][ss["prefix"]]
            cache[idx] = list(reversed(chain))
        out.append(cache[idx])
    return out


def functions(doc):
    return {n for _, t in all_threads(doc) for n in frame_names(t)}


def cpu_ms_in(p, function):
    """CPU (ms, from threadCPUDelta in ns) of process p's samples whose stack holds
    function."""
    total = 0
    for t in p.get("threads") or []:
        sms = t["samples"]["schema"]
        names = frame_names(t)
        ss = t["stackTable"]["schema"]
        stacks = t["stackTable"]["data"]
        for row in t["samples"]["data"]:
            i = row[sms["stack"]]
            while i is not None:
                if names[stacks[i][ss["frame"]]] == function:
                    total += row[sms["threadCPUDelta"]] or 0
                    break
                i = stacks[i][ss["prefix"]]
    return total / 1e6


def cpu_sampling(t):
    """(samples that carry CPU, CPU seconds they add up to) of one thread, from
    threadCPUDelta (ns)."""
    sms = t["samples"]["schema"]
    deltas = [row[sms["threadCPUDelta"]] for row in t["samples"]["data"]]
    busy = [d for d in deltas if d]
    return len(busy), sum(busy) / 1e9


def cpu_sampling_problem(proc, t, interval_ms=1.0):
    """None if thread t of process profile proc has one sample with CPU per interval of the
    CPU it used, and at most one sample per interval of its life, else what is wrong. What
    a test can check on a busy machine, where a count expected from a run's wall-clock
    length fails. Each thread is sampled by its own CPU timer (child/core/cpu-timer.c): a
    capture stands for the CPU used since the one before, and is written as one sample per
    interval of that CPU (the last with its stack, each with its share), so the count does
    not depend on the timer's rate (1 kHz for perf, the kernel's tick for CPU-clock timers).
    Time the thread spent off its CPU fills the intervals between, without CPU."""
    sms = t["samples"]["schema"]
    times = [row[sms["time"]] for row in t["samples"]["data"]]
    if len(times) < 2:
        return f"{t['name']}: {len(times)} samples"
    n, cpu_s = cpu_sampling(t)
    intervals = (times[-1] - times[0]) / interval_ms
    expected = cpu_s * 1000.0 / interval_ms
    what = f"{t['name']}: {n} samples carry {cpu_s:.3f} s of CPU over {intervals:.0f} intervals"
    if n < 0.75 * expected:
        return what + f": expected {expected:.0f} samples with CPU"
    if len(times) > 1.05 * intervals + 2:
        return what + f": {len(times)} samples, more than one per interval"
    return None


if __name__ == "__main__":
    bad = 0
    for path in sys.argv[1:]:
        for problem in check_profile(load(path)):
            print(f"{path}: {problem}")
            bad = 1
    sys.exit(bad)
