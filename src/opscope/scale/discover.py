"""A job as input: a directory or glob of rank traces (or several files) as the list of trace files to read.

Which files are traces is decided by content (the readers' sniff, 64 KiB each), never by name; a file no reader
knows is named and left out. The rank comes from the trace's distributed info once it is read; the file name
(``rank-3``, ``rank_3``, ``worker3``, ``trace.3.json``) is only the fallback, and the view says when it was used.
"""

from __future__ import annotations

import glob
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from opscope.errors import UsageError

_GLOB = re.compile(r"[*?\[]")
_RANK_IN_NAME = re.compile(r"(?:rank|worker|proc|gpu)[-_.]?(\d+)", re.IGNORECASE)
#: Files never asked about: what recording directories hold beside traces.
_NOT_TRACES = {"run.json", "cases.json", "MANIFEST.tsv", "README.md"}
#: A job this large is refused without --max-ranks (a typo'd glob over a home directory).
MAX_FILES = 100_000


@dataclass
class JobInputs:
    """The trace files of a job and the files that were left out (``skipped``: one line each)."""

    files: list[Path]
    skipped: list[str] = field(default_factory=list)
    spec: str = ""


def is_job_spec(text: str | Path) -> bool:
    """Whether a command's TRACE argument names a job (a glob, or a directory that is not an `opscope record`
    recording) rather than one trace."""
    text = str(text)
    if _GLOB.search(text) and not Path(text).exists():
        return True
    path = Path(text)
    return path.is_dir() and not (path / "run.json").is_file()


def rank_from_name(path: Path) -> int | None:
    """The rank a file's name suggests: ``rank-3.json`` -> 3, ``worker3.pt.trace.json`` -> 3; else its last number
    when it is the only one in the name; else None."""
    name = path.name
    m = _RANK_IN_NAME.search(name)
    if m:
        return int(m.group(1))
    numbers = re.findall(r"\d+", name.split(".")[0])
    return int(numbers[0]) if len(numbers) == 1 else None


def job_inputs(specs: list[str] | list[Path]) -> JobInputs:
    """The trace files named by ``specs``: directories (searched recursively), globs, files. Every entry found that
    is not read is named in ``skipped`` (one line each: a directory a glob matched, a link to a directory, a FIFO,
    a device, a dangling link, a file that cannot be read or is not a trace); none is opened before its type is
    known, so a FIFO never blocks."""
    from opscope.errors import TraceError
    from opscope.ingest import pick_reader

    candidates: list[Path] = []
    for spec in specs:
        text = str(spec)
        path = Path(text)
        if path.is_dir():
            # the folders below are searched by rglob itself (it follows no link to a folder: such a link is an entry)
            candidates += sorted((p for p in path.rglob("*") if not _hidden(p, path)
                                  and not (p.is_dir() and not p.is_symlink())), key=_natural)
        elif path.is_file():
            candidates.append(path)
        elif _GLOB.search(text):
            found = sorted((Path(p) for p in glob.glob(text, recursive=True)), key=_natural)
            if not found:
                raise UsageError(f"{text}: no file matches this pattern")
            # a recursive pattern's folders are what it searches; any other folder it matches is named below
            candidates += [p for p in found if not ("**" in text and p.is_dir() and not p.is_symlink())]
        elif path.exists() or path.is_symlink():  # a FIFO, a device, a dangling link: named below, never opened
            candidates.append(path)
        else:
            raise UsageError(f"{text}: no such file or directory")
        if len(candidates) > MAX_FILES:
            raise UsageError(f"{text}: more than {MAX_FILES} files; point at the directory of the job's traces")
    files, skipped = [], []
    seen: set[str] = set()
    named: set[tuple[str, str]] = set()
    for p in candidates:
        if p.name in _NOT_TRACES:
            continue
        key = os.path.realpath(p)  # a link loop resolves to itself (Path.resolve raises)
        what = not_a_file(p)
        if what is not None:
            # each entry once, by what it is and its name: a folder and a link to it are two entries, a recursive
            # glob that comes back to one through a link to a folder above it finds the same entry again
            if (key, p.name) not in named:
                named.add((key, p.name))
                skipped.append(f"{p}: left out, {what}")
            continue
        if key in seen:
            continue
        seen.add(key)
        try:
            pick_reader(p)
        except TraceError as exc:
            skipped.append(f"{p}: left out, {exc.problem}")
            continue
        except OSError as exc:
            skipped.append(f"{p}: left out, cannot be read ({exc.strerror or exc})")
            continue
        files.append(p)
    if not files:
        where = ", ".join(str(s) for s in specs)
        what = "is a directory with no trace files in it" if len(specs) == 1 and Path(specs[0]).is_dir() else \
            "no trace files found"
        one = f"{specs[0]}: left out, "
        left = f": {skipped[0].removeprefix(one)}" if len(skipped) == 1 and skipped[0].startswith(one) else \
            f" ({len(skipped)} files are not traces)" if skipped else ""
        raise UsageError(f"{where}: {what}{left} (give a trace file, or a directory or glob of a job's rank traces)")
    return JobInputs(files=files, skipped=skipped, spec=", ".join(str(s) for s in specs))


def not_a_file(path: Path) -> str | None:
    """Why ``path`` is no file to read, in words (a directory, a FIFO, a device, a socket, a dangling link, a link
    loop), found from its status alone: nothing is opened. None for a regular file (or a link to one)."""
    try:
        mode = path.stat().st_mode  # follows links: what reading it would open
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe), not opened"),
             (stat.S_ISCHR, "a character device, not opened"), (stat.S_ISBLK, "a block device, not opened"),
             (stat.S_ISSOCK, "a socket, not opened"))
    kind = next((words for test, words in kinds if test(mode)), None)
    if kind is None:
        return None if stat.S_ISREG(mode) else "not a regular file, not opened"
    if path.is_symlink():
        return f"a link to {kind}" + (", not followed" if stat.S_ISDIR(mode) else "")
    return kind


def _natural(path: Path) -> list:
    """rank-2 before rank-10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def _hidden(path: Path, root: Path) -> bool:
    # the cache and editors' files: .opscope, .ipynb_checkpoints, .#rank-0.json
    return any(part.startswith(".") for part in path.relative_to(root).parts)
