"""A corpus of hostile trace files, and the checks every command's output must pass on them.

Each generator writes one file and returns its path; ``scale`` ("ci" or "full") picks the size of the
pathological cases: "ci" keeps the whole corpus x every table command within a few minutes on two cores, "full"
uses the sizes the fuzzing run found (tools/hostile_fuzz.py runs it). Every file sits in a folder whose name
holds rich markup, so file names are hostile text in every command too.

The checks (:func:`problems`) are what "handled" means for one run:
- exit code 0 (a result), 1 only for diff's gate, or 2 with exactly one ``opscope: error:`` line naming the file;
- no traceback;
- no control byte from trace text on stdout (C0 but newline and tab, DEL, C1);
- CSV parses as CSV, every record as wide as the header, and no cell a spreadsheet would run as a formula;
- JSON is one valid document.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from support.memory import hand_trace
from support.tracefiles import small_gpu_trace

#: Control characters that must never reach stdout from trace text: C0 but newline and tab, DEL, C1.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")
FORMULA_START = tuple("=+-@\t\r")

#: The table commands, each run on every corpus file (diff against a good trace, both ways round).
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("summary", "{file}"), ("ops", "{file}"), ("ops", "{file}", "--gpu"), ("kernels", "{file}"),
    ("kernels", "{file}", "--details"), ("steps", "{file}"), ("gpu", "{file}"), ("gpu", "{file}", "--idle"),
    ("memory", "{file}"), ("memory", "{file}", "--timeline", "50"),
    ("scope", "{file}"), ("code", "{file}"), ("advise", "{file}"), ("critical-path", "{file}"),
    ("whatif", "{file}", "-c", "sync=0", "-c", "idle:host_wait=0"), ("roofline", "{file}"),
    ("query", "{file}", "SELECT kind, count(*) AS n, sum(dur_ns) AS total FROM events GROUP BY kind ORDER BY kind"),
    ("diff", "{good}", "{file}"), ("diff", "{file}", "{good}"),
)
FORMATS = ("table", "csv", "json")

HOSTILE_NAMES = (
    "aten::mm\x1b[31mRED\x1b[0m", "bell\x07\x07", "[bold]markup[/bold]", "[/]", "x[/].json", "=HYPERLINK(\"http://x\")",
    "+1+2", "-2-3", "@SUM(A1)", "\ttab", "\rcr", "two\nlines", "nul\x00byte", "del\x7f", "c1\x9b2J",
    "\u202eevil-bidi", "ProfilerStep#x", "ProfilerStep#99999999999999999999", "",
)


def base_events() -> list[dict]:
    """A small, well-formed trace touching every table: steps, ops, kernels with launches, memory records."""
    gpu = small_gpu_trace()
    mem = [dict(e, ts=e["ts"] + 4000) for e in hand_trace() if e.get("cat") != "user_annotation"]
    return gpu + mem


def _doc(events: list, **header) -> bytes:
    return json.dumps({"schemaVersion": 1, **header, "traceEvents": events}, indent=1).encode()


def _write(path: Path, data: bytes, gz: bool = False) -> Path:
    path.write_bytes(gzip.compress(data, 6) if gz else data)
    return path


def _event(name: object = "aten::add", ts: object = 10, dur: object = 5, **extra) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}, **extra}


# -- classes of hostile files ------------------------------------------------------------------------------------------

def wrong_format(folder: Path) -> list[Path]:
    """Empty, blank, not JSON, JSON of the wrong shape, binary."""
    cases = {
        "empty.json": b"", "blank.json": b" \n\t\n", "bom.json": b"\xef\xbb\xbf", "null.json": b"null",
        "object.json": b"{}", "array.json": b"[]", "number.json": b"12345", "string.json": b'"traceEvents"',
        "events-not-list.json": b'{"traceEvents": 5}', "events-of-numbers.json": b'{"traceEvents": [1, 2, 3]}',
        "text.json": b"this is not a trace\n", "png.json": b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8,
        "random.bin": bytes((i * 7919) % 251 for i in range(20000)),
        "ts-strings.json": _doc([_event(ts="12", dur="3")]),
        "only-metadata.json": _doc([{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}}]),
        "gzip-of-nothing.json.gz": gzip.compress(b""),
        "gzip-of-text.json.gz": gzip.compress(b"hello\n"),
    }
    return [_write(folder / name, data) for name, data in cases.items()]


def truncations(folder: Path) -> list[Path]:
    """A good trace cut at several points: in the header, in an event, inside a string and an escape; plain and gz."""
    events = base_events()
    events.insert(3, _event("esc\u00e9aped\u0001name", 150, 1))
    data = _doc(events)
    escape = data.index(b"\\u00") + 3
    cuts = {"header": 12, "event": len(data) // 3, "string": data.index(b"aten::relu") + 4, "escape": escape,
            "before-close": data.rindex(b"]"), "last-byte": len(data) - 1}
    out = []
    for where, at in cuts.items():
        out.append(_write(folder / f"cut-{where}.json", data[:at]))
        out.append(_write(folder / f"cut-{where}.json.gz", data[:at], gz=True))
    whole = gzip.compress(data)
    out.append(_write(folder / "gz-cut-half.json.gz", whole[: len(whole) // 2]))
    out.append(_write(folder / "gz-cut-header.json.gz", whole[:6]))
    return out


def corrupt_gzip(folder: Path) -> list[Path]:
    """Flipped bytes, a bad CRC, junk after the stream, two members."""
    data = _doc(base_events())
    whole = bytearray(gzip.compress(data))
    flipped = bytearray(whole)
    for i in range(len(flipped) // 2, len(flipped) // 2 + 16):
        flipped[i] ^= 0xFF
    bad_crc = bytearray(whole)
    bad_crc[-8] ^= 0xFF
    cases = {"gz-flipped.json.gz": bytes(flipped), "gz-bad-crc.json.gz": bytes(bad_crc),
             "gz-junk-after.json.gz": bytes(whole) + b"junk" * 100,
             "gz-two-members.json.gz": gzip.compress(data[: len(data) // 2]) + gzip.compress(data[len(data) // 2:]),
             "gz-header-only.json.gz": bytes(whole[:10])}
    return [_write(folder / name, data) for name, data in cases.items()]


def huge_numbers(folder: Path) -> list[Path]:
    """Times and sizes at and beyond the edges of float, int64 and the model's range."""
    values: list[object] = [1e308, -1e308, 2**63, 2**63 - 1, -(2**63), 2**64, 2**53 + 1, 9007199254740993.5, 1e-320,
                            -5, 0, "12", None, [], {}, True]
    out = []
    for i, v in enumerate(values):
        ev = [_event("ok", 0, 10), _event("hostile", v, v), _event("end", 20, 1),
              _event("k", v, 3, cat="kernel", pid=0, tid=7, args={"device": 0, "stream": 7, "correlation": v}),
              {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": v, "s": "t",
               "args": {"Device Type": 1, "Device Id": 0, "Addr": v, "Bytes": v, "Total Allocated": v,
                        "Total Reserved": v}}]
        out.append(_write(folder / f"number-{i}.json", _doc(ev)))
    # NaN / Infinity tokens and out-of-range exponents, which strict JSON refuses
    text = _doc([_event("a", 0, 5), _event("b", 1, 1)]).replace(b'"ts": 1,', b'"ts": NaN,', 1)
    text = text.replace(b'"dur": 5', b'"dur": 1e400', 1)
    out.append(_write(folder / "nonfinite.json", text))
    return out


def hostile_text(folder: Path) -> list[Path]:
    """Names, categories, args, header fields and device properties that carry control bytes, markup, formulas."""
    events = []
    for i, name in enumerate(HOSTILE_NAMES):
        events.append(_event(name, i * 10, 5, args={"Input Dims": [[1, 2]], "Input type": [name], "note": name}))
        events.append(_event(name, i * 10 + 1, 2, cat="kernel", pid=0, tid=7,
                             args={"device": 0, "stream": 7, "correlation": i}))
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": i * 10 + 0.5, "dur": 0.2, "args": {"correlation": i}})
    events.insert(0, _event("ProfilerStep#1", 0, 1000, cat="user_annotation"))
    events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "\x1b]0;title\x07"}})
    header = {"deviceProperties": [{"id": 0, "name": "\x1b[2J=GPU", "totalGlobalMem": "lots"}],
              "distributedInfo": {"rank": "[red]0", "world_size": "=2"}, "traceName": "\x1b[31m"}
    out = [_write(folder / "names.json", _doc(events, **header))]
    odd_types = {"deviceProperties": [{"id": [0], "name": 7, "totalGlobalMem": {"x": 1}}],
                 "distributedInfo": [1, 2], "schemaVersion": "1", "displayTimeUnit": 3, "traceName": 5}
    out.append(_write(folder / "odd-header.json", _doc(base_events(), **odd_types)))
    bad_utf8 = _doc([_event("ok", 0, 5), _event("BADUTF8", 6, 1)]).replace(b"BADUTF8", b"bad\xff\xfeutf8")
    out.append(_write(folder / "bad-utf8.json", bad_utf8))
    surrogate = _doc([_event("SURR", 0, 5)]).replace(b"SURR", b"lone\\ud800surrogate")
    out.append(_write(folder / "lone-surrogate.json", surrogate))
    raw_control = _doc([_event("CTRL", 0, 5)]).replace(b"CTRL", b"raw\x1b[31m\x07ctl")
    out.append(_write(folder / "raw-control.json", raw_control))
    return out


def structure(folder: Path, scale: str) -> list[Path]:
    """Deep nesting, events of the wrong type, keys after the array, junk after the document."""
    depth = 600 if scale == "ci" else 100_000
    deep = "[" * depth + "]" * depth
    good = _doc(base_events())
    cases = {
        "deep-args.json": _doc([_event("a", 0, 5)]).replace(b'"args": {}', b'"args": {"x": ' + deep.encode() + b"}"),
        "deep-header.json": b'{"h": ' + deep.encode() + b', "traceEvents": [' + json.dumps(_event()).encode() + b"]}",
        "deep-event.json": b'{"traceEvents": [' + deep.encode() + b"]}",
        "mixed-items.json": _doc([1, "x", None, [], _event("ok", 0, 5), {"ph": 7}, {}]),
        "junk-after.json": good + b"\ngarbage after the document " * 20,
        "string-after-array.json": good[: good.rindex(b"]") + 1] + b', "x": "' + b"y" * 100_000 + b'"}',
        "duplicate-keys.json": b'{"traceEvents": [], "traceEvents": [' + json.dumps(_event()).encode() + b"]}",
        "bare-array.json": json.dumps(base_events()).encode(),
        "begin-end.json": _doc([{"ph": "B", "name": "b", "pid": 1, "tid": 1, "ts": 0},
                                {"ph": "E", "pid": 1, "tid": 1, "ts": 5}, {"ph": "E", "pid": 1, "tid": 1, "ts": 6},
                                {"ph": "B", "name": "open", "pid": 1, "tid": 1, "ts": 7}]),
        "overlap.json": _doc([_event("a", 0, 600), _event("b", 400, 600), _event("c", 450, 10)]),
        "flows.json": _doc([*base_events(), {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 0, "cat": "ac2g"},
                            {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": -5, "cat": "ac2g", "bp": "e"},
                            {"ph": "f", "id": [1], "pid": 0, "tid": 7, "ts": 3, "cat": "ac2g"}]),
    }
    out = [_write(folder / name, data) for name, data in cases.items()]
    # recording directories (advise and diff take them) whose run.json is hostile: wrong types, paths out of the folder
    for name, run in {"run-paths": {"traces": ["../../../../etc/passwd", "/etc/hostname", "t.json"], "status": 5},
                      "run-types": {"traces": {"x": 1}, "threads": "many", "steps": [None], "env": 7},
                      "run-not-object": [1, 2], "run-garbage": None}.items():
        rec = folder / name
        rec.mkdir()
        _write(rec / "t.json", good)
        _write(rec / "run.json", b"{not json" if run is None else json.dumps(run).encode())
        out.append(rec)
    return out


def sizes(folder: Path, scale: str) -> list[Path]:
    """The pathological sizes: many steps, many distinct names, long names, many header candidates, a bomb."""
    ci = scale == "ci"
    n_steps = 5_000 if ci else 100_000
    n_names = 50_000 if ci else 2_000_000
    name_mb = 4 if ci else 50
    out = []
    steps = []
    for i in range(n_steps):
        steps.append(_event(f"ProfilerStep#{i}", 2 * i, 1.5, cat="user_annotation"))
        steps.append(_event("aten::add", 2 * i + 0.25, 1))
    out.append(_write(folder / "many-steps.json.gz", json.dumps({"traceEvents": steps}).encode(), gz=True))
    names = ",".join(f'{{"ph":"X","cat":"cpu_op","name":"aten::op_{i}","pid":1,"tid":1,"ts":{i},"dur":1}}'
                     for i in range(n_names))
    out.append(_write(folder / "many-names.json.gz", b'{"traceEvents":[' + names.encode() + b"]}", gz=True))
    long_kernel = "void k<" + "<" * (40_000 if ci else 400_000) + ">(int)"
    out.append(_write(folder / "long-template-name.json", _doc([
        _event("aten::mm", 0, 10), _event(long_kernel, 1, 5, cat="kernel", pid=0, tid=7,
                                           args={"device": 0, "stream": 7, "correlation": 1}),
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 0.5, "dur": 0.2,
         "args": {"correlation": 1}}])))
    big_name = "n" * (name_mb << 20)
    out.append(_write(folder / "huge-name.json", _doc([_event("a", 0, 5), _event(big_name, 6, 1)])))
    candidates = 6_000 if ci else 60_000
    header = b'{"meta": "' + b'\\"traceEvents\\": [' * candidates + b'", "traceEvents": ['
    out.append(_write(folder / "header-candidates.json", header + json.dumps(_event()).encode() + b"]}"))
    many_keys = b'{"traceEvents": [{' + b'"name": "x", ' * (20_000 if ci else 200_000) + b'"ph": "X", "ts": 1, "dur"'
    out.append(_write(folder / "salvage-many-keys.json", many_keys))
    out.append(_bomb(folder / "bomb.json.gz", (64 << 20) if ci else (2 << 30)))
    out.append(_string_after_array(folder / "string-after-array.json.gz", (64 << 20) if ci else (1 << 30)))
    return out


def _string_after_array(path: Path, length: int) -> Path:
    """A good event array followed by a key whose string value is ``length`` bytes: tiny once compressed."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    with open(path, "wb") as fh:
        fh.write(comp.compress(b'{"traceEvents": [' + json.dumps(_event()).encode() + b'], "x": "'))
        block = b"y" * (1 << 20)
        for _ in range(length >> 20):
            fh.write(comp.compress(block))
        fh.write(comp.compress(b'"}'))
        fh.write(comp.flush())
    return path


def _bomb(path: Path, inflated: int) -> Path:
    """A gzip stream of ``inflated`` bytes of repeated valid events: a few hundred times smaller on disk."""
    one = b'{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":1,"dur":1},'
    block = one * ((1 << 20) // len(one))
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    with open(path, "wb") as fh:
        fh.write(comp.compress(b'{"traceEvents":['))
        for _ in range(inflated // len(block)):
            fh.write(comp.compress(block))
        fh.write(comp.compress(one[:-1] + b"]}"))
        fh.write(comp.flush())
    return path


GENERATORS: dict[str, Callable[[Path, str], list[Path]]] = {
    "wrong-format": lambda f, s: wrong_format(f), "truncation": lambda f, s: truncations(f),
    "corrupt-gzip": lambda f, s: corrupt_gzip(f), "huge-number": lambda f, s: huge_numbers(f),
    "hostile-text": lambda f, s: hostile_text(f), "structure": structure, "size": sizes,
}


def build(root: Path, scale: str = "ci") -> dict[str, list[Path]]:
    """Write the whole corpus under ``root`` (in a folder named with rich markup); files by class."""
    folder = root / "x[bold]["
    folder.mkdir(parents=True, exist_ok=True)
    good = folder / "good.json"
    good.write_bytes(_doc(base_events()))
    corpus = {}
    for kind, make in GENERATORS.items():
        sub = folder / kind
        sub.mkdir(exist_ok=True)
        corpus[kind] = make(sub, scale)
    return corpus


def good_document() -> bytes:
    """The good trace that diff compares each hostile file with."""
    return _doc(base_events())


def good_trace(root: Path) -> Path:
    return root / "x[bold][" / "good.json"


# -- what a handled run looks like ------------------------------------------------------------------------------------

@dataclass
class Run:
    """One command on one file, as the driver saw it."""

    file: str
    args: list[str]
    fmt: str
    rc: int
    seconds: float
    stdout: str = ""
    stderr: str = ""
    traceback: str = ""
    problems: list[str] = field(default_factory=list)


def problems(run: Run) -> list[str]:
    """Why ``run`` is not a handled run (empty when it is)."""
    found = []
    if run.traceback or "Traceback (most recent call last)" in run.stderr:
        found.append("traceback: " + (run.traceback or run.stderr).strip().splitlines()[-1][:300])
    if run.rc not in (0, 2) and not (run.rc == 1 and run.args[0] == "diff"):
        found.append(f"exit code {run.rc}")
    if run.rc == 2:
        errors = [ln for ln in run.stderr.splitlines() if ln.startswith("opscope: error:")]
        if len(errors) != 1:
            found.append(f"{len(errors)} error lines, not one: {run.stderr[-300:]!r}")
        elif not any(Path(a).name in errors[0] for a in run.args if Path(a).exists()):
            found.append(f"error line names no file: {errors[0][:200]!r}")
    if CONTROL.search(run.stdout):
        at = CONTROL.search(run.stdout).start()  # type: ignore[union-attr]
        found.append(f"control byte on stdout: {run.stdout[max(0, at - 40):at + 10]!r}")
    if run.rc == 0 and run.fmt == "csv":
        found.extend(csv_problems(run.stdout))
    if run.rc == 0 and run.fmt == "json":
        try:
            json.loads(run.stdout)
        except ValueError as exc:
            found.append(f"invalid JSON document: {exc}")
    return found


def csv_problems(text: str) -> list[str]:
    """A CSV document that does not parse, has ragged records, or holds a cell a spreadsheet would run."""
    if not text.strip():
        return []
    if "\r" in text.replace("\r\n", "\n"):
        return ["raw carriage return in CSV"]
    csv.field_size_limit(1 << 30)  # a trace's names may be megabytes long
    rows = list(csv.reader(io.StringIO(text)))
    width = len(rows[0])
    found = [f"record {i} has {len(r)} cells, the header {width}" for i, r in enumerate(rows) if len(r) != width]
    found.extend(f"formula cell {cell[:60]!r}" for r in rows for cell in r
                 if cell.startswith(FORMULA_START) and not _is_number(cell))
    return found[:5]


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
