"""Print the version installed of every dependency opscope declares (core and every extra), beside its declared range.

``python tools/versions.py`` after ``pip install -e '.[torch,dev]'``: the first lines of a CI log, so a red run shows
which release changed. Exit code 1 when a declared dependency is missing or outside its range (an install that pip
was talked out of, a stale environment), 0 otherwise. Reads what the installed opscope declares (its metadata), so it
says the same as pyproject.toml once opscope is installed.
"""

from __future__ import annotations

import importlib.metadata as metadata
import platform
import sys

from packaging.requirements import Requirement


def declared() -> dict[str, Requirement]:
    """Each dependency opscope declares, once (the first declaration of a name; extras that repeat it agree)."""
    found: dict[str, Requirement] = {}
    for text in metadata.requires("opscope") or []:
        req = Requirement(text)
        if req.name.lower() != "opscope":  # the dev extra names opscope's own extras
            found.setdefault(req.name.lower(), req)
    return found


def _range(req: Requirement) -> str:
    """The declared range, lower bound first (packaging lists it in no set order)."""
    return ",".join(sorted((str(s) for s in req.specifier), key=lambda s: not s.startswith((">", "=")))) or "any"


def rows() -> list[tuple[str, str, str, str]]:
    """(name, declared range, installed version or "-", verdict) for every declared dependency."""
    out = []
    for _, req in sorted(declared().items()):
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            out.append((req.name, _range(req), "-", "not installed"))
            continue
        inside = req.specifier.contains(version, prereleases=True)
        out.append((req.name, _range(req), version, "ok" if inside else "OUTSIDE THE RANGE"))
    return out


def main() -> int:
    print(f"versions: Python {platform.python_version()}, opscope {metadata.version('opscope')}, "
          f"pip {metadata.version('pip')}")
    table = rows()
    width = max(len(r[0]) for r in table)
    bad = 0
    for name, spec, version, verdict in table:
        # an extra that was not installed (e.g. bench's HTA) is said, not counted: only a wrong version is an error
        bad += verdict == "OUTSIDE THE RANGE"
        print(f"  {name:<{width}}  {version:<14} {spec:<22} {verdict if verdict != 'ok' else ''}".rstrip())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
