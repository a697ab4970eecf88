"""Small Arrow helpers every analysis uses: one array from chunks, index arrays, dictionary codes, name
matching on (dictionary) string columns, and percentages."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from opscope.model import ranges
from opscope.model.buffers import c_enabled, one_array, position_marks, true_positions, values_view
from opscope.model.lookup import index_in
from opscope.model.schema import buffers_key

try:
    from opscope.analyses import _loops  # type: ignore[attr-defined]
except ImportError:  # not built here: the Arrow definitions run
    _loops = None

# --- arrays ----------------------------------------------------------------------------------------------

#: One contiguous array (:func:`opscope.model.buffers.one_array`: a one-chunk column's chunk, not Arrow's copy of it),
#: under the name the analyses use.
combined = one_array


def pylist(values: pa.Array | pa.ChunkedArray) -> list:
    """``values.to_pylist()``, with a dictionary column's strings looked up from its dictionary by code: pyarrow boxes
    each row of a dictionary array on its own (~1.2 us a row, 60x the lookup)."""
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    out: list = []
    for chunk in chunks:
        if not pa.types.is_dictionary(chunk.type):
            out.extend(chunk.to_pylist())
            continue
        dictionary = chunk.dictionary.to_pylist()
        out.extend(None if code is None else dictionary[code] for code in chunk.indices.to_pylist())
    return out


def median(values: pa.Array | pa.ChunkedArray) -> float | int:
    """``statistics.median`` of numbers without NaN (the middle one, or the mean of the two middle ones), with the
    values put in order by Arrow instead of as a Python list (a million kernels' durations: a sort of a million
    Python ints)."""
    arr = combined(values)
    if arr.null_count or len(arr) == 0:
        return statistics.median(arr.to_pylist())  # its answer, and its error, for nulls or no values
    n = len(arr)
    # the n // 2 + 1 smallest: the median is the largest of them (n odd), or the mean of their two largest
    lower = pc.take(arr, pc.select_k_unstable(arr, n // 2 + 1, [("values", "ascending")]))
    middle = pc.take(lower, pc.select_k_unstable(lower, 1 if n % 2 else 2, [("values", "descending")])).to_pylist()
    return statistics.median(middle)


def int64_values(values: pa.Array | pa.ChunkedArray) -> memoryview:
    """The values of a null-free int64 array as a memoryview of Python ints on demand (indexable, searchable with
    ``bisect``), without a Python object per value up front."""
    arr = combined(values)
    if arr.null_count:
        raise ValueError("int64_values: the array holds nulls")
    return values_view(arr, "q")


def arange(n: int) -> pa.Array:
    """0, 1, ..., n - 1 as int64, built by Arrow (no Python int per value)."""
    return ranges.arange(0, n)


def kept_rows(table: pa.Table, mask: pa.Array | pa.ChunkedArray) -> pa.Table:
    """The rows of ``table`` where ``mask`` is true (null: not kept): the table itself where every row is, instead of
    a copy of all of it."""
    mask = pc.fill_null(mask, False)
    if pc.all(mask).as_py():
        return table
    return table.filter(mask)


def rows_equal(table: pa.Table, column: str, value: object) -> pa.Table:
    """The rows of ``table`` whose ``column`` equals ``value`` (a null row never does), without a copy where every row
    does, as on a trace of one device (:func:`kept_rows`)."""
    return kept_rows(table, pc.equal(table[column], value))


def marks(n: int, positions: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A bool array of length ``n``, true at ``positions`` (integers, nulls skipped, each in 0..n-1): see
    :func:`opscope.model.buffers.position_marks`."""
    return position_marks(n, positions)


def distinct_positions(positions: pa.Array | pa.ChunkedArray, n: int) -> pa.Array:
    """The distinct values of ``positions`` (integers in 0..n-1, nulls left out), ascending, as int64: the positions
    marked in a bitmap of ``n`` (:func:`marks`) instead of grouped by a hash of every value (the 1 GB benchmark
    trace's climb from its device work to the ops above it, :func:`~opscope.analyses.links.ops_above`: 28 against
    125 ms of CPU)."""
    return pc.cast(true_positions(marks(n, positions)), pa.int64())


def scatter(n: int, positions: pa.Array, values: pa.Array) -> pa.Array:
    """An array of length ``n`` holding ``values`` at ``positions`` (unique) and null elsewhere."""
    if len(positions) == 0:
        return pa.nulls(n, values.type)
    return pc.take(values, index_in(arange(n), pc.cast(combined(positions), pa.int64())))


def native_loops():
    """The C loops (``_loops.c``) where built and not turned off (``OPSCOPE_NATIVE=0``), else None: then the Arrow
    definitions in :mod:`opscope.analyses.intervals` and :mod:`opscope.analyses.idle` run instead, with the same
    results."""
    if _loops is None or not c_enabled():
        return None
    return _loops


def like(value: int, values: pa.Array | pa.ChunkedArray) -> pa.Scalar:
    """``value`` as a scalar of ``values``' type, to compare a narrow column with: against a Python int, Arrow first
    widens the whole column to int64 (a 4 M-node graph's int8 kinds: a 33 MiB copy for a 0.5 MiB mask)."""
    return pa.scalar(value, values.type)


def rows_where(mask: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The positions (int64) of the true values of a boolean mask."""
    return pc.cast(true_positions(combined(mask)), pa.int64())


def local_index(mask: pa.Array | pa.ChunkedArray) -> pa.Array:
    """For a boolean mask over rows: each row's position among the selected rows (the subset's index)."""
    counts = pc.cumulative_sum(pc.cast(combined(mask), pa.int64()))
    return pc.subtract(counts, 1)


def count_by(values: pa.Array | pa.ChunkedArray) -> dict:
    """``{value: how many times it occurs}``."""
    if len(values) == 0:
        return {}
    counts = pc.value_counts(combined(values))
    return dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()))


def top_down(parent: pa.Array, depth: pa.Array, step: Callable[[pa.Array, pa.Array | None, pa.Array | None],
                                                                 pa.Array]) -> pa.Array:
    """A value per row of a forest computed from its parent's value, one depth at a time (vectorized per depth).

    ``parent`` holds positions in the same arrays; a row at depth d > 0 has its parent at depth d - 1 (as the
    model's nesting guarantees). ``step(rows, parents, parent_values)`` returns the values of ``rows``; at
    depth 0 it gets ``None`` for both.
    """
    n = len(parent)
    if n == 0:
        return step(pa.array([], pa.int64()), None, None)
    depth = pc.cast(combined(depth), pa.int64())
    order = pc.cast(pc.sort_indices(depth), pa.int64())  # stable: rows of one depth keep their order
    rank = pc.cast(pc.sort_indices(order), pa.int64())  # inverse permutation
    counts = pc.value_counts(depth).to_pylist()
    by_depth = {c["values"]: c["counts"] for c in counts}
    starts, offset = {}, 0
    for d in sorted(by_depth):
        starts[d] = offset
        offset += by_depth[d]
    start_of = pc.take(pa.array([starts.get(d, 0) for d in range(max(by_depth) + 1)], pa.int64()), depth)
    pos_in_level = pc.subtract(rank, start_of)
    levels: list[pa.Array] = []
    for d in range(max(by_depth) + 1):
        rows = order.slice(starts.get(d, 0), by_depth.get(d, 0))
        if d == 0:
            levels.append(step(rows, None, None))
            continue
        parents = pc.take(parent, rows)
        values = pc.take(levels[d - 1], pc.take(pos_in_level, parents))
        levels.append(step(rows, parents, values))
    return pc.take(pa.concat_arrays(levels), rank)


# --- dictionary codes ------------------------------------------------------------------------------------

def vocabulary(*columns) -> pa.Array:
    """Every distinct string of these dictionary or string columns (for codes comparable across tables)."""
    parts = []
    for column in columns:
        for chunk in (column.chunks if isinstance(column, pa.ChunkedArray) else [column]):
            values = chunk.dictionary if pa.types.is_dictionary(chunk.type) else chunk
            parts.append(values.cast(pa.string()))
    if not parts:
        return pa.array([], pa.string())
    return pc.unique(pa.concat_arrays(parts))


def codes_in(column, vocab: pa.Array) -> pa.Array:
    """Position of each value of a dictionary or string column in ``vocab`` (int64; null for nulls)."""
    out = []
    for chunk in (column.chunks if isinstance(column, pa.ChunkedArray) else [column]):
        if pa.types.is_dictionary(chunk.type):
            where = pc.index_in(chunk.dictionary.cast(pa.string()), value_set=vocab)
            out.append(pc.take(where, chunk.indices))
        else:
            out.append(pc.index_in(chunk.cast(pa.string()), value_set=vocab))
    if not out:
        return pa.array([], pa.int64())
    return pc.cast(pa.concat_arrays([pc.cast(o, pa.int32()) for o in out]), pa.int64())


def thread_keys(pid, tid, pid_vocab: pa.Array, tid_vocab: pa.Array) -> pa.Array:
    """One int64 per row naming its (pid, tid) thread, comparable across tables built on the same vocabularies."""
    found = _thread_keys_in_c(pid, tid, pid_vocab, tid_vocab)
    if found is not None:
        return found
    p = pc.fill_null(codes_in(pid, pid_vocab), -1)
    t = pc.fill_null(codes_in(tid, tid_vocab), -1)
    return pc.add(pc.multiply(p, 1 << 32), t)


def _thread_keys_in_c(pid, tid, pid_vocab: pa.Array, tid_vocab: pa.Array) -> pa.Array | None:
    """:func:`thread_keys` by ``_loops.thread_keys`` for dictionary columns chunked alike: each row's key from its
    dictionary indices and each dictionary's codes in the vocabulary, in one pass (a 1 GB trace's 2.3 M events:
    one int64 column instead of six); None where the C loops are not built or the columns are not such."""
    loops = native_loops()
    chunks = [c.chunks if isinstance(c, pa.ChunkedArray) else [c] for c in (pid, tid)]
    if loops is None or len(chunks[0]) != len(chunks[1]) or \
            any(not pa.types.is_dictionary(c.type) or c.type.index_type != pa.int32() for c in chunks[0] + chunks[1]):
        return None
    n = sum(len(c) for c in chunks[0])
    if [len(c) for c in chunks[0]] != [len(c) for c in chunks[1]]:
        return None
    out = bytearray(8 * n)
    view = memoryview(out).cast("B")
    at = 0
    for p, t in zip(*chunks):
        maps, parts = [], []
        for chunk, vocab in ((p, pid_vocab), (t, tid_vocab)):
            where = pc.index_in(chunk.dictionary.cast(pa.string()), value_set=vocab)
            maps.append(values_view(pc.fill_null(pc.cast(where, pa.int64()), -1), "q"))
            indices = chunk.indices
            valid = None if indices.null_count == 0 else values_view(pc.cast(pc.is_valid(indices), pa.uint8()), "B")
            parts.append((values_view(indices, "i"), valid))
        (p_index, p_valid), (t_index, t_valid) = parts
        loops.thread_keys(p_index, p_valid, maps[0], t_index, t_valid, maps[1], view[8 * at:8 * (at + len(p))])
        at += len(p)
    return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(out)])


def group_numbers(table: pa.Table, keys: Sequence[str]) -> tuple[pa.Array, Callable[[pa.Array | pa.ChunkedArray],
                                                                                       dict[str, pa.Array]]]:
    """Per row, the number (0, 1, ...) of its group of equal ``keys`` values (nulls equal to each other), numbered
    in the order Arrow's ``group_by`` lists the groups, and a function from numbers to the groups' key values
    (dictionary keys as plain strings).

    One key that is a dictionary column is grouped on its codes: no copy of every row's name as a string (its
    groups are listed in the order they first appear, as ``group_by`` lists them). Several keys are grouped by
    ``group_by`` itself on their values. Either way each row's group is at hand for per-group work after an
    aggregation (unions of each group's spans)."""
    column = table[keys[0]] if len(keys) == 1 else None
    found = dictionary_codes(column) if column is not None else None
    if column is not None and found is not None:
        vocabulary, indices = found
        codes = pc.fill_null(pc.cast(indices, pa.int64()), -1)  # null -> -1
        listed = pc.unique(codes)  # in order of first appearance
        vocabulary = vocabulary.cast(_plain(column.type))

        def code_values(groups: pa.Array | pa.ChunkedArray) -> dict[str, pa.Array]:
            code = pc.take(listed, combined(groups))
            return {keys[0]: vocabulary.take(pc.if_else(pc.less(code, 0), pa.scalar(None, pa.int64()), code))}

        return pc.cast(index_in(codes, listed), pa.int64()), code_values
    plain = pa.table({k: table[k].cast(_plain(table[k].type)) for k in keys}).append_column("row",
                                                                                             arange(table.num_rows))
    grouped = plain.group_by(list(keys), use_threads=False).aggregate([("row", "list")])
    rows = combined(grouped["row_list"])
    # every row is in one list: each row's number is the position of the list it is in
    number = scatter(table.num_rows, pc.list_flatten(rows), pc.cast(pc.list_parent_indices(rows), pa.int64()))

    def key_values(groups: pa.Array | pa.ChunkedArray) -> dict[str, pa.Array]:
        return {k: combined(grouped[k]).take(combined(groups)) for k in keys}

    return number, key_values


def value_codes(values: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, list]:
    """Per row, the code (int64; -1 for null) of its value among the distinct values, and those values: keys that
    group and compare as the values do (null a value of its own) without comparing text. Codes number the values in
    the order Arrow's dictionary holds them (the order they first occur, where the column is not dictionary-encoded
    already), not in the values' order."""
    return _codes(values, pa.int64())


def _codes(values: pa.Array | pa.ChunkedArray, type_: pa.DataType) -> tuple[pa.Array, list]:
    """:func:`value_codes` as ``type_`` (int64, or int32 where the codes go to C as they are)."""
    found = dictionary_codes(values)
    if found is None:  # not dictionary-encoded, or a value twice in its dictionary (it would get two codes)
        plain = values.cast(values.type.value_type) if pa.types.is_dictionary(values.type) else values
        encoded = pc.dictionary_encode(combined(plain))
        found = encoded.dictionary, encoded.indices
    dictionary, indices = found
    codes = pc.cast(indices, type_)
    return pc.fill_null(codes, -1) if codes.null_count else codes, dictionary.to_pylist()


def pair_numbers(a: pa.Array | pa.ChunkedArray, b: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, list[tuple]]:
    """Per row, the number (int32) of its pair of values ``(a, b)``, 0, 1, ... in the order the pairs first occur (a
    null a value of its own), and the distinct pairs in that order: in one pass over the values' codes in C
    (``_loops.pair_numbers``) where the pairs' table is small (threads: pids by tids; streams: devices by streams),
    else by Arrow's dictionary encoding of one int64 key per row (the definition)."""
    a_codes, a_values = _codes(a, pa.int32())  # (the dictionary's own indices where a column has one)
    b_codes, b_values = _codes(b, pa.int32())
    n = len(a_codes)
    loops = native_loops()
    if loops is not None and n:
        numbers = pa.allocate_buffer(4 * n)  # every item is written
        found = loops.pair_numbers(values_view(a_codes, "i"), values_view(b_codes, "i"), len(a_values),
                                   len(b_values), numbers)
        if found is not None:
            codes = memoryview(found).cast("q")
            pairs = [(a_values[codes[k]] if codes[k] >= 0 else None, b_values[codes[k + 1]] if codes[k + 1] >= 0
                      else None) for k in range(0, len(codes), 2)]
            return pa.Array.from_buffers(pa.int32(), n, [None, numbers]), pairs
    width = len(b_values) + 1
    a_codes, b_codes = pc.cast(a_codes, pa.int64()), pc.cast(b_codes, pa.int64())
    # Arrow's dictionary encoding numbers the values in the order they first occur
    encoded = pc.dictionary_encode(pc.add(pc.multiply(pc.add(a_codes, 1), width), pc.add(b_codes, 1)))
    keys = [divmod(key, width) for key in encoded.dictionary.to_pylist()]
    pairs = [(a_values[i - 1] if i else None, b_values[j - 1] if j else None) for i, j in keys]
    return combined(pc.cast(encoded.indices, pa.int32())), pairs


def dictionary_codes(column: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array] | None:
    """A dictionary column's one dictionary (each value once) and each row's code into it (the indices; null for a
    null row), for grouping on codes instead of text; None where the column is not such (not a dictionary column,
    or its values repeat)."""
    if isinstance(column, pa.ChunkedArray) and pa.types.is_dictionary(column.type):
        column = column.unify_dictionaries()
    dictionary = _dictionary_of(column)
    if dictionary is None:
        return None
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    return dictionary, combined(pa.chunked_array([c.indices for c in chunks], column.type.index_type))


def _dictionary_of(column: pa.Array | pa.ChunkedArray) -> pa.Array | None:
    """The one dictionary every chunk of a (unified) dictionary column shares, if its values are distinct."""
    if not pa.types.is_dictionary(column.type):
        return None
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    if not chunks:
        return pa.array([], column.type.value_type)
    dictionary = chunks[0].dictionary
    if any(not c.dictionary.equals(dictionary) for c in chunks[1:]):
        return None
    return dictionary if pc.count_distinct(dictionary, mode="all").as_py() == len(dictionary) else None


def _plain(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


# --- names -----------------------------------------------------------------------------------------------

def name_match(names: pa.Array | pa.ChunkedArray, pattern: str, nulls: bool | None = False) -> pa.ChunkedArray:
    """Python regex search (lookaheads allowed) in each value of a (dictionary) string column, run once per
    distinct value. A null value gives ``nulls`` (False by default; None keeps it null)."""
    search = re.compile(pattern).search
    return name_flags(names, lambda name: search(name) is not None, nulls)


def name_flags(names: pa.Array | pa.ChunkedArray, pick: Callable[[str], bool],
               nulls: bool | None = False) -> pa.ChunkedArray:
    """``pick(value)`` for each value of a (dictionary) string column, asked once per distinct value: no Python
    string per row (a trace's millions of Python frames hold a few thousand names). A null value gives ``nulls``
    (False by default; None keeps it null)."""

    def hit(distinct: pa.Array) -> pa.Array:
        return pa.array([nulls if v is None else bool(pick(v)) for v in distinct.to_pylist()], pa.bool_())

    chunks = []
    seen: tuple[int, ...] = ()
    hits = pa.array([], pa.bool_())
    for chunk in (names.chunks if isinstance(names, pa.ChunkedArray) else [names]):
        if not pa.types.is_dictionary(chunk.type):
            chunk = pc.dictionary_encode(chunk)  # ``pick`` runs once per distinct value here too
        # after unify_dictionaries every chunk holds the same dictionary: read it once, not once per chunk
        key = buffers_key(chunk.dictionary)
        if key != seen:
            seen, hits = key, hit(chunk.dictionary)
        found = hits.take(chunk.indices)
        chunks.append(found if nulls is None else pc.fill_null(found, nulls))  # null indices: null values
    return pa.chunked_array(chunks, pa.bool_())


def name_codes(names: pa.Array | pa.ChunkedArray, unnamed: str) -> tuple[pa.Array, list]:
    """Per row, the code (int64) of its name among the distinct names (:func:`value_codes`), -1 where it has none to
    show (null, or matching the regex ``unnamed``); and the names by code. Rows grouped on these codes are named
    per group, not per row."""
    codes, values = value_codes(names)
    return pc.if_else(combined(name_match(names, unnamed, nulls=True)), -1, codes), values


def name_or_category(codes: pa.Array, categories: pa.Array) -> pa.Array:
    """Per row, a key to group on: its name's code (:func:`name_codes`), or where it has none ``-1 - its category's
    code``; :func:`key_label` reads one back."""
    return pc.if_else(pc.greater_equal(codes, 0), codes, pc.subtract(-1, pc.cast(categories, pa.int64())))


def key_label(key: int, names: list, categories: Sequence[str]) -> str:
    """The text of a :func:`name_or_category` key: the name, or its category in parentheses."""
    return str(names[key]) if key >= 0 else f"({categories[-1 - key]})"


# --- percentages -----------------------------------------------------------------------------------------

def share_pct(part: int | float | None, whole: int | float | None, digits: int = 2) -> float | None:
    """``part`` as a percentage of ``whole``, rounded to ``digits``; None without a part or a whole."""
    if part is None or not whole:
        return None
    return round(100.0 * part / whole, digits)


def shares_pct(values: pa.Array | pa.ChunkedArray, whole: int | float) -> pa.Array:
    """Each value as a percentage of ``whole``, rounded to 2 digits; zeros when ``whole`` is 0."""
    if not whole:
        return pc.multiply(pc.cast(values, pa.float64(), safe=False), 0.0)
    return pc.round(pc.multiply(pc.divide(pc.cast(values, pa.float64(), safe=False), float(whole)), 100.0), 2)
