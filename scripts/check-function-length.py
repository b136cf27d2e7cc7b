#!/usr/bin/env python3
"""Fails when a Rust function is longer than a limit and not allowlisted.

Usage: check-function-length.py [--self-test] [--limit N] [--allow FILE] SRC_DIR...
       (e.g. router/src common/src; --self-test first checks the checker;
       the limit is 100 lines, the allowlist scripts/function-length-allow.txt)

A function's length is counted from the line of its `fn` keyword to the
line of its closing brace, both included. Functions in `#[cfg(test)]`
items (the `mod tests { ... }` blocks) and in files named `tests.rs`,
`*_tests.rs` or under a `tests/` folder are not counted: the limit is for
the code that serves requests. Comments, string and char literals are
skipped, so a `{` in a format string does not move a brace count.

Each long function is printed as `LINES path::name (line L)`. The exit
status is 1 if any of them is not in the allowlist, whose lines read
`path::fn_name  # why` (the reason is required; `#` lines are comments).
An allowlist entry that no longer matches a long function is reported so
that it can be removed, but does not fail the check.
"""

import os
import re
import sys

DEFAULT_LIMIT = 100
DEFAULT_ALLOW = os.path.join(os.path.dirname(os.path.abspath(__file__)), "function-length-allow.txt")

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RAW_STRING = re.compile(r'b?r(#*)"')


def tokens(text):
    """Yields (token, line) for identifiers and punctuation, skipping
    whitespace, comments and string, byte-string and char literals."""
    i, line, n = 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    line += text[i] == "\n"
                    i += 1
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    line += text[i + 1 : i + 2] == "\n"
                    i += 1
                line += text[i] == "\n"
                i += 1
            i += 1
        elif RAW_STRING.match(text, i):
            m = RAW_STRING.match(text, i)
            close = '"' + m.group(1)
            end = text.find(close, m.end())
            end = n if end < 0 else end + len(close)
            line += text.count("\n", i, end)
            i = end
        elif c == "'":
            # A char literal ('x', '\n', '\u{1F600}', '{') or a lifetime ('a).
            if text.startswith("\\", i + 1):
                end = text.find("'", i + 3)
                i = n if end < 0 else end + 1
            elif i + 2 < n and text[i + 2] == "'":
                i += 3
            else:
                m = IDENT.match(text, i + 1)
                i = m.end() if m else i + 1
        elif c.isalnum() or c == "_":
            m = re.compile(r"[A-Za-z0-9_]+").match(text, i)
            yield m.group(0), line
            i = m.end()
        else:
            yield c, line
            i += 1


def matching(toks, start):
    """Index of the `}` closing the `{` at toks[start]."""
    depth = 0
    for k in range(start, len(toks)):
        if toks[k][0] == "{":
            depth += 1
        elif toks[k][0] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(toks) - 1


def item_end(toks, start):
    """Index of the last token of the item starting at toks[start]: its
    block's closing brace, or the `;` ending it (outside () and [])."""
    depth = 0
    for k in range(start, len(toks)):
        t = toks[k][0]
        if t in "([":
            depth += 1
        elif t in ")]":
            depth -= 1
        elif t == "{" and depth == 0:
            return matching(toks, k)
        elif t == ";" and depth == 0:
            return k
    return len(toks) - 1


def attribute(toks, k):
    """(is `#![...]`, the tokens inside, index after it) for an attribute
    starting at toks[k] == '#', or None."""
    inner = k + 1 < len(toks) and toks[k + 1][0] == "!"
    open_ = k + 2 if inner else k + 1
    if open_ >= len(toks) or toks[open_][0] != "[":
        return None
    depth = 0
    for j in range(open_, len(toks)):
        if toks[j][0] == "[":
            depth += 1
        elif toks[j][0] == "]":
            depth -= 1
            if depth == 0:
                return inner, [t for t, _ in toks[open_ + 1 : j]], j + 1
    return None


def functions(text):
    """[(name, first line, last line)] of the functions with a body in the
    source text, outside `#[cfg(test)]` items (nested functions included)."""
    toks = list(tokens(text))
    found, k = [], 0
    while k < len(toks):
        t = toks[k][0]
        if t == "#":
            attr = attribute(toks, k)
            if attr:
                inner, body, after = attr
                if body == ["cfg", "(", "test", ")"]:
                    if inner:
                        return found
                    # Skip the attributed item (and any attributes after it).
                    k = item_end(toks, after) + 1
                else:
                    k = after
                continue
        if t == "fn" and k + 1 < len(toks) and IDENT.fullmatch(toks[k + 1][0]):
            end = item_end(toks, k)
            if toks[end][0] == "}":
                found.append((toks[k + 1][0], toks[k][1], toks[end][1]))
            k += 2
            continue
        k += 1
    return found


def is_test_file(path):
    name = os.path.basename(path)
    parts = os.path.normpath(path).split(os.sep)
    return name == "tests.rs" or name.endswith("_tests.rs") or "tests" in parts[:-1]


def long_functions(src, limit):
    """[(lines, 'path::name', first line)] over the limit under src."""
    out = []
    for dirpath, dirs, files in os.walk(src):
        dirs.sort()
        for f in sorted(files):
            path = os.path.normpath(os.path.join(dirpath, f))
            if not f.endswith(".rs") or is_test_file(path):
                continue
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            for name, first, last in functions(text):
                lines = last - first + 1
                if lines > limit:
                    out.append((lines, f"{path}::{name}", first))
    return out


def read_allowlist(path):
    """{'path::name': reason}; raises ValueError on a line without a reason."""
    allowed = {}
    if not os.path.exists(path):
        return allowed
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            entry, _, why = line.partition("#")
            entry, why = entry.strip(), why.strip()
            if not why or "::" not in entry:
                raise ValueError(f"{path}:{number}: expected `path::fn_name  # why`, got {line!r}")
            allowed[entry] = why
    return allowed


def check(srcs, limit, allowed):
    """Prints the long functions; returns (the ones not allowed, the
    allowlist entries under the given folders that matched nothing)."""
    bad, seen = [], set()
    for src in srcs:
        for lines, name, first in long_functions(src, limit):
            seen.add(name)
            if name in allowed:
                print(f"{lines:5} {name} (line {first})  allowed: {allowed[name]}")
            else:
                print(f"{lines:5} {name} (line {first})  OVER {limit} LINES")
                bad.append(name)
    roots = [os.path.normpath(s) + os.sep for s in srcs]
    stale = [a for a in sorted(allowed) if a not in seen and any(a.startswith(r) for r in roots)]
    return bad, stale


def self_test():
    text = """
fn short() {
    let s = "}}}{";
    let c = '{';
    let r = r#"{ " }"#;
    // }
    /* { /* nested } */ */
}
pub(crate) async fn long<'a>(x: &'a [u8; 4]) -> Result<(), String>
where
    'a: 'static,
{
    fn inner() { let _ = b'}'; }
    let _ = format!("{x:?} {{");
}
trait T { fn decl(&self, a: [u8; 2]); fn with_default(&self) {} }
#[cfg(test)]
#[allow(dead_code)]
mod tests {
    fn in_tests() {}
}
#[cfg(test)]
fn test_helper(x: [u8; 3]) {}
fn after_tests() {
}
"""
    got = functions(text)
    want = [
        ("short", 2, 8),
        ("long", 9, 15),
        ("inner", 13, 13),
        ("with_default", 16, 16),
        ("after_tests", 24, 25),
    ]
    assert got == want, got
    assert functions("#![cfg(test)]\nfn x() {\n}\n") == []
    assert functions("let f: fn(u8) -> u8 = g;\nfn y() {}\n") == [("y", 2, 2)]
    assert is_test_file("a/src/tests.rs") and is_test_file("a/src/x_tests.rs")
    assert is_test_file("a/src/tests/x.rs") and not is_test_file("a/src/attests.rs")
    print("check-function-length self-test passed")


def main(argv):
    limit, allow = DEFAULT_LIMIT, DEFAULT_ALLOW
    if argv[:1] == ["--self-test"]:
        self_test()
        argv = argv[1:]
        if not argv:
            return 0
    while argv[:1] and argv[0] in ("--limit", "--allow") and len(argv) > 1:
        if argv[0] == "--limit":
            limit = int(argv[1])
        else:
            allow = argv[1]
        argv = argv[2:]
    if not argv or any(a.startswith("-") for a in argv):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for src in argv:
        if not os.path.isdir(src):
            print(f"{src}: not a directory (pass crate source folders, e.g. router/src)", file=sys.stderr)
            return 2
    try:
        allowed = read_allowlist(allow)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    bad, stale = check(argv, limit, allowed)
    for entry in stale:
        print(f"note: {entry} is allowlisted in {allow} but no longer over {limit} lines; remove it")
    if bad:
        print(f"{len(bad)} function(s) over {limit} lines: split them into named steps, "
              f"or add `path::fn_name  # why` to {allow}")
        return 1
    print(f"no function over {limit} lines outside the allowlist in {' '.join(argv)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
