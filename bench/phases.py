"""Where a cold open of a Chrome/Kineto trace spends its time, phase by phase.

    python bench/phases.py TRACE [--json OUT]

Runs the phases one after another in this process, each timed alone (wall and CPU seconds), so that each figure
is that phase's own cost, not its share of an overlapped run:

* inflate (zlib) / inflate (ISA-L): decompressing the file and nothing else (0 for a plain .json);
* cut + decode: finding the chunk boundaries of the event array and decoding the chunks, less inflate: with the C
  reader (``_scan.c``, where built) its scan straight into column buffers, else msgspec's decoding into structs;
* columns: turning those into Arrow columns (``EventColumns.add_native`` / ``add_batch``) and the builder's tables;
* complete: time order, nesting, self time, steps (``model.derive.complete``);
* cache write: the Parquet entry (``store.entry.write``) into an empty directory;
* cached open: ``open_trace`` from that entry, reading the events columns a command reads.

The whole command (``opscope summary``) overlaps inflate with parsing and writes the cache behind the analysis;
``bench/ingest.py`` and ``bench/curves.py`` time it as a whole process.
"""

# ruff: noqa: E402 - opscope is tuned before the modules that import pyarrow
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from opscope import runtime

runtime.tune()  # as the command does, before pyarrow is imported: the phases run on the command's allocator

from opscope.ingest import open_trace
from opscope.ingest.chrome import reader
from opscope.ingest.chrome.columns import EventColumns
from opscope.ingest.chrome.json_stream import EventArrayStream
from opscope.ingest.source import ByteSource
from opscope.model.builder import TraceBuilder, fast_type_inference
from opscope.model.derive import complete
from opscope.store import entry as cache_entry


class Clock:
    """Wall and CPU seconds spent inside ``with clock:`` blocks, added up."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def __enter__(self) -> Clock:
        self._w, self._c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall += time.perf_counter() - self._w
        self.cpu += time.process_time() - self._c

    def row(self) -> dict[str, float]:
        return {"wall_s": round(self.wall, 3), "cpu_s": round(self.cpu, 3)}


def _inflate(path: Path, fast: bool) -> Clock:
    clock = Clock()
    source = ByteSource(path)
    with clock:
        blocks = source._fast_gzip_blocks() if (fast and source.compressed) else source.blocks() \
            if not source.compressed else source._gzip_blocks()
        for _ in blocks:
            pass
    return clock


def profile(path: Path) -> dict[str, dict[str, float]]:
    zlib_clock = _inflate(path, fast=False)
    isal_clock = _inflate(path, fast=True)
    stream_clock, columns_clock, complete_clock = Clock(), Clock(), Clock()
    source = ByteSource(path)
    native = reader.scanner()  # the C reader where built (OPSCOPE_NATIVE=0: the Python path), here on one thread
    stream = EventArrayStream(source.blocks(), reader._decode_batch, reader._decode_one_exact,
                              chunk_size=reader.CHUNK_BYTES, decode_items=reader._items_decoder(native))
    columns = EventColumns(TraceBuilder(str(path), reader.FORMAT))
    items = reader._batches(stream) if native is None else reader.native_items(stream, native)
    with fast_type_inference():
        while True:
            with stream_clock:
                item = next(items, None)
            if item is None:
                break
            with columns_clock:
                reader.apply_item(columns, item)
            del item
        with columns_clock:
            trace = columns.finish(stream.report.header)
    with complete_clock:
        trace = complete(trace)
    rows = trace.events.num_rows
    store_clock = Clock()
    with tempfile.TemporaryDirectory(prefix="opscope-phases-") as root:
        with store_clock:
            cache_entry.write(path, trace, Path(root))
        del trace
        cached_clock = Clock()
        with cached_clock:
            again = open_trace(path, cache_dir=Path(root))
            again.select(["kind", "name", "ts_ns", "dur_ns", "self_ns", "stream"])
    decode = {"wall_s": round(max(0.0, stream_clock.wall - isal_clock.wall), 3),
              "cpu_s": round(max(0.0, stream_clock.cpu - isal_clock.cpu), 3)}
    return {
        "inflate_zlib": zlib_clock.row(),
        "inflate_isal": isal_clock.row(),
        "cut_decode": decode,
        "columns": columns_clock.row(),
        "complete": complete_clock.row(),
        "cache_write": store_clock.row(),
        "cached_open": cached_clock.row(),
        "events": {"rows": rows},
        "reader": {"c": native is not None},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    result = profile(args.trace)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    for phase, row in result.items():
        if "cpu_s" in row:
            print(f"{phase:>14}: {row['wall_s']:8.3f} s wall {row['cpu_s']:8.3f} s CPU")
    # last line: phase -> wall seconds, one JSON object (bench/curves.py reads it)
    print(json.dumps({phase: row["wall_s"] for phase, row in result.items() if "wall_s" in row}))


if __name__ == "__main__":
    main()
