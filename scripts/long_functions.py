#!/usr/bin/env python3
"""Lists C++/CUDA functions longer than a limit (default 120 lines), longest first.

A brace-matching heuristic, not a parser: comments, string and character literals and
preprocessor lines are blanked out, then every `{` whose text since the previous `;`, `{`
or `}` ends in a parameter list (optionally followed by const, override, noexcept or a
trailing return type) opens a function; lambdas count as part of the function that holds
them. Lines run from the first line of the signature to the closing brace.

  scripts/long_functions.py [--limit N] [PATH ...]     (default: src tools)
"""
import argparse
import os
import re
import sys

EXTS = (".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh")
CONTROL = re.compile(r"^(if|for|while|switch|catch|else\s+if|do)\b")
CONTAINER = re.compile(r"^(namespace|class|struct|union|enum|extern)\b|\b(class|struct|union)\s+\w+")
FUNC_TAIL = re.compile(
    r"\)\s*(?:const\b|override\b|final\b|noexcept\b|mutable\b|->\s*[\w:<>,\s*&]+|\s)*$")


def blank(src):
    """The source with comments, literals and preprocessor lines turned into spaces."""
    out = list(src)
    i, n = 0, len(src)

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    at_line_start = True
    while i < n:
        c = src[i]
        if at_line_start and c == "#":
            j = i
            while j < n and not (src[j] == "\n" and src[j - 1] != "\\"):
                j += 1
            wipe(i, j)
            i = j
            continue
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
        elif c == "R" and src.startswith('R"', i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'R"([^(\s]{0,16})\(', src[i:])
            if not m:
                i += 1
                continue
            end = src.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end + len(m.group(1)) + 2
            wipe(i, end)
            i = end
        elif c in "\"'":
            if c == "'" and i > 0 and src[i - 1].isalnum():  # digit separator: 1'000
                i += 1
                continue
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            wipe(i, j + 1)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def name_of(head):
    """The name before the last top-level parameter list: `f` in
    `__launch_bounds__(256) f(int x) const`."""
    depth, name = 0, "?"
    for m in re.finditer(r"[()]", head):
        if m.group() == "(":
            if depth == 0:
                w = re.search(r"(operator\s*\S+?|[~\w:]+)\s*(?:<[^()]*>)?\s*$", head[:m.start()])
                if w:
                    name = w.group(1)
            depth += 1
        else:
            depth = max(0, depth - 1)
    return name


def functions(path):
    """(name, first line, last line) of each outermost function in the file."""
    text = blank(open(path, encoding="utf-8", errors="replace").read())
    line_of = []
    line = 1
    for ch in text:
        line_of.append(line)
        line += ch == "\n"
    stack = []  # (kind, head start offset)
    boundary = 0  # offset after the last ; { or }
    found = []
    for i, ch in enumerate(text):
        if ch == ";":
            boundary = i + 1
        elif ch == "{":
            head = text[boundary:i].strip()
            in_function = any(k == "function" for k, _ in stack)
            if in_function:
                kind = "block"
            elif CONTAINER.search(head) and "(" not in head:
                kind = "container"
            elif head and FUNC_TAIL.search(head) and not CONTROL.match(head):
                kind = "function"
            else:
                kind = "block"
            start = boundary + (len(text[boundary:i]) - len(text[boundary:i].lstrip()))
            stack.append((kind, start))
            boundary = i + 1
        elif ch == "}":
            if stack:
                kind, start = stack.pop()
                if kind == "function":
                    found.append((name_of(text[start:text.index("{", start)]), line_of[start],
                                  line_of[i]))
            boundary = i + 1
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=120)
    ap.add_argument("paths", nargs="*", default=["src", "tools"])
    args = ap.parse_args()
    rows = []
    for root in args.paths:
        walk = [(root, [], [root])] if os.path.isfile(root) else os.walk(root)
        for d, _, files in walk:
            for f in sorted(files):
                p = f if os.path.isfile(root) else os.path.join(d, f)
                if not p.endswith(EXTS):
                    continue
                for name, a, b in functions(p):
                    if b - a + 1 > args.limit:
                        rows.append((b - a + 1, p, a, name))
    for length, p, a, name in sorted(rows, key=lambda r: (-r[0], r[1])):
        print(f"{length:5d}  {p}:{a}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
