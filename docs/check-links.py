#!/usr/bin/env python3
"""Fails on a relative link in the README, the book or the results file whose target is
missing, and on a book include whose file or anchor is missing (mdbook only logs the
first and includes nothing for the second)."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
files = [root / "README.md", root / "bench" / "RESULTS.md", *sorted((root / "docs" / "src").glob("*.md"))]
bad = []
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
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = (f.parent / target.split("#")[0]).resolve()
        if not path.exists():
            bad.append(f"{f.relative_to(root)}: {target}")
if bad:
    print("broken links:\n  " + "\n  ".join(bad), file=sys.stderr)
    sys.exit(1)
print(f"links: {len(files)} files, none broken")
