#!/usr/bin/env python3
"""Keeps the label lists of BUILD.bazel files in one order (buildifier's): within each
multi-line `deps`, `data` or `srcs` list, local labels (":x") first, then this repository's
("//x"), then external ones ("@x"), each group sorted. --check lists the files out of order and
exits 1; --fix rewrites them."""
import re
import subprocess
import sys

LIST = re.compile(r'(?m)^(?P<indent>[ \t]+)(?P<name>deps|data|srcs|hdrs) = \[\n(?P<body>(?:[ \t]+"[^"\n]+",\n)+)(?P=indent)\]')


def key(label):
    return ({":": 0, "/": 1, "@": 2}.get(label[0], 0), label)


def ordered(text):
    def sort(match):
        lines = match.group("body").splitlines(keepends=True)
        labels = sorted(set(lines), key=lambda line: key(line.strip().strip('",')))
        return match.group(0).replace(match.group("body"), "".join(labels))
    return LIST.sub(sort, text)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "--check"
    files = subprocess.check_output(["git", "ls-files", "BUILD.bazel", "*/BUILD.bazel"],
                                    text=True).split()
    bad = []
    for path in files:
        text = open(path).read()
        fixed = ordered(text)
        if fixed != text:
            bad.append(path)
            if mode == "--fix":
                open(path, "w").write(fixed)
    if bad and mode != "--fix":
        print("build order: label lists out of order (fix: scripts/build_order.py --fix):",
              *bad, sep="\n  ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
