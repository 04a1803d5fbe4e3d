#!/usr/bin/env python3
"""The shape of runtime/ (docs/architecture.md, "The source tree"), checked on the source and
the build.

  layering.py SRC [BUILD]

- Every source file lives in a subsystem folder, and each folder uses only the folders below
  it (LAYERS), by #include and, with BUILD, by call (symbols its objects take from others').
- Another folder reaches a subsystem only through its face, runtime/<folder>/<folder>.h.
- No circle between files: neither among the #includes, nor among modules (a .c with its .h)
  through includes and calls together.
- Every file is at most MAX_LINES long.
Prints each violation on one line and exits 1 when there is any.
"""
import os
import re
import subprocess
import sys

# Each folder and the folders it may use. The order of this table is the layering, bottom up;
# runtime/CMakeLists.txt links the same graph.
LAYERS = {
    "base": [],
    "model": ["base"],
    "plan": ["model", "base"],
    "job": ["model", "base"],
    "io": ["job", "model", "base"],
    "observe": ["plan", "job", "model", "base"],
    "engine": ["observe", "io", "plan", "job", "model", "base"],
    "optimizer": ["observe", "io", "job", "model", "base"],
    "rank": ["engine", "optimizer", "io", "job", "model", "base"],
}
MAX_LINES = 600
INCLUDE = re.compile(r'^\s*#\s*include\s+"(runtime/[^"]+)"', re.M)


def sources(root):
    out = []
    for folder in sorted(os.listdir(root)):
        path = os.path.join(root, folder)
        if not os.path.isdir(path):
            continue
        for name in sorted(os.listdir(path)):
            if name.endswith((".c", ".h")):
                out.append(f"runtime/{folder}/{name}")
    return out


def folder_of(path):
    return path.split("/")[1]


def module_of(path):
    return os.path.splitext(path)[0]


def find_cycle(graph):
    """One circle of graph {node: set(nodes)} as a list, or None."""
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def call_edges(build, files):
    """(module, module) pairs where one's object uses a symbol another's defines."""
    objects = {}
    for dirpath, _, names in os.walk(os.path.join(build, "runtime")):
        for name in names:
            m = re.match(r"(.+)\.c\.o$", name)
            folder = os.path.basename(dirpath)
            # objects of the current sources only: a build dir may hold stale ones
            if m and "CMakeFiles/mt_" in dirpath and f"runtime/{folder}/{m.group(1)}.c" in files:
                objects[f"runtime/{folder}/{m.group(1)}"] = os.path.join(dirpath, name)
    defined, used = {}, {}
    for mod, obj in objects.items():
        out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        used[mod] = set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U":
                used[mod].add(parts[1])
            elif len(parts) == 3 and parts[1] in "TDBR":
                defined[parts[2]] = mod
    edges = set()
    for mod, syms in used.items():
        for s in syms:
            if s in defined and defined[s] != mod:
                edges.add((mod, defined[s]))
    return edges, len(objects)


def main():
    src = sys.argv[1]
    build = sys.argv[2] if len(sys.argv) > 2 else None
    root = os.path.join(src, "runtime")
    problems = []
    for name in os.listdir(root):
        if name.endswith((".c", ".h")):
            problems.append(f"runtime/{name}: not in a subsystem folder")
    files = sources(root)
    for f in files:
        if folder_of(f) not in LAYERS:
            problems.append(f"{f}: folder {folder_of(f)} is not in the layering table")
    includes = {}
    for f in files:
        text = open(os.path.join(src, f)).read()
        lines = text.count("\n")
        if lines > MAX_LINES:
            problems.append(f"{f}: {lines} lines, more than {MAX_LINES}")
        includes[f] = set(INCLUDE.findall(text))
        for inc in includes[f]:
            a, b = folder_of(f), folder_of(inc)
            if inc not in files:
                problems.append(f"{f}: includes {inc}, which does not exist")
            elif a != b and b not in LAYERS.get(a, []):
                problems.append(f"{f}: includes {inc}, but {a}/ may not use {b}/")
            elif a != b and inc != f"runtime/{b}/{b}.h":
                problems.append(f"{f}: includes {inc}, not {b}/'s face runtime/{b}/{b}.h")

    cycle = find_cycle({f: {i for i in incs if i in includes} for f, incs in includes.items()})
    if cycle:
        problems.append("include circle: " + " -> ".join(cycle))

    modules = {}
    for f, incs in includes.items():
        modules.setdefault(module_of(f), set()).update(
            module_of(i) for i in incs if module_of(i) != module_of(f))
    if build:
        edges, n_objects = call_edges(build, files)
        if n_objects == 0:
            problems.append(f"{build}: no runtime objects found (build first)")
        for a, b in sorted(edges):
            fa, fb = folder_of(a), folder_of(b)
            if fa != fb and fb not in LAYERS.get(fa, []):
                problems.append(f"{a}.c calls into {b}.c, but {fa}/ may not use {fb}/")
            modules.setdefault(a, set()).add(b)
    cycle = find_cycle(modules)
    if cycle:
        problems.append("module circle (includes and calls): " + " -> ".join(cycle))

    for p in problems:
        print(p)
    what = "includes and calls" if build else "includes"
    print(f"{len(files)} files in {len(LAYERS)} folders, {what}: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
