"""Compare two folders written by json_snapshot.py: which outputs differ (stdout and exit code; stderr apart).

    python tools/compare_snapshots.py BEFORE AFTER [--formats json,csv]

Files are matched by name suffix, so a snapshot of one sub-folder compares with a snapshot of the whole tree.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> None:
    before, after = Path(sys.argv[1]), Path(sys.argv[2])
    formats = tuple((sys.argv[4] if len(sys.argv) > 4 else "json,csv,table").split(","))
    index = {p.name: p for p in before.iterdir()}
    same = differ = missing = 0
    stderr_differ = []
    for p in sorted(after.rglob("*")):
        if not p.is_file() or p.suffix not in (".out", ".rc", ".err"):
            continue
        fmt = p.name.rsplit(".", 2)[-2]
        if fmt not in formats:
            continue
        match = index.get(p.name) or next((q for n, q in index.items() if n.endswith("__" + p.name)), None)
        if match is None:
            missing += 1
            continue
        if match.read_bytes() == p.read_bytes():
            same += 1
        elif p.suffix == ".err":
            stderr_differ.append(p.name)
        else:
            differ += 1
            print("DIFFERS", p.name)
    print(f"{same} same, {differ} differ (stdout/exit code), {len(stderr_differ)} stderr differ, {missing} unmatched")
    for name in stderr_differ[:40]:
        print("  stderr:", name)


if __name__ == "__main__":
    main()
