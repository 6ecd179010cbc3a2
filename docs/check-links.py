#!/usr/bin/env python3
"""Fails on a relative link in the README, the book or the results file whose target is
missing, or whose #section names no heading there, and on a book include whose file or
anchor is missing (mdbook only logs the first and includes nothing for the second)."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
files = [root / "README.md", root / "bench" / "RESULTS.md", *sorted((root / "docs" / "src").glob("*.md"))]
bad = []


def slugs(md):
    """The ids mdbook and GitHub give a Markdown file's headings."""
    text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)
    out = set()
    for title in re.findall(r"^#+\s+(.*?)\s*$", text, flags=re.M):
        title = re.sub(r"[`*_\[\]]|\]\([^)]*\)", "", title).lower()
        out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


for f in files:
    text = f.read_text()
    for target, anchor in re.findall(r"\{\{#include ([^}:\s]+)(?::([A-Za-z_][\w-]*))?", text):
        source = (f.parent / target).resolve()
        if not source.exists():
            bad.append(f"{f.relative_to(root)}: include {target}")
        elif anchor:
            code = source.read_text()
            if not all(re.search(rf"ANCHOR{end}: {anchor}\b", code) for end in ("", "_END")):
                bad.append(f"{f.relative_to(root)}: include {target}:{anchor} (no such anchor)")
    # Links outside code blocks only.
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target):
            continue
        file, _, section = target.partition("#")
        path = (f.parent / file).resolve() if file else f
        if not path.exists():
            bad.append(f"{f.relative_to(root)}: {target}")
        elif section and path.suffix == ".md" and section not in slugs(path):
            bad.append(f"{f.relative_to(root)}: {target} (no such section)")
if bad:
    print("broken links:\n  " + "\n  ".join(bad), file=sys.stderr)
    sys.exit(1)
print(f"links: {len(files)} files, none broken")
