#!/usr/bin/env python3
"""Fails when the top-level modules of a crate import each other in a cycle.

Usage: check-module-cycles.py [--self-test] SRC_DIR...
       (e.g. router/src common/src; --self-test first checks the checker)

A top-level module is `SRC_DIR/<name>.rs` together with `SRC_DIR/<name>/`.
Module A depends on B when a file of A names `crate::B` (in a `use` path, a
`use crate::{B, ...}` group or an expression). The strongly connected
components of that graph with more than one module are the cycles; each is
printed and the exit status is 1 if there is any. Comments are ignored.
"""

import os
import re
import sys

ROOT_FILES = {"lib.rs", "main.rs"}


def strip_comments(text):
    """Removes // and /* */ comments (string literals naming crate:: are rare
    enough in this workspace that they are not special-cased)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def brace_group(text, start):
    """The text inside the braces opening at text[start] == '{'."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return text[start + 1 :]


def split_top(group):
    """Splits a `{a, b::{c, d}, e}` body at its top-level commas."""
    parts, depth, cur = [], 0, []
    for ch in group:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def referenced_modules(text):
    """Names of the crate's top-level items this source text refers to."""
    text = strip_comments(text)
    names = set()
    for m in re.finditer(r"\bcrate\s*::\s*", text):
        rest = m.end()
        if rest < len(text) and text[rest] == "{":
            for part in split_top(brace_group(text, rest)):
                head = re.match(r"[A-Za-z_][A-Za-z0-9_]*", part)
                if head:
                    names.add(head.group(0))
        else:
            head = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text[rest:])
            if head:
                names.add(head.group(0))
    return names


def module_files(src):
    """{top-level module name: [its .rs files]}."""
    modules = {}
    for entry in sorted(os.listdir(src)):
        path = os.path.join(src, entry)
        if entry.endswith(".rs") and entry not in ROOT_FILES:
            modules.setdefault(entry[:-3], []).append(path)
        elif os.path.isdir(path):
            for dirpath, _, files in os.walk(path):
                for f in files:
                    if f.endswith(".rs"):
                        modules.setdefault(entry, []).append(os.path.join(dirpath, f))
    return modules


def dependency_graph(sources):
    """sources: {module: [source text]} -> {module: set(modules it uses)}."""
    graph = {}
    for module, texts in sources.items():
        used = set()
        for text in texts:
            used |= referenced_modules(text)
        graph[module] = {m for m in used if m in sources and m != module}
    return graph


def cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def edges_within(graph, component):
    members = set(component)
    return [f"{a} -> {b}" for a in component for b in sorted(graph[a] & members)]


def check(src):
    modules = module_files(src)
    sources = {}
    for name, files in modules.items():
        sources[name] = []
        for path in files:
            with open(path, encoding="utf-8") as f:
                sources[name].append(f.read())
    graph = dependency_graph(sources)
    found = cycles(graph)
    for component in found:
        print(f"{src}: import cycle between {', '.join(component)}")
        for edge in edges_within(graph, component):
            print(f"    {edge}")
    return found


def self_test():
    refs = referenced_modules(
        "use crate::a::X;\nuse crate::{b, c::{D, E}};\n// crate::ignored\nlet x = crate::f::g();"
    )
    assert refs == {"a", "b", "c", "f"}, refs
    graph = dependency_graph(
        {
            "a": ["use crate::b::B;"],
            "b": ["use crate::{c::C, d};"],
            "c": ["fn f() { crate::a::run() }"],
            "d": ["/* crate::a */ use crate::e;"],
            "e": [""],
        }
    )
    assert cycles(graph) == [["a", "b", "c"]], cycles(graph)
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert cycles({"x": {"y"}, "y": {"x"}, "p": {"q"}, "q": {"p"}}) == [["p", "q"], ["x", "y"]]
    print("check-module-cycles self-test passed")


def main(argv):
    if argv[:1] == ["--self-test"]:
        self_test()
        argv = argv[1:]
        if not argv:
            return 0
    if not argv or any(a.startswith("-") for a in argv):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    bad = False
    for src in argv:
        if not os.path.isdir(src):
            print(f"{src}: not a directory (pass crate source folders, e.g. router/src)", file=sys.stderr)
            return 2
        bad |= bool(check(src))
    if not bad:
        print(f"no import cycle between top-level modules in {' '.join(argv)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
