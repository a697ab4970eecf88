"""The job's cache as one dataset partitioned by rank: ``<cache>/jobs/<key>/<table>/rank=<r>/part.arrow``.

Each file is a hard link to the rank's own cache entry (no copy; a symbolic link where the file system has no
hard links), so DuckDB (``opscope query DIR "SQL"``) reads every rank's table as one with a ``rank`` column, and
reads only the columns and ranks the SQL asks for. Written under a temporary name and renamed into place.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from opscope.model.schema import TABLE_SCHEMAS
from opscope.store.files import TABLE_SUFFIX, table_file


def job_dataset(entries: Mapping[int, str], root: Path) -> Path:
    """The dataset directory of these rank cache entries (made once; the key is the set of entries)."""
    key = hashlib.blake2b("|".join(f"{r}={e}" for r, e in sorted(entries.items())).encode(), digest_size=12)
    target = root / "jobs" / key.hexdigest()
    if (target / "ranks.tsv").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
    try:
        for rank, entry in sorted(entries.items()):
            for table in TABLE_SCHEMAS:
                source = table_file(Path(entry), table)
                if not source.is_file():
                    continue
                folder = tmp / table / f"rank={rank}"
                folder.mkdir(parents=True)
                _link(source, folder / f"part{TABLE_SUFFIX}")
        (tmp / "ranks.tsv").write_text("".join(f"{r}\t{e}\n" for r, e in sorted(entries.items())))
        try:
            os.rename(tmp, target)
        except OSError:  # made meanwhile by another run: theirs is the same
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _link(source: Path, link: Path) -> None:
    try:
        os.link(source, link)
    except OSError:
        try:
            os.symlink(source.resolve(), link)
        except OSError:
            shutil.copyfile(source, link)


def dataset_tables(directory: Path) -> dict[str, object]:
    """The dataset's tables as lazy Arrow datasets (DuckDB scans them, pushing filters and columns down)."""
    import pyarrow.dataset as ds

    tables: dict[str, object] = {}
    for table in TABLE_SCHEMAS:
        folder = directory / table
        if folder.is_dir():
            tables[table] = ds.dataset(folder, format="ipc", partitioning="hive")
    return tables
