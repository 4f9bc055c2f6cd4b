#!/usr/bin/env python3
"""Checks that every relative link in README.md, BENCHMARKS.md and docs/**/*.md resolves: the file
exists and, for `file.md#anchor`, the file has a heading with that GitHub slug. Prints each broken
link as FILE:LINE: TARGET and exits 1 when there is any.

    python3 scripts/check-links.py
"""
import functools
import glob
import os
import re
import sys

LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*```")


def slug(heading):
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@functools.lru_cache(maxsize=None)
def anchors(path):
    found, counts, fenced = set(), {}, False
    for line in open(path, encoding="utf-8"):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or not line.startswith("#"):
            continue
        base = slug(line.lstrip("#"))
        n = counts.get(base, 0)
        counts[base] = n + 1
        found.add(base if n == 0 else "%s-%d" % (base, n))
    return found


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    files = ["README.md", "BENCHMARKS.md"] + sorted(glob.glob("docs/**/*.md", recursive=True))
    broken = 0
    for path in files:
        fenced = False
        for number, line in enumerate(open(path, encoding="utf-8"), 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                continue
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue  # http:, https:, mailto:
                file_part, _, anchor = target.partition("#")
                resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                if not os.path.exists(resolved):
                    print("%s:%d: %s (no such file)" % (path, number, target))
                    broken += 1
                elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                    print("%s:%d: %s (no such heading)" % (path, number, target))
                    broken += 1
    print("%d files, %d broken links" % (len(files), broken))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
