#!/usr/bin/env python3
"""No circle between the runtime's files (issue #29): if a.c calls a function b.c defines,
b.c calls nothing of a.c, directly or through other files. A file and its header are one.

Usage: check-runtime-cycles.py ROOT. Prints each circle with the calls that make it, and
exits 1 if there is one. The runtime is libfleetprof.so: child/<layer>/*.c (not the
modules it loads, which reach it only through tables).
"""
import os
import re
import sys

LAYERS = ("entry", "lifecycle", "client", "core", "base")
# A definition at the start of a line: a return type, then name( ... not ending in ';'.
DEFINITION = re.compile(r"^(?:[A-Z][A-Z0-9_]* )*[a-z][a-z0-9_ ]*[ *]([a-z_][a-z0-9_]*)\(", re.M)


def runtime_files(root):
    for layer in LAYERS:
        folder = os.path.join(root, "child", layer)
        if os.path.isdir(folder):
            for name in sorted(os.listdir(folder)):
                if name.endswith(".c"):
                    yield os.path.join("child", layer, name)


def without_comments(text):
    return re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)


def main():
    root = sys.argv[1]
    files = list(runtime_files(root))
    text = {f: without_comments(open(os.path.join(root, f)).read()) for f in files}
    defined_by = {}
    for f, t in text.items():
        for m in DEFINITION.finditer(t):
            line = t[m.start():t.find("\n", m.start())]
            # Static functions are the file's own; interposed libc functions
            # (FLEETPROF_EXPORT) are the C library's to the rest of the runtime.
            if re.search(r"\b(static|FLEETPROF_EXPORT)\b", line) or line.rstrip().endswith(";"):
                continue
            defined_by.setdefault(m.group(1), f)
    calls = {f: {} for f in files}
    for f, t in text.items():
        for fn, g in defined_by.items():
            if g != f and re.search(r"(?<![A-Za-z0-9_])" + fn + r"\(", t):
                calls[f].setdefault(g, []).append(fn)

    # Tarjan's strongly connected components: a component of two or more files is a circle.
    index, low, stack, on_stack, circles = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in calls[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    sys.setrecursionlimit(10000)
    for f in files:
        if f not in index:
            visit(f)
    for component in circles:
        print("circle between " + ", ".join(component) + ":")
        for a in component:
            for b in component:
                if b in calls[a]:
                    print(f"  {a} calls {', '.join(sorted(set(calls[a][b])))}() of {b}")
    if circles:
        print("break it: move what both need below both, or hand the upper one down as a hook",
              file=sys.stderr)
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main())
