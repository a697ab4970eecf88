"""A second hostile corpus: every reader, not only Kineto JSON.

For each format (Kineto/Chrome JSON, ONNX Runtime, rocprof v1 JSON, rocprofv3 JSON, rocprof CSV, Nsight Systems
SQLite, XProf xplane with its HLO protos, MIGraphX perf and MIGRAPHX_TRACE_EVAL text) a small valid seed is written
with its numeric fields at their edges (0, -1, 2^63-1, -2^63, 1e308, -1e308, NaN/Infinity where the format can
spell them, text where a number goes), once with numbers only (a reader's fast path) and once mixed with text in the
same file (its slow path); then the seed followed by a run of NUL bytes (a crashed write) and by junk, the
format's pathological sizes (long lines, many instructions, deep nesting, many unclosed brackets) and gzip bombs.
Special files (a pipe, a device, a directory) come last.

``build(root, scale, seed)``: "ci" sizes keep the CI run short, "full" are the sizes that once took seconds and
gigabytes; ``seed`` picks the variant of every randomised choice (which edge value goes in which field, the junk
bytes), so a second corpus with another seed checks what was fixed against files not seen while fixing.
Every generator returns the paths it wrote. ``COMMANDS`` is the command set each file runs (``FULL_COMMANDS`` for
the files marked ``+all``: every table command); the checks are :func:`support.hostile_corpus.problems`.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import zlib
from collections.abc import Callable
from pathlib import Path

from support.hostile_corpus import COMMANDS as FULL_COMMANDS
from support.hostile_run import FileResult, run_corpus

#: Each file runs these (reading is what this corpus checks; ``roofline`` reads the shapes every reader keeps).
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("summary", "{file}"), ("ops", "{file}"), ("kernels", "{file}"), ("steps", "{file}"), ("memory", "{file}"),
    ("roofline", "{file}"), ("gpu", "{file}", "--idle"),
)
FORMATS = ("table", "json")
#: What the CI run renders (the first corpus checks every renderer on hostile text; this one checks the readers).
CI_FORMATS = ("json",)
__all__ = ["COMMANDS", "FORMATS", "FULL_COMMANDS", "GENERATORS", "budget_ratio", "build", "content_size", "run"]
#: Memory a file may cost above the child's start-up: this much plus ``PER_CONTENT_BYTE`` x its decompressed content.
FIXED_MIB = 200
PER_CONTENT_BYTE = 4

I64_MAX = (1 << 63) - 1
I64_MIN = -(1 << 63)
#: The edge values as JSON tokens (NaN and Infinity are not JSON, yet some writers emit them).
JSON_EDGES = ("0", "-1", str(I64_MAX), str(I64_MIN), "1e308", "-1e308", "NaN", "Infinity", "-Infinity", '"x"')
#: The same for text formats (C++'s spelling of the non-finite values).
TEXT_EDGES = ("0", "-1", str(I64_MAX), str(I64_MIN), "1e308", "-1e308", "nan", "inf", "-nan", "x")
INT_EDGES = (0, -1, I64_MAX, I64_MIN, 1 << 62, -(1 << 62))


def _sizes(scale: str) -> dict[str, int]:
    ci = scale == "ci"
    return {"nul": (8 << 20) if ci else (1 << 30), "junk": (1 << 20) if ci else (64 << 20),
            "bomb": (128 << 20) if ci else (2 << 30), "instructions": 20_000 if ci else 400_000,
            "brackets": 200_000 if ci else 5_000_000, "depth": 100_000 if ci else 1_000_000,
            "line": (2 << 20) if ci else (64 << 20)}


def _nul_tail(path: Path, head: bytes, nul: int) -> Path:
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(len(head) + nul)  # a sparse run of zeros, as a crashed writer's preallocated file
    return path


def _junk_tail(path: Path, head: bytes, junk: int, rng: random.Random) -> Path:
    path.write_bytes(head + rng.randbytes(junk))
    return path


def _gzip_nul_bomb(path: Path, head: bytes, nul: int) -> Path:
    """``head`` then ``nul`` zero bytes, gzip: ~1,000 times smaller on disk than inflated."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    with open(path, "wb") as fh:
        fh.write(comp.compress(head))
        for _ in range(nul >> 20):
            fh.write(comp.compress(block))
        fh.write(comp.flush())
    return path


def _tails(folder: Path, stem: str, suffix: str, head: bytes, scale: str, rng: random.Random) -> list[Path]:
    """The seed with a NUL tail, a junk tail, and as a gzip whose inflated tail is NUL."""
    s = _sizes(scale)
    return [_nul_tail(folder / f"{stem}-nul-tail{suffix}", head, s["nul"]),
            _junk_tail(folder / f"{stem}-junk-tail{suffix}", head, s["junk"], rng),
            _gzip_nul_bomb(folder / f"{stem}-nul-bomb{suffix}.gz", head, s["bomb"])]


def _edges(rng: random.Random, text: bool, n: int, strings: bool) -> list[str]:
    """``n`` edge values in a seeded order (every value at least once when ``n`` allows); without ``strings`` the
    values that are not numbers are left out."""
    pool = [v for v in (TEXT_EDGES if text else JSON_EDGES) if strings or v not in ('"x"', "x")]
    out = pool * (n // len(pool) + 1)
    rng.shuffle(out)
    return out[:n]


# -- Kineto / Chrome JSON ---------------------------------------------------------------------------------------------

def _chrome_event(i: int, ts: str, dur: str, cat: str = "cpu_op", corr: str = "1", extra: str = "") -> str:
    return (f'{{"ph":"X","cat":"{cat}","name":"e{i}","pid":1,"tid":{1 if cat == "cpu_op" else 7},"ts":{ts},'
            f'"dur":{dur},"args":{{"correlation":{corr},"External id":{corr},"stream":7,"device":0{extra}}}}}')


def _chrome_doc(rng: random.Random, strings: bool) -> bytes:
    evs = ['{"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":100}',
           _chrome_event(0, "1", "5")]
    values = _edges(rng, False, 40, strings)
    for i in range(0, len(values) - 3, 4):
        a, b, c, d = values[i:i + 4]
        evs.append(_chrome_event(i + 1, a, b, corr=c))
        evs.append(_chrome_event(i + 2, "10", c, cat="kernel", corr=d))
        evs.append(f'{{"ph":"i","cat":"cpu_instant_event","name":"[memory]","pid":1,"tid":1,"ts":{d},"s":"t",'
                   f'"args":{{"Device Type":1,"Device Id":0,"Addr":{a},"Bytes":{b},"Total Allocated":{c},'
                   f'"Total Reserved":{d}}}}}')
        evs.append(f'{{"ph":"C","name":"ctr","pid":1,"tid":1,"ts":{a},"args":{{"v":{b}}}}}')
    if strings:  # one text duration sends the batch to the Python path, with the huge values beside it
        evs.append(_chrome_event(99, "20", '"x"'))
        evs.append(_chrome_event(98, "21", "1e308"))
    return ('{"schemaVersion":1,"deviceProperties":[{"id":0,"name":"GPU","totalGlobalMem":' + values[0]
            + '}],"traceEvents":[' + ",".join(evs) + "]}").encode()


def chrome(folder: Path, scale: str, rng: random.Random) -> list[Path]:
    s = _sizes(scale)
    head = _chrome_doc(rng, False)
    out = [_write(folder / "chrome-edges.json", head), _write(folder / "chrome-edges-mixed.json",
                                                               _chrome_doc(rng, True))]
    open_head = head[: head.rindex(b"]")] + b","  # a trace whose writer stopped mid-array
    out += _tails(folder, "chrome", ".json", open_head, scale, rng)
    event = _chrome_event(0, "1", "5").encode()
    out.append(_write(folder / "chrome-unclosed.json", b'{"traceEvents":[' + event + b"," + b"[" * s["brackets"]))
    deep = (b'{"traceEvents":[' + event + b',{"ph":"X","name":"deep","pid":1,"tid":1,"ts":2,"dur":1,"args":'
            + b'{"a":' * s["depth"] + b"1" + b"}" * s["depth"] + b"}]}")
    out.append(_write(folder / "chrome-deep-args.json", deep))
    out.append(_write(folder / "chrome-long-line.json", b'{"traceEvents":[' + event + b',{"ph":"X","name":"'
                      + b"n" * s["line"] + b'","pid":1,"tid":1,"ts":3,"dur":1}]}'))
    return out


# -- ONNX Runtime ------------------------------------------------------------------------------------------------------

def _ort_doc(rng: random.Random, strings: bool) -> bytes:
    evs = ['{"cat" : "Session","pid" :7,"tid" :7,"dur" :1000,"ts" :0,"ph" : "X","name" :"model_run","args" : {}}']
    values = _edges(rng, False, 30, strings)
    for i in range(0, len(values) - 2, 3):
        a, b, c = values[i:i + 3]
        shape = f'[{{"float":[{a},{b}]}},{{"float":[{c},2]}}]'
        evs.append(f'{{"cat" : "Node","pid" :7,"tid" :7,"dur" :{a},"ts" :{b},"ph" : "X","name" :"n{i}_kernel_time",'
                   f'"args" : {{"op_name" : "MatMul","provider" : "CPUExecutionProvider","node_index" : "{i}",'
                   f'"input_type_shape" : {shape},"output_type_shape" : [{{"float":[{c},{a}]}}],'
                   f'"output_size" : "{c}"}}}}')
        evs.append(f'{{"cat" : "Kernel","pid" :7,"tid" :8,"dur" :{c},"ts" :{a},"ph" : "X","name" :"k{i}",'
                   f'"args" : {{"stream" : {b},"grid_x" : {c}}}}}')
    return ("[\n" + ",\n".join(evs) + "\n]\n").encode()


def onnxruntime(folder: Path, scale: str, rng: random.Random) -> list[Path]:
    s = _sizes(scale)
    head = _ort_doc(rng, False)
    out = [_write(folder / "ort-edges.json", head), _write(folder / "ort-edges-mixed.json", _ort_doc(rng, True))]
    out += _tails(folder, "ort", ".json", head[: head.rindex(b"]")] + b",", scale, rng)
    deep_shape = "[" * s["depth"] + "]" * s["depth"]
    deep = head[: head.rindex(b"]")] + (
        ',{"cat" : "Node","pid" :7,"tid" :7,"dur" :1,"ts" :5,"ph" : "X","name" :"d_kernel_time","args" : '
        '{"op_name" : "Add","output_type_shape" : ' + deep_shape + "}}]").encode()
    out.append(_write(folder / "ort-deep-shape.json", deep))
    many = ",".join(str(i) for i in range(s["instructions"]))
    wide = head[: head.rindex(b"]")] + (
        ',{"cat" : "Node","pid" :7,"tid" :7,"dur" :1,"ts" :5,"ph" : "X","name" :"w_kernel_time","args" : '
        '{"op_name" : "Add","input_type_shape" : [{"float":[' + many + ']}],"output_type_shape" : [{"float":['
        + many + "]}]}}]").encode()
    out.append(_write(folder / "ort-wide-shape.json", wide))
    return out


# -- rocprof v1 results.json and rocprofv3 JSON -----------------------------------------------------------------------

def _rocprof_v1_doc(rng: random.Random, strings: bool) -> bytes:
    evs = [{"args": {"name": "CPU HIP API"}, "ph": "M", "pid": 2, "name": "process_name"},
           {"args": {"name": "GPU0"}, "ph": "M", "pid": 6, "name": "process_name"}]
    values = _edges(rng, False, 30, strings)
    raw = []
    for i in range(0, len(values) - 2, 3):
        a, b, c = (v.strip('"') for v in values[i:i + 3])
        raw.append(json.dumps({"ph": "X", "name": f"hip{i}", "pid": "2", "tid": "77", "ts": "1", "dur": "1",
                               "args": {"BeginNs": a, "EndNs": b, "DurationNs": c}}))
        raw.append(json.dumps({"ph": "X", "name": f"k{i}", "pid": "6", "tid": "0", "ts": a, "dur": b,
                               "args": {"BeginNs": b, "EndNs": c, "dev-id": a, "queue-id": c}}))
        raw.append(f'{{"ph":"s","cat":"DataFlow","id":{values[i]},"pid":2,"tid":77,"ts":{values[i + 1]}}}')
    body = ",".join([json.dumps(e) for e in evs] + raw)
    return ('{"traceEvents":[' + body + '],"otherData":{"Agent 2 Name":"gfx90a","Agent 2 Compute Unit":"'
            + values[0].strip('"') + '"}}').encode()


def rocprof_json(folder: Path, scale: str, rng: random.Random) -> list[Path]:
    head = _rocprof_v1_doc(rng, False)
    out = [_write(folder / "rocprof-v1-edges.json", head),
           _write(folder / "rocprof-v1-edges-mixed.json", _rocprof_v1_doc(rng, True))]
    out += _tails(folder, "rocprof-v1", ".json", head[: head.index(b"],\"otherData\"")] + b",", scale, rng)
    return out


def _rocv3_doc(rng: random.Random, strings: bool) -> bytes:
    from support import rocv3

    values = [json.loads(v) if v not in ("NaN", "Infinity", "-Infinity") else float(v.lower().replace("inity", ""))
              for v in _edges(rng, False, 24, strings)]
    records = rocv3.base_records()
    for i, rec in enumerate(records["kernel_dispatch"] + records["hip_api"] + records["memory_copy"]):
        rec["start_timestamp"], rec["end_timestamp"] = values[2 * i % len(values)], values[(2 * i + 1) % len(values)]
    records["kernel_dispatch"][0]["dispatch_info"]["grid_size"]["x"] = values[-1]
    records["memory_copy"][0]["bytes"] = values[-2]
    records["memory_allocation"][0]["allocation_size"] = values[-3]
    return json.dumps(rocv3.document(records), allow_nan=True).encode()


def rocprof_v3(folder: Path, scale: str, rng: random.Random) -> list[Path]:
    s = _sizes(scale)
    head = _rocv3_doc(rng, False)
    out = [_write(folder / "rocv3-edges.json", head), _write(folder / "rocv3-edges-mixed.json", _rocv3_doc(rng, True))]
    cut = head[: head.index(b'"kernel_dispatch"')]
    out += _tails(folder, "rocv3", ".json", cut, scale, rng)
    out.append(_write(folder / "rocv3-unclosed.json", cut + b'"kernel_dispatch": ' + b"[" * s["brackets"]))
    return out


# -- rocprof CSV -------------------------------------------------------------------------------------------------------

_CSV_HEADER = ("Index,KernelName,gpu-id,queue-id,queue-index,pid,tid,grd,wgr,lds,scr,vgpr,sgpr,fbar,sig,obj,"
               "DispatchNs,BeginNs,EndNs,CompleteNs,GPUBusy,Wavefronts\n")


def _rocprof_csv_doc(rng: random.Random, strings: bool) -> bytes:
    rows = [_CSV_HEADER]
    values = _edges(rng, True, 40, strings)
    for i in range(0, len(values) - 3, 4):
        a, b, c, d = values[i:i + 4]
        rows.append(f'{i},"k{i}(int)",{a},{b},0,4242,4243,{c},256,0,0,8,16,0,0x0,0x7f00,{d},{a},{b},{c},{d},{a}\n')
    rows.append("99,ok,0,0,0,1,1,1,1,0,0,8,16,0,0x0,0x0,100,1000,2000,2100,50,4\n")
    return "".join(rows).encode()


def rocprof_csv(folder: Path, scale: str, rng: random.Random) -> list[Path]:
    s = _sizes(scale)
    head = _rocprof_csv_doc(rng, False)
    out = [_write(folder / "results-edges.csv", head), _write(folder / "results-edges-mixed.csv",
                                                              _rocprof_csv_doc(rng, True))]
    out += _tails(folder, "results", ".csv", head, scale, rng)
    out.append(_write(folder / "results-long-line.csv", head + b'100,"' + b"k" * s["line"] + b'",0,0\n'))
    many = "".join(f"{i},k{i % 7},0,0,0,1,1,1,1,0,0,8,16,0,0x0,0x0,{i},{2 * i},{2 * i + 1},{2 * i + 1},1,1\n"
                   for i in range(s["instructions"]))
    out.append(_write(folder / "results-many-rows.csv", _CSV_HEADER.encode() + many.encode()))
    return out


# -- Nsight Systems SQLite ---------------------------------------------------------------------------------------------

def _nsys_file(path: Path, rng: random.Random, strings: bool) -> Path:
    from support import nsys

    tables = nsys.small_export_tables()
    pool: list[object] = [*INT_EDGES, 1e308, -1e308, float("nan"), float("inf")] + (["x", b"\x00\xff"] if strings
                                                                                    else [])
    for name in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                 "NVTX_EVENTS"):
        for row in tables[name]:
            for col in ("start", "end", "correlationId", "streamId", "bytes", "globalTid", "gridX"):
                if col in row and rng.random() < 0.5:
                    row[col] = rng.choice(pool)
    tables["TARGET_INFO_SESSION_START_TIME"][0]["utcEpochNs"] = rng.choice(pool)
    return nsys.build_export(path, tables)


def nsys_sqlite(folder: Path, scale: str, rng: random.Random) -> list[Path]:
    out = [_nsys_file(folder / "nsys-edges.sqlite", rng, False),
           _nsys_file(folder / "nsys-edges-mixed.sqlite", rng, True)]
    head = out[0].read_bytes()
    s = _sizes(scale)
    out.append(_nul_tail(folder / "nsys-nul-tail.sqlite", head, s["nul"]))
    cut = bytearray(head)
    cut[len(cut) // 2:] = rng.randbytes(len(cut) - len(cut) // 2)  # the second half of the pages overwritten
    out.append(_write(folder / "nsys-junk-pages.sqlite", bytes(cut)))
    return out


# -- XProf xplane and its HLO protos ----------------------------------------------------------------------------------

def _xspace(rng: random.Random, values: list[int], hlo_dims: list[int]) -> bytes:
    from opscope.ingest.xplane.hlo import classes as hlo_classes
    from opscope.ingest.xplane.schema import classes

    space = classes()["XSpace"]()
    hlo = hlo_classes()["HloProto"]()
    module = hlo.hlo_module
    module.name, module.entry_computation_name, module.id = "jit_step", "main", 7
    main = module.computations.add(name="main", id=1)
    for k, dims in enumerate((hlo_dims, [2, 3])):
        ins = main.instructions.add(id=10 + k, name=f"p{k}", opcode="parameter")
        ins.shape.element_type, ins.shape.dimensions[:] = 11, dims
    dot = main.instructions.add(id=12, name="dot.1", opcode="dot", operand_ids=[10, 11])
    dot.shape.element_type, dot.shape.dimensions[:] = 11, hlo_dims[:2]
    dot.dot_dimension_numbers.lhs_contracting_dimensions[:] = [1]
    dot.dot_dimension_numbers.rhs_contracting_dimensions[:] = [0]
    meta = space.planes.add(id=9, name="/host:metadata")
    md = meta.event_metadata[7]
    md.id, md.name = 7, "jit_step(7)"
    meta.stat_metadata[1].id, meta.stat_metadata[1].name = 1, "Hlo Proto"
    md.stats.add(metadata_id=1, bytes_value=hlo.SerializeToString())
    host = space.planes.add(id=0, name="/host:CPU")
    names = {1: "hlo_op", 2: "correlation_id", 3: "step_num", 4: "program_id", 5: "allocation_bytes", 6: "dot.1"}
    for i, n in names.items():
        host.stat_metadata[i].id, host.stat_metadata[i].name = i, n
    host.event_metadata[1].id, host.event_metadata[1].name = 1, "dot.1"
    host.event_metadata[2].id, host.event_metadata[2].name = 2, "MemoryAllocation"
    for j in range(0, len(values) - 2, 3):
        line = host.lines.add(id=j, name=f"t{j}", timestamp_ns=values[j])
        ev = line.events.add(metadata_id=1 + j % 2, offset_ps=values[j + 1], duration_ps=values[j + 2])
        ev.stats.add(metadata_id=1, ref_value=6)
        ev.stats.add(metadata_id=2, int64_value=values[j + 2])
        ev.stats.add(metadata_id=3, uint64_value=values[j] & ((1 << 64) - 1))
        ev.stats.add(metadata_id=4, int64_value=7)
        ev.stats.add(metadata_id=5, int64_value=values[j + 1])
    gpu = space.planes.add(id=1, name="/device:GPU:0")
    gpu.event_metadata[1].id, gpu.event_metadata[1].name = 1, "kernel"
    gpu.stat_metadata[1].id, gpu.stat_metadata[1].name = 1, "correlation_id"
    stream = gpu.lines.add(id=7, name="Stream #7(Kernel)", timestamp_ns=values[-1])
    stream.events.add(metadata_id=1, offset_ps=values[-2], duration_ps=values[-3]).stats.add(
        metadata_id=1, int64_value=values[0])
    env = space.planes.add(id=2, name="Task Environment")
    env.stat_metadata[1].id, env.stat_metadata[1].name = 1, "profile_start_time"
    env.stats.add(metadata_id=1, uint64_value=rng.choice([0, I64_MAX, 1 << 63]))
    return space.SerializeToString()


def xplane(folder: Path, scale: str, rng: random.Random) -> list[Path]:
    s = _sizes(scale)
    values = [rng.choice(INT_EDGES) for _ in range(27)]
    values[:3] = [I64_MAX, I64_MAX, I64_MAX]  # a line's start and an event's offset each at the edge
    head = _xspace(rng, values, [I64_MAX, -1])
    out = [_write(folder / "run-edges.xplane.pb", head),
           _write(folder / "run-hlo-edges.xplane.pb", _xspace(rng, [1000, 0, 5] * 3, [I64_MIN, 1 << 62, 0, -5]))]
    out += _tails(folder, "run", ".xplane.pb", head, scale, rng)
    big = _xspace(rng, [1000, 0, 5] * 3, [2] * (s["instructions"]))
    out.append(_write(folder / "run-many-dims.xplane.pb", big))
    return out


# -- MIGraphX perf and MIGRAPHX_TRACE_EVAL ----------------------------------------------------------------------------

def _perf_doc(rng: random.Random, strings: bool) -> bytes:
    values = _edges(rng, True, 30, strings)
    lines = ["Running performance report ...", "x = @param:x -> float_type, {2, 3}, {3, 1}: 0.001ms, 1%"]
    for i in range(0, len(values) - 2, 3):
        a, b, c = values[i:i + 3]
        lines.append(f"@{i + 1} = gpu::code_object[code_object={i},symbol_name=k{i},](x) -> float_type, {{2, {c}}}, "
                     f"{{{c}, 1}}: {a}ms, {b}%")
        lines.append(f"@{i + 2} = gpu::gemm[alpha={a}](x,@{i + 1}) -> float_type, {{{c}, 3}}, {{3, 1}}: {b}ms, {a}%")
    lines += ["", "Summary:", f"gpu::gemm: {values[0]}ms / {values[1]} = {values[2]}ms, {values[3]}%",
              "", f"Batch size: {values[4]}", f"Rate: {values[5]} inferences/sec", f"Total time: {values[6]}ms",
              f"Total instructions time: {values[7]}ms", f"Overhead time: {values[8]}ms, {values[9]}ms",
              "Overhead: 2%, 5%"]
    return ("\n".join(lines) + "\n").encode()


def _eval_doc(rng: random.Random, strings: bool) -> bytes:
    values = _edges(rng, True, 24, strings)
    lines = []
    for i in range(0, len(values) - 3, 4):
        a, b, c, d = values[i:i + 4]
        lines += [f"Run instruction: @{i} = gpu::code_object[code_object=1,symbol_name=k{i},](x) -> float_type, "
                  f"{{2, {c}}}, {{{c}, 1}}", f"Time: {a}ms, {b}ms", "Output has normal, nan, inf",
                  f"Output: {a}, {b}, {c}, {d}", f"Min value: {a}, Max value: {b}, Mean: {c}, StdDev: {d}"]
    return ("\n".join(lines) + "\n").encode()


def migraphx(folder: Path, scale: str, rng: random.Random) -> list[Path]:
    s = _sizes(scale)
    perf, ev = _perf_doc(rng, False), _eval_doc(rng, False)
    out = [_write(folder / "perf-edges.txt", perf), _write(folder / "perf-edges-mixed.txt", _perf_doc(rng, True)),
           _write(folder / "eval-edges.txt", ev), _write(folder / "eval-edges-mixed.txt", _eval_doc(rng, True))]
    out += _tails(folder, "perf", ".txt", perf[: perf.index(b"\n\nSummary")] + b"\n", scale, rng)
    out += _tails(folder, "eval", ".txt", ev, scale, rng)[:1]
    body = "".join(f"@{i} = gpu::code_object[code_object={i},symbol_name=kernel_{i % 97},](x,@{max(i - 1, 0)}) -> "
                   f"float_type, {{64, 128, 3, 3}}, {{1152, 9, 3, 1}}: 0.{i % 1000:03d}ms, 0.01%\n"
                   for i in range(1, s["instructions"]))
    out.append(_write(folder / "perf-many-instructions.txt",
                      b"Running performance report ...\nx = @param:x -> float_type, {2, 3}, {3, 1}: 0.001ms, 1%\n"
                      + body.encode()))
    long_line = ("Running performance report ...\n@1 = gpu::code_object[code_object=1,symbol_name=k,](x"
                 + ",x" * (s["line"] // 2) + ") -> float_type, {2}, {1}: 1ms, 1%\n")
    out.append(_write(folder / "perf-long-line.txt", long_line.encode()))
    deep = ("Running performance report ...\n@1 = gpu::k[a=" + "{" * s["brackets"] + "](x) -> float_type, "
            + "{" * s["brackets"] + "2}, {1}: 1ms, 1%\n")
    out.append(_write(folder / "perf-unclosed.txt", deep.encode()))
    return out


# -- special files -----------------------------------------------------------------------------------------------------

def special(folder: Path, scale: str, rng: random.Random) -> list[Path]:
    out = []
    fifo = folder / "pipe.json"
    os.mkfifo(fifo)
    out.append(fifo)
    if Path("/dev/zero").exists():
        link = folder / "zero.json"
        link.symlink_to("/dev/zero")
        out.append(link)
    folder_trace = folder / "folder.json"
    folder_trace.mkdir()
    out.append(folder_trace)
    out.append(_nul_tail(folder / "all-nul.json", b"", _sizes(scale)["nul"]))
    out.append(_write(folder / "nul-head.json", bytes(8) + b'{"traceEvents":[]}'))
    return out


def _write(path: Path, data: bytes) -> Path:
    if path.suffix == ".gz":
        data = gzip.compress(data, 6)
    path.write_bytes(data)
    return path


GENERATORS: dict[str, Callable[[Path, str, random.Random], list[Path]]] = {
    "chrome": chrome, "onnxruntime": onnxruntime, "rocprof-json": rocprof_json, "rocprof-v3": rocprof_v3,
    "rocprof-csv": rocprof_csv, "nsys": nsys_sqlite, "xplane": xplane, "migraphx": migraphx, "special": special,
}


def build(root: Path, scale: str = "ci", seed: int = 1) -> dict[str, list[Path]]:
    """Write the corpus under ``root`` (a folder named with rich markup, as the first corpus); files by format."""
    folder = root / f"r[bold][{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    corpus = {}
    for kind, make in GENERATORS.items():
        sub = folder / kind
        sub.mkdir(exist_ok=True)
        corpus[kind] = make(sub, scale, random.Random(f"{seed}:{kind}"))
    return corpus



def full_command_files(corpus: dict[str, list[Path]]) -> set[Path]:
    """The files every table command runs on: each format's mixed edge file (analyses over edge values)."""
    return {f for fs in corpus.values() for f in fs if "-edges-mixed" in f.name}


def run(corpus: dict[str, list[Path]], good: Path, formats, cache_root: Path, command_cpu_s: int = 60,
        file_timeout: float = 300, jobs: int = 2) -> list[FileResult]:
    """Every file through :data:`COMMANDS` (the mixed edge files through every table command), a child per file."""
    full = full_command_files(corpus)
    files = [f for fs in corpus.values() for f in fs]
    results = run_corpus([f for f in files if f not in full], good, COMMANDS, formats, cache_root / "some",
                         command_cpu_s, file_timeout, jobs)
    return results + run_corpus(sorted(full), good, FULL_COMMANDS, formats, cache_root / "all", command_cpu_s,
                                file_timeout, jobs)


def content_size(path: Path) -> int:
    """The bytes a reader may see: a gzip file's inflated size (as far as it inflates), 0 for what is no file."""
    if not path.is_file() or path.is_symlink():
        return 0
    with open(path, "rb") as fh:
        if fh.read(2) != b"\x1f\x8b":
            return path.stat().st_size
    total = 0
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    with open(path, "rb") as fh:
        try:
            while chunk := fh.read(1 << 20):
                total += len(d.decompress(chunk))
                while d.unconsumed_tail:
                    total += len(d.decompress(d.unconsumed_tail))
        except zlib.error:
            pass
    return total or path.stat().st_size


def budget_ratio(res: FileResult) -> float:
    """The memory a file cost above start-up, as a share of its budget (1.0 = all of it)."""
    budget_kb = (FIXED_MIB << 10) + PER_CONTENT_BYTE * content_size(res.file) // 1024
    return (res.peak_kb - res.startup_kb) / budget_kb
