"""Which graph-capture traces go with an execution trace: those given, or the ``capture_traces/`` folder beside it.

Inference servers (vLLM, SGLang, xDiT) that profile with CUDA/HIP graphs write the traces of the graph captures into
a ``capture_traces/`` folder next to the execution trace, one per rank (``graph_capture_rank_0.<time>.pt.trace.json
.gz``). :func:`opscope.analyses.capture_merge.merge_capture` gives the replayed kernels the ops recorded there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from opscope.errors import TraceError

#: The folder a server writes its capture traces into, beside the execution trace.
CAPTURE_FOLDER = "capture_traces"
#: ``--capture none``: no capture trace, not even one found beside the trace.
NO_CAPTURE = "none"
_TRACE_FILE = re.compile(r"\.json(\.gz)?$", re.IGNORECASE)
_RANK = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)


def capture_files(trace_path: Path, given: Sequence[Path] | None, rank: int | None = None) -> tuple[list[Path], str]:
    """The capture trace files for ``trace_path`` and how they were found (``"given"``, ``"found beside the
    trace"``; ``""`` when there are none). ``given``: files or folders (``none`` alone: no capture at all); without
    them, the ``capture_traces/`` folder beside the trace. From a folder, its ``.json``/``.json.gz`` files; where
    their names carry ranks and the trace's ``rank`` is known, that rank's alone."""
    if given:
        if [str(p) for p in given] == [NO_CAPTURE]:
            return [], ""
        files: list[Path] = []
        for path in given:
            if path.is_dir():
                files.extend(_traces_in(path))
            elif path.is_file():
                files.append(path)
            else:
                raise TraceError(path, "does not exist", "give a capture trace or a folder of them to --capture")
        if not files:
            raise TraceError(given[0], "holds no .json or .json.gz trace", "give the capture traces to --capture")
        return _of_rank(files, rank), "given"
    folder = trace_path.parent / CAPTURE_FOLDER
    if trace_path.parent == trace_path or not folder.is_dir():
        return [], ""
    files = _of_rank(_traces_in(folder), rank)
    return files, "found beside the trace" if files else ""


def _traces_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and _TRACE_FILE.search(p.name))


def _of_rank(files: list[Path], rank: int | None) -> list[Path]:
    """The files of ``rank`` where the names say ranks (all of them otherwise, or where none is that rank's)."""
    if rank is None or len(files) < 2:
        return files
    ranks = [_RANK.search(p.name) for p in files]
    if not all(ranks):
        return files
    mine = [p for p, m in zip(files, ranks) if m is not None and int(m.group(1)) == rank]
    return mine or files
