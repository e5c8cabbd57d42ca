"""Reading what `fleetprof export --format pprof` wrote with an independent decoder: the
file is gunzipped here and decoded by protoc (Debian's protobuf-compiler) against the vendored
proto/profile.proto, and protoc's text format is parsed just enough for the tests: samples'
values and labels, locations' functions and lines, mappings, the string table.

Also the same totals computed from the Gecko profile itself, for comparison.
"""
import codecs
import gzip
import os
import shutil
import subprocess

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTO_DIR = os.path.join(SOURCE, "proto")


def protoc_text(path):
    """protoc's text format of the gzipped pprof file at path. Fails (never skips) without
    protoc: tools/bootstrap.sh installs it."""
    protoc = shutil.which("protoc")
    assert protoc, "protoc not found: install protobuf-compiler (tools/bootstrap.sh does)"
    with gzip.open(path, "rb") as f:
        raw = f.read()
    r = subprocess.run([protoc, "--decode", "perftools.profiles.Profile",
                        "--proto_path", PROTO_DIR, "profile.proto"],
                       input=raw, capture_output=True, timeout=120)
    assert r.returncode == 0, f"protoc cannot decode {path}: {r.stderr.decode(errors='replace')}"
    return r.stdout.decode("utf-8", errors="replace")


def parse_text(text):
    """Protobuf text format -> {field: [values or nested dicts]} (every field a list)."""
    root = {}
    stack = [root]
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line == "}":
            stack.pop()
            continue
        if line.endswith("{"):
            node = {}
            stack[-1].setdefault(line[:-1].strip(), []).append(node)
            stack.append(node)
            continue
        key, _, val = line.partition(": ")
        if val.startswith('"'):
            v = codecs.escape_decode(val[1:-1].encode("utf-8"))[0].decode("utf-8", "replace")
        elif val in ("true", "false"):
            v = val == "true"
        else:
            v = int(val)
        stack[-1].setdefault(key, []).append(v)
    assert len(stack) == 1, "unbalanced braces in protoc's output"
    return root


def one(node, key, default=0):
    """A singular field (proto3 leaves out zero values)."""
    return node.get(key, [default])[0]


class Pprof:
    """The parts of a decoded profile the tests look at."""

    def __init__(self, path):
        self.text = protoc_text(path)
        tree = parse_text(self.text)
        self.tree = tree
        self.strings = tree.get("string_table", [])
        assert self.strings and self.strings[0] == "", "string_table[0] must be \"\""
        self.functions = {one(f, "id"): self.s(one(f, "name")) for f in tree.get("function", [])}
        self.mappings = {one(m, "id"): m for m in tree.get("mapping", [])}
        self.locations = {}
        for loc in tree.get("location", []):
            (line,) = loc["line"]
            self.locations[one(loc, "id")] = (self.functions[one(line, "function_id")],
                                              one(line, "line"), one(loc, "mapping_id"))
        self.sample_types = [(self.s(one(t, "type")), self.s(one(t, "unit")))
                             for t in tree.get("sample_type", [])]
        self.default_sample_type = self.s(one(tree, "default_sample_type"))
        self.samples = []
        for s in tree.get("sample", []):
            labels = {}
            for lab in s.get("label", []):
                key = self.s(one(lab, "key"))
                labels[key] = self.s(one(lab, "str")) if "str" in lab else one(lab, "num")
            self.samples.append((s["value"], s["location_id"], labels))

    def s(self, i):
        return self.strings[i]

    def totals(self):
        """({pid: [samples, cpu_ns]}, {leaf function: samples})"""
        per_pid, per_leaf = {}, {}
        for values, locs, labels in self.samples:
            t = per_pid.setdefault(labels["pid"], [0, 0])
            t[0] += values[0]
            t[1] += values[1]
            leaf = self.locations[locs[0]][0]
            per_leaf[leaf] = per_leaf.get(leaf, 0) + values[0]
        return per_pid, per_leaf

    def located_functions(self):
        """{(function, line)} of every location but the pseudo ones."""
        return {(f, line) for f, line, _ in self.locations.values()
                if f not in ("(no stack)", "(invalid stack)")}


def function_name(location):
    """The function of a Gecko frame location, as the front-end and fleetprof split it:
    "name (in lib)" -> name; anything else is its own name."""
    i = len(location)
    while True:
        i = location.rfind(" (in ", 0, i)
        if i < 0:
            return location
        close = location.find(")", i + 5)
        if close > i + 5 and (close + 1 == len(location) or location[close + 1] == " "):
            return location[:i]


def gecko_processes(doc):
    procs = doc.get("processes") or []
    if doc.get("threads") or not procs:
        return [doc] + procs
    return procs


def gecko_totals(doc):
    """The same as Pprof.totals() and located_functions(), from the Gecko profile: samples
    and the sum of threadCPUDelta (ns) per process, samples per leaf function, and the
    (function, line) of every frame a stack uses."""
    per_pid, per_leaf, located = {}, {}, set()
    for p in gecko_processes(doc):
        pid = p["meta"]["fleetprof"]["pid"]
        assert p["meta"].get("sampleUnits", doc["meta"].get("sampleUnits"))["threadCPUDelta"] \
            == "ns"
        t_pid = per_pid.setdefault(pid, [0, 0])
        for t in p["threads"]:
            sms, fs = t["samples"]["schema"], t["frameTable"]["schema"]
            sts = t["stackTable"]["schema"]
            name_of = [function_name(t["stringTable"][f[fs["location"]]])
                       for f in t["frameTable"]["data"]]
            for st in t["stackTable"]["data"]:
                f = t["frameTable"]["data"][st[sts["frame"]]]
                located.add((name_of[st[sts["frame"]]], f[fs["line"]] or 0))
            for row in t["samples"]["data"]:
                idx = row[sms["stack"]]
                if idx is None:
                    leaf = "(no stack)"
                else:
                    leaf = name_of[t["stackTable"]["data"][idx][sts["frame"]]]
                t_pid[0] += 1
                cpu = row[sms["threadCPUDelta"]] if "threadCPUDelta" in sms else None
                t_pid[1] += int(cpu) if cpu and cpu > 0 else 0
                per_leaf[leaf] = per_leaf.get(leaf, 0) + 1
    return per_pid, per_leaf, located
