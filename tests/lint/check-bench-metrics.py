#!/usr/bin/env python3
"""Every BENCH metric name is printed by one benchmark, once: two figures with one name (the
in-process symbol cache and the daemon's symbol service were both `symbols.cache_hit_us`)
make any comparison across runs meaningless.

Usage: check-bench-metrics.py ROOT   — reads ROOT/tests/bench/bench-*.{c,py} and
ROOT/tests/workloads/bench-*.c; prints each problem as file:line: reason; exits 1 if any.

A metric name is spelled out in the source, in one of two forms:
  - in a string literal, after `BENCH `: printf("BENCH child.handler_p50_ns_%s %u ns\\n", ...),
    print(f"BENCH x.y_ms {v:.1f} ms"); adjacent C literals are joined;
  - in Python, as a literal key of the dict named `figures`: figures["gather.x_s"] = (v, "s"),
    figures[f"child.overhead_cpu_ratio_{mode}"] = ...  (printed by tests/bench/figures.py).
Comments and docstrings do not count. A conversion (%s, %d, {mode}) in a name is a placeholder
that stands for any text; a name that starts with one is refused, since it cannot be checked.
Reported: a name (or template) spelled twice, a literal name that another template also
produces, a name the check cannot see, a BENCH literal whose value is nan or inf, and a
tests/bench/bench-* source in which no name was found (the check would be blind to it).
"""
import ast
import glob
import os
import re
import sys

PLACEHOLDER = "{}"
C_CONVERSION = re.compile(r"%[-+ #0]*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|z|j|t|L)?"
                          r"[diouxXeEfgGcsp]")
BENCH_RE = re.compile(r"(?<![A-Za-z0-9_])BENCH (\S+)(?: (\S+))?")


def c_literals(text):
    """(line, text) of each string literal outside comments, adjacent literals joined."""
    out = []
    i, n, line = 0, len(text), 1
    joinable = False  # only whitespace since the last literal ended
    while i < n:
        ch = text[i]
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            line += text.count("\n", i, end)
            i, joinable = end, False
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i, joinable = (n if end < 0 else end), False
        elif ch in "\"'":
            j, buf = i + 1, []
            while j < n and text[j] != ch:
                if text[j] == "\\" and j + 1 < n:
                    buf.append(text[j:j + 2])
                    j += 2
                    continue
                buf.append(text[j])
                j += 1
            if ch == '"':
                s = "".join(buf)
                if joinable and out:
                    out[-1] = (out[-1][0], out[-1][1] + s)
                else:
                    out.append((line, s))
                joinable = True
            else:
                joinable = False
            line += text.count("\n", i, j)
            i = j + 1
        else:
            if ch == "\n":
                line += 1
            elif not ch.isspace():
                joinable = False
            i += 1
    return out


def c_template(name):
    return C_CONVERSION.sub(PLACEHOLDER, name.replace("%%", "%"))


def py_template(node):
    """The text of a str constant or f-string, conversions as placeholders; None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else PLACEHOLDER
                       for v in node.values)
    return None


class PyScan(ast.NodeVisitor):
    def __init__(self):
        self.literals = []  # (line, text)
        self.figures = []  # (line, name template or None when not a literal)

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring (or a bare string): not printed
        self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, str):
            self.literals.append((node.lineno, node.value))

    def visit_JoinedStr(self, node):
        self.literals.append((node.lineno, py_template(node)))
        for v in node.values:  # expressions inside may hold literals of their own
            if isinstance(v, ast.FormattedValue):
                self.visit(v.value)

    def visit_Subscript(self, node):
        if isinstance(node.value, ast.Name) and node.value.id == "figures":
            self.figures.append((node.lineno, py_template(node.slice)))
        self.generic_visit(node)


def scan(path):
    """[(line, name template | None, value | None)] of one source."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found = []
    if path.endswith(".py"):
        v = PyScan()
        v.visit(ast.parse(text, path))
        literals = v.literals
        found += [(line, name, None) for line, name in v.figures]
        to_template = str
    else:
        literals = c_literals(text)
        to_template = c_template
    for line, lit in literals:
        for m in BENCH_RE.finditer(lit):
            found.append((line, to_template(m.group(1)), m.group(2)))
    return found


def pattern(template):
    return re.compile("^" + ".+".join(re.escape(p) for p in template.split(PLACEHOLDER)) + "$")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    paths = sorted(glob.glob(os.path.join(root, "tests", "bench", "bench-*.c")) +
                   glob.glob(os.path.join(root, "tests", "bench", "bench-*.py")) +
                   glob.glob(os.path.join(root, "tests", "workloads", "bench-*.c")))
    problems = []
    names = []  # (where, template)
    for path in paths:
        rel = os.path.relpath(path, root)
        try:
            found = scan(path)
        except (OSError, SyntaxError, UnicodeDecodeError) as e:
            problems.append(f"{rel}:1: cannot read: {e}")
            continue
        if not found and rel.startswith(os.path.join("tests", "bench", "")):
            problems.append(f"{rel}:1: no BENCH metric name found (the check cannot see them)")
        for line, name, value in found:
            where = f"{rel}:{line}"
            if name is None:
                problems.append(f"{where}: figures[...] key is not a literal name")
            elif not name or name.startswith(PLACEHOLDER):
                problems.append(f"{where}: metric name {name!r} is not spelled out")
            else:
                names.append((where, name))
            if value and value.lower().lstrip("+-") in ("nan", "inf", "infinity"):
                problems.append(f"{where}: BENCH {name} prints {value}")
    for i, (where, name) in enumerate(names):
        for other_where, other in names[:i]:
            if name == other:
                problems.append(f"{where}: metric {name} also printed at {other_where}")
            elif PLACEHOLDER in other and PLACEHOLDER not in name and pattern(other).match(name):
                problems.append(f"{where}: metric {name} is also produced by {other} at "
                                f"{other_where}")
            elif PLACEHOLDER in name and PLACEHOLDER not in other and pattern(name).match(other):
                problems.append(f"{where}: metric {name} also produces {other} of {other_where}")
    for p in problems:
        print(p)
    if not paths:
        print(f"{root}: no benchmark sources found")
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
