"""The collective calls of one rank: one row per communication kernel, with what the profiler recorded about it.

Kineto writes the collective's facts (``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``Group size``,
``dtype``, ``Process Group Name``/``Description``/``Ranks``) into the args of the NCCL/RCCL kernel and of the
CPU op ``record_param_comms`` that launched it (same ``External id``). Older traces have them on neither: then
the ``nccl:<name>`` user annotation around the launch gives the name and the input's dims and type, and last
the kernel name alone gives the collective, algorithm and protocol (``ncclKernel_AllReduce_RING_LL_Sum_float``,
``ncclDevKernel_AllGather_RING_LL``, ``ncclDevKernel_AllReduce_Sum_f32_TREE_LL128``). Each field is taken from
the first of these sources that has it.

``bytes`` is the message size S of nccl-tests: the whole buffer of one rank (``in_nelems`` x dtype size, but the
gathered output, ``out_nelems``, for allgather and gather), so that the bus-bandwidth factors of nccl-tests apply.

``pg_ranks`` is the group's ranks sorted, ``"0,1,2"``; a list longer than 64 characters is written with ranges
(``"0-1023"``, ``"0-1016:8"``: :func:`canonical_ranks`, read back with :func:`expand_ranks`), so that a large
job's per-rank tables stay small.

Trace text is untrusted: numbers must be JSON integers in range, strings are capped, and
``Process Group Ranks`` (a string such as ``"[0, 1]"``) is parsed as digits and commas only; a malformed one
becomes ``""`` (unknown) and is counted in the notes.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from opscope.analyses.event_args import args_by_id
from opscope.model.schema import kind_mask
from opscope.model.trace import Trace

COLLECTIVE_CALLS = pa.schema([
    ("pg", pa.string()),
    ("pg_desc", pa.string()),
    ("pg_ranks", pa.string()),
    ("group_size", pa.int64()),
    ("collective", pa.string()),
    ("in_nelems", pa.int64()),
    ("out_nelems", pa.int64()),
    ("dtype", pa.string()),
    ("bytes", pa.int64()),
    ("algorithm", pa.string()),
    ("protocol", pa.string()),
    ("kernel", pa.string()),
    ("device", pa.int64()),
    ("stream", pa.int64()),
    ("start_ns", pa.int64()),
    ("end_ns", pa.int64()),
    ("dur_ns", pa.int64()),
    ("step", pa.int64()),
    ("seq", pa.int64()),
    ("matched_by", pa.string()),
])

#: Every value of the ``collective`` column.
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall", "send", "recv",
               "sendrecv", "barrier", "gather", "scatter", "other")
#: Collectives whose end is not a rendezvous of every member (a send may end before its recv).
NON_BLOCKING = ("send", "recv", "sendrecv")

MATCHED_BY_GROUP = "process group"
MATCHED_BY_ORDER = "order"

_MAX_TEXT = 256               # pg names, descriptions, dtypes, kernel names kept in the table
_MAX_RANKS_TEXT = 1 << 20     # a "Process Group Ranks" string longer than this is not parsed
_MAX_NELEMS = 1 << 56         # element counts above this are not believed (bytes stay in int64)
_RANKS_RE = re.compile(r"\[\s*(?:\d{1,9}\s*(?:,\s*\d{1,9}\s*)*)?\]")
_TRUNCATED_RE = re.compile(r"\[\s*\d{1,9}\s*(?:,\s*\d{1,9}\s*)*,\s*\.\.\.\s*\]")  # torch keeps the first 30
_CANONICAL_ITEM = re.compile(r"(\d{1,9})(?:-(\d{1,9})(?::(\d{1,9}))?)?")
_PLAIN_MAX = 64               # a rank list longer than this as plain text is written with ranges
_MAX_RANKS = 1 << 20

# Normalised collective names: the trace's name lowered, "nccl:"/"c10d::" and underscores removed, then the
# variant suffixes below stripped; what is left is looked up here.
_NAMES = {
    "allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "alltoall": "alltoall", "alltoallv": "alltoall",
    "send": "send", "recv": "recv", "recvanysource": "recv", "sendrecv": "sendrecv", "barrier": "barrier",
    "gather": "gather", "scatter": "scatter",
}
_SUFFIXES = ("coalesced", "base", "intotensor", "tensor", "single", "inplace")
# Kernel-name tokens (NCCL and RCCL keep the nccl prefix): collective, algorithm, protocol.
_KERNEL_COLLECTIVES = {
    "allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "sendrecv", "send": "send", "recv": "recv",
    "alltoall": "alltoall", "alltoallpivot": "alltoall", "gather": "gather", "scatter": "scatter",
}
_ALGORITHMS_2 = {("NVLS", "TREE"): "NVLS_TREE", ("COLLNET", "DIRECT"): "COLLNET_DIRECT",
                 ("COLLNET", "CHAIN"): "COLLNET_CHAIN"}
_ALGORITHMS_1 = ("RING", "TREE", "NVLS", "PAT", "COLLNET")
_PROTOCOLS = ("LL128", "LL", "SIMPLE")

#: Bytes per element of the dtypes torch and Kineto write (ScalarType names and C++ names).
DTYPE_BYTES = {
    "Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Int": 4, "Long": 8, "Short": 2, "Byte": 1, "Char": 1,
    "Bool": 1, "ComplexHalf": 4, "ComplexFloat": 8, "ComplexDouble": 16, "UInt16": 2, "UInt32": 4, "UInt64": 8,
    "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1, "Float8_e8m0fnu": 1,
}
_DTYPE_ALIASES = {
    "float": "Float", "float32": "Float", "f32": "Float", "half": "Half", "float16": "Half", "f16": "Half",
    "bfloat16": "BFloat16", "bf16": "BFloat16", "double": "Double", "float64": "Double", "int": "Int",
    "int32": "Int", "int32_t": "Int", "long": "Long", "long int": "Long", "int64": "Long", "int64_t": "Long",
    "short": "Short", "int16": "Short", "int16_t": "Short", "unsigned char": "Byte", "uint8": "Byte",
    "uint8_t": "Byte", "signed char": "Char", "int8": "Char", "int8_t": "Char", "bool": "Bool",
    "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64",
}

_EVENT_COLUMNS = ["kind", "name", "ts_ns", "dur_ns", "device", "stream", "external_id", "event_id", "step"]


def collective_calls(trace: Trace) -> pa.Table:
    """One row per ``comm`` event of the trace, in the :data:`COLLECTIVE_CALLS` schema (see the module doc)."""
    return collective_calls_with_notes(trace)[0]


def collective_calls_and_rows(trace: Trace) -> tuple[pa.Table, list[int]]:
    """:func:`collective_calls` and, per call, its event's row."""
    table, _, rows = _calls(trace)
    return table, rows


def collective_calls_with_notes(trace: Trace) -> tuple[pa.Table, list[str]]:
    """:func:`collective_calls` and one line per thing inferred or not believed (counts of rows)."""
    table, notes, _ = _calls(trace)
    return table, notes


def _calls(trace: Trace) -> tuple[pa.Table, list[str], list[int]]:
    """The calls, the notes and each call's event row."""
    events = trace.select(_EVENT_COLUMNS)
    comm = events.filter(kind_mask(events, ("comm",)))
    if comm.num_rows == 0:
        return COLLECTIVE_CALLS.empty_table(), [], []
    comm = comm.sort_by([("ts_ns", "ascending"), ("event_id", "ascending")])
    ids = comm["event_id"].to_pylist()
    names = [str(n) if n is not None else "" for n in comm["name"].cast(pa.string()).to_pylist()]
    externals, partners = _cpu_partners(events, comm)
    parsed = args_by_id(trace, ids + [i for i, _ in partners])  # both in one reading of the args
    kernel_fields = [_fields(parsed.get(i, {})) for i in ids]
    cpu_fields = _cpu_partner_fields(parsed, externals, partners)
    missing = [i for i, (k, c) in enumerate(zip(kernel_fields, cpu_fields)) if not _has_collective(k, c)]
    annotation_fields: dict[int, dict[str, Any]] = _annotation_fields(trace, [ids[i] for i in missing]) \
        if missing else {}
    notes: list[str] = []
    counts = {"truncated": 0, "malformed": 0, "named_only": 0, "annotation": 0, "disagree": 0, "no_pg": 0, "sizes": 0}
    disagree_example = ""
    rows: dict[str, list] = {f.name: [] for f in COLLECTIVE_CALLS}
    for i, name in enumerate(names):
        merged: dict[str, Any] = {}
        for source in (kernel_fields[i], cpu_fields[i], annotation_fields.get(ids[i], {})):
            for key, value in source.items():
                if merged.get(key) is None and value is not None:
                    merged[key] = value
        from_kernel, algorithm, protocol = parse_kernel_name(name)
        collective = merged.get("collective")
        if collective is None:
            collective = from_kernel or "other"
            counts["named_only"] += 1
        elif ids[i] in annotation_fields and not _has_collective(kernel_fields[i], cpu_fields[i]):
            counts["annotation"] += 1
        if _disagree(from_kernel, collective):
            counts["disagree"] += 1
            disagree_example = disagree_example or f"a {from_kernel} kernel under {collective}"
        pg_ranks, group_size = _ranks(merged, counts)
        dtype = merged.get("dtype")
        in_n, out_n = merged.get("in_nelems"), merged.get("out_nelems")
        size = message_bytes(collective, in_n, out_n, dtype)
        if size is None and collective not in ("other", "barrier"):
            counts["sizes"] += 1
        pg = merged.get("pg") or ""
        if not pg:
            counts["no_pg"] += 1
        rows["pg"].append(pg)
        rows["pg_desc"].append(merged.get("pg_desc") or "")
        rows["pg_ranks"].append(pg_ranks)
        rows["group_size"].append(group_size)
        rows["collective"].append(collective)
        rows["in_nelems"].append(in_n)
        rows["out_nelems"].append(out_n)
        rows["dtype"].append(dtype or "")
        rows["bytes"].append(size)
        rows["algorithm"].append(algorithm)
        rows["protocol"].append(protocol)
        rows["kernel"].append(name[:_MAX_TEXT])
        rows["matched_by"].append(MATCHED_BY_GROUP if pg else MATCHED_BY_ORDER)
    rows["device"] = comm["device"].to_pylist()
    rows["stream"] = comm["stream"].to_pylist()
    starts, durs = comm["ts_ns"].to_pylist(), comm["dur_ns"].to_pylist()
    rows["start_ns"] = starts
    rows["dur_ns"] = [d if d is not None else 0 for d in durs]
    rows["end_ns"] = [s + d for s, d in zip(starts, rows["dur_ns"])]
    rows["step"] = comm["step"].to_pylist()
    rows["seq"] = _sequence(rows["pg"], rows["collective"], rows["step"])
    table = pa.table(rows, schema=COLLECTIVE_CALLS)
    if counts["malformed"]:
        notes.append(f"{counts['malformed']} collective call(s) with a malformed Process Group Ranks value or one "
                     "that disagrees with Group size: their group's ranks are taken as unknown")
    if counts["truncated"]:
        notes.append(f"{counts['truncated']} collective call(s) whose Process Group Ranks list is cut short (torch "
                     "keeps the first 30) and cannot be completed from the global rank start and stride: their "
                     "group's ranks are taken as unknown")
    if counts["annotation"]:
        notes.append(f"{counts['annotation']} collective call(s) described only by the nccl:<name> annotation around "
                     "their launch (no collective args on the kernel or record_param_comms)")
    if counts["named_only"]:
        notes.append(f"{counts['named_only']} collective call(s) known only from the kernel name (no collective "
                     "args, no nccl: annotation): their sizes are unknown")
    if counts["disagree"]:
        notes.append(f"{counts['disagree']} kernel(s) whose name names another collective than the one recorded "
                     f"for their launch (e.g. {disagree_example}): the recorded one is used")
    if counts["no_pg"]:
        notes.append(f"{counts['no_pg']} collective call(s) without a process group: they are matched across ranks "
                     "by order (collective, step, position), which is an inference")
    if counts["sizes"]:
        notes.append(f"{counts['sizes']} collective call(s) without a known message size (element count or dtype)")
    return table, notes, ids


def normalise_collective(name: Any) -> str | None:
    """``allreduce``, ``allgather``, ... (:data:`COLLECTIVES`) from a recorded name such as ``_allgather_base``,
    ``allreduce_coalesced``, ``nccl:all_reduce`` or ``c10d::reduce_scatter_tensor_coalesced_``; ``other`` for
    any other text, None for no text."""
    if not isinstance(name, str) or not name.strip():
        return None
    text = name.strip().lower()[:_MAX_TEXT]
    for prefix in ("nccl:", "rccl:", "c10d::", "gloo:"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = text.replace("_", "")
    while text not in _NAMES:
        suffix = next((x for x in _SUFFIXES if text.endswith(x) and len(text) > len(x)), None)
        if suffix is None:
            break
        text = text[:-len(suffix)]
    return _NAMES.get(text, "other")


def parse_kernel_name(name: str) -> tuple[str | None, str, str]:
    """(collective or None, algorithm, protocol) from an NCCL/RCCL kernel name; ``""`` where not named."""
    if "nccl" not in name.lower() and "rccl" not in name.lower():
        return None, "", ""
    tokens = name.split("(")[0][:_MAX_TEXT].split("_")
    collective = None
    for token in tokens[1:]:
        hit = _KERNEL_COLLECTIVES.get(token.lower())
        if hit is not None:
            collective = hit
            break
    upper = [t.upper() for t in tokens[1:]]
    algorithm = ""
    for a, b in itertools.pairwise(upper):
        if (a, b) in _ALGORITHMS_2:
            algorithm = _ALGORITHMS_2[(a, b)]
            break
    if not algorithm:
        algorithm = next((t for t in upper if t in _ALGORITHMS_1), "")
    protocol = next((t for t in upper if t in _PROTOCOLS), "")
    return collective, algorithm, protocol


def normalise_dtype(value: Any) -> str | None:
    """torch's ScalarType name (``Float``, ``BFloat16``...) of a recorded dtype (``float``, ``c10::BFloat16``);
    other text as it is (capped); None for no text."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()[:64]
    if text.startswith("c10::"):
        text = text[5:]
    if text.startswith("at::"):
        text = text[4:]
    if text in DTYPE_BYTES:
        return text
    return _DTYPE_ALIASES.get(text.lower(), text)


def message_bytes(collective: str, in_nelems: int | None, out_nelems: int | None, dtype: str | None) -> int | None:
    """The nccl-tests message size S in bytes (see the module doc); None where unknown."""
    size = DTYPE_BYTES.get(dtype or "")
    if size is None:
        return None
    if collective in ("allgather", "gather"):
        n = out_nelems
    elif collective in ("allreduce", "broadcast", "reduce", "reduce_scatter", "alltoall", "send", "recv",
                        "sendrecv", "scatter", "barrier"):
        n = in_nelems
    else:
        return None
    return None if n is None else n * size


def parse_pg_ranks(text: Any) -> list[int] | None:
    """The ranks of ``"[0, 1, 2]"`` (sorted), ``[]`` for ``"[]"`` or no value, None when malformed (anything but
    digits, commas, spaces and the brackets; too long; a rank twice). Never evaluated."""
    if text is None:
        return []
    if not isinstance(text, str) or len(text) > _MAX_RANKS_TEXT:
        return None
    stripped = text.strip()
    if not _RANKS_RE.fullmatch(stripped):
        return None
    ranks = [int(p) for p in stripped[1:-1].split(",") if p.strip()]
    if len(set(ranks)) != len(ranks):
        return None
    return sorted(ranks)


def canonical_ranks(ranks: list[int]) -> str:
    """The ``pg_ranks`` text of a set of ranks: sorted and comma-separated (``"0,1,2"``); when that is longer
    than 64 characters, every run of three or more ranks at a constant step is written ``first-last`` (step 1)
    or ``first-last:step`` (``"0-1023"``, ``"0-1016:8"``), so that a large group's calls stay small tables."""
    ranks = sorted(set(ranks))
    plain = ",".join(map(str, ranks))
    if len(plain) <= _PLAIN_MAX:
        return plain
    items, i, n = [], 0, len(ranks)
    while i < n:
        if i + 2 < n and ranks[i + 1] - ranks[i] == ranks[i + 2] - ranks[i + 1]:
            step, j = ranks[i + 1] - ranks[i], i + 2
            while j + 1 < n and ranks[j + 1] - ranks[j] == step:
                j += 1
            items.append(f"{ranks[i]}-{ranks[j]}" if step == 1 else f"{ranks[i]}-{ranks[j]}:{step}")
            i = j + 1
        else:
            items.append(str(ranks[i]))
            i += 1
    return ",".join(items)


def expand_ranks(text: str) -> list[int] | None:
    """The ranks of a ``pg_ranks`` text (:func:`canonical_ranks`), sorted; ``[]`` for ``""``; None when it is
    not such a text (or names more than 2**20 ranks)."""
    if not text:
        return []
    out: list[int] = []
    for item in text.split(","):
        m = _CANONICAL_ITEM.fullmatch(item.strip())
        if m is None:
            return None
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        step = int(m.group(3)) if m.group(3) is not None else 1
        if last < first or step < 1 or len(out) + (last - first) // step >= _MAX_RANKS:
            return None
        out.extend(range(first, last + 1, step))
    return sorted(set(out))


# --- helpers -------------------------------------------------------------------------------------------------

def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_NELEMS:
        return None
    return value


def _text(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        value = str(value)
    return value[:_MAX_TEXT] if isinstance(value, str) and value else None


def _fields(args: dict[str, Any]) -> dict[str, Any]:
    """The collective fields of one event's args (None where absent or not believed)."""
    return {
        "collective": normalise_collective(args.get("Collective name")),
        "in_nelems": _int(args.get("In msg nelems")),
        "out_nelems": _int(args.get("Out msg nelems")),
        "group_size": _int(args.get("Group size")),
        "dtype": normalise_dtype(args.get("dtype")),
        "pg": _text(args.get("Process Group Name")),
        "pg_desc": _text(args.get("Process Group Description")),
        "pg_ranks_text": args.get("Process Group Ranks"),
        "rank_start": _int(args.get("Global rank start")),
        "rank_stride": _int(args.get("Global rank stride")),
    }


def _disagree(from_kernel: str | None, collective: str) -> bool:
    """Whether the kernel's name names another collective than the recorded one; NCCL runs all-to-all, gather,
    scatter and point-to-point calls as grouped SendRecv kernels, which is no disagreement."""
    if from_kernel is None or from_kernel == collective:
        return False
    return not (from_kernel in NON_BLOCKING and collective in ("alltoall", "gather", "scatter", *NON_BLOCKING))


def _has_collective(*sources: dict[str, Any]) -> bool:
    return any(s.get("collective") is not None for s in sources)


def _cpu_partners(events: pa.Table, comm: pa.Table) -> tuple[list[int | None], list[tuple[int, int]]]:
    """Per comm row its external id, and the (event id, external id) of the ``record_param_comms`` / ``c10d::*`` ops
    that share one with a comm row."""
    externals = comm["external_id"].to_pylist()
    known = pa.array([e for e in externals if e is not None], pa.int64())
    if not len(known):
        return externals, []
    candidates = events.filter(pc.and_(kind_mask(events, ("cpu_op",)),
                                       pc.fill_null(pc.is_in(events["external_id"], value_set=known), False)))
    ids, exts = candidates["event_id"].to_pylist(), candidates["external_id"].to_pylist()
    op_names = candidates["name"].cast(pa.string()).to_pylist()
    return externals, [(i, e) for i, e, n in zip(ids, exts, op_names)
                       if n == "record_param_comms" or (n or "").startswith("c10d::")]


def _cpu_partner_fields(parsed: dict[int, dict[str, Any]], externals: list[int | None],
                        partners: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """Per comm row, the fields of the partner op (:func:`_cpu_partners`) with its external id, from the parsed
    args."""
    by_external: dict[int, dict[str, Any]] = {}
    for event_id, external in partners:
        fields = _fields(parsed.get(event_id, {}))
        if by_external.get(external, {}).get("collective") is None:
            by_external[external] = fields
    return [by_external.get(e, {}) if e is not None else {} for e in externals]


def _annotation_fields(trace: Trace, device_ids: list[int]) -> dict[int, dict[str, Any]]:
    """For comm rows without collective args: fields from the ``nccl:<name>`` annotation around their launch
    (name; element count and dtype from its first input) and from the launching op's args."""
    from opscope.analyses.links import device_links  # only traces without collective args need the links

    links = device_links(trace)
    where = pc.index_in(pa.array(device_ids, pa.int64()), value_set=links["device_row"])
    annotation_rows = pc.take(links["annotation_row"], where).to_pylist()
    op_rows = pc.take(links["op_row"], where).to_pylist()
    rows = sorted({r for r in annotation_rows + op_rows if r is not None})
    names_table = trace.select(["name"])
    names = dict(zip(rows, names_table["name"].take(pa.array(rows, pa.int64())).cast(pa.string()).to_pylist())) \
        if rows else {}
    parsed = args_by_id(trace, rows)
    out: dict[int, dict[str, Any]] = {}
    for device_id, annotation, op in zip(device_ids, annotation_rows, op_rows):
        fields: dict[str, Any] = {}
        if op is not None and names.get(op) == "record_param_comms":
            fields = {k: v for k, v in _fields(parsed.get(op, {})).items() if v is not None}
        label = names.get(annotation) if annotation is not None else None
        if label and label.startswith(("nccl:", "rccl:")):
            collective = normalise_collective(label)
            args = parsed.get(annotation, {})
            in_n, dtype = _first_input(args)
            fields.setdefault("collective", collective)
            fields.setdefault("in_nelems", in_n)
            fields.setdefault("dtype", dtype)
            if collective in ("allreduce", "broadcast", "reduce", "alltoall", "send", "recv", "sendrecv"):
                fields.setdefault("out_nelems", in_n)
        out[device_id] = {k: v for k, v in fields.items() if v is not None}
    return out


def _first_input(args: dict[str, Any]) -> tuple[int | None, str | None]:
    """(element count, dtype) of the first input of an annotation's ``Input Dims``/``Input type``."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list) or not dims[0]:
        return None, None
    if len(dims[0]) > 16:
        return None, None
    n = 1
    for d in dims[0]:
        if _int(d) is None:
            return None, None
        n *= d
    dtype = normalise_dtype(types[0]) if isinstance(types, list) and types else None
    if dtype in ("TensorList", "Scalar", "ScalarList"):
        return None, None
    return _int(n), dtype


def _ranks(fields: dict[str, Any], counts: dict[str, int]) -> tuple[str, int | None]:
    """(canonical ``pg_ranks`` or ``""``, group size): the size from the ranks where the args lack it. torch writes
    only the first 30 ranks of a larger group (``"[0, 1, ..., 29, ...]"``); such a list is completed from ``Global
    rank start``/``stride`` and ``Group size`` when they agree with it, else the ranks are unknown."""
    text, group_size = fields.get("pg_ranks_text"), fields.get("group_size")
    if isinstance(text, str) and len(text) <= _MAX_RANKS_TEXT and _TRUNCATED_RE.fullmatch(text.strip()):
        prefix = [int(p) for p in text.strip()[1:-1].split(",")[:-1]]
        start, stride = fields.get("rank_start"), fields.get("rank_stride")
        if start is not None and stride and group_size and group_size <= _MAX_RANKS \
                and prefix == [start + stride * k for k in range(len(prefix))]:
            return canonical_ranks([start + stride * k for k in range(group_size)]), group_size
        counts["truncated"] += 1
        return "", group_size
    ranks = parse_pg_ranks(text)
    if ranks is None or (ranks and group_size is not None and len(ranks) != group_size):
        counts["malformed"] += 1
        return "", group_size
    if not ranks:
        return "", group_size
    return canonical_ranks(ranks), group_size if group_size is not None else len(ranks)


def _sequence(pgs: Iterable[str], collectives: Iterable[str], steps: Iterable[int | None]) -> list[int]:
    """0-based position of each call (rows in start order) within (pg, step), or (collective, step) without pg."""
    seen: dict[tuple, int] = {}
    out = []
    for pg, collective, step in zip(pgs, collectives, steps):
        key = ("pg", pg, step) if pg else ("order", collective, step)
        out.append(seen.get(key, 0))
        seen[key] = out[-1] + 1
    return out
