"""MIGraphX text: ``migraphx-driver perf`` reports of other driver versions and ``MIGRAPHX_TRACE_EVAL`` dumps, written
here from the formats AMDMIGraphX's ``src/program.cpp`` prints (and the DCU fork's lines quoted in public posts);
expected values worked out by hand from the text."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pytest
from support.cli import assert_one_line_error, run_cli_many

from opscope.analyses.numerics import SCHEMA, load_dump
from opscope.diff.numerics import diff_dumps
from opscope.ingest import open_trace, pick_reader
from opscope.ingest.migraphx.grammar import parse_instruction
from opscope.ingest.migraphx.operands import records

# ROCm 4-era driver: no batch, Rate in /sec, Summary "group: total, share", no Min/Max or percentiles; the
# DCU/DTK fork's "main:@N" names, shapes without spaces and fractional percents
OLD = """\
Compiling ...
module: "main"
main:@0 = check_context::migraphx::version_1::gpu::context -> float_type,{},{}
Allocating params ...
Running performance report ...
main:@0 = check_context::migraphx::version_1::gpu::context -> float_type,{},{}:0.0026ms,0.0063%
main:@1 = hip::hip_allocate_memory[shape=float_type,{385},{1},id=main:scratch]->float_type,{385},{1}:0.0017ms, 0.004%
input = @param:input -> float_type,{1,3,4,4},{48,16,4,1}:0.001ms,0.0024%
main:@3 = hip::copy_to_gpu(input,main:@1)->float_type,{1,3,4,4},{48,16,4,1}:0.5ms,1.2%
main:@4 = gpu::convolution[padding={0,0},stride={1,1}](main:@3,main:@1)->float_type,{1,8,4,4},{128,16,4,1}:40ms,95.1%
main:@5 = gpu::relu(main:@4,main:@1)->float_type,{1,8,4,4},{128,16,4,1}:1.5ms,3.6%

Summary:
gpu::convolution: 40ms, 96%
gpu::relu: 1.5ms, 4%
hip::copy_to_gpu: 0.5ms, 2%
check_context::migraphx::version_1::gpu::context: 0.0026ms, 1%
hip::hip_allocate_memory: 0.0017ms, 1%
@param: 0.001ms, 1%

Rate: 23.5/sec
Total time: 42.5ms
Total instructions time: 42.0053ms
Overhead time: 0.01ms, 0.4947ms
Overhead: 0%, 1%
"""

# 2.x without the Min/Max/Mean/Median and percentile lines; a multi-module program: main's @return is followed
# (no newline, as perf prints it) by the submodule's first instruction; a tuple output; an instruction that never
# ran during the timed runs (-nan); a second stream
MULTI = """\
Running performance report ...
x = @param:x -> float_type, {2, 3}, {3, 1}: 0.001ms, 1%
@1 = gpu::set_stream[stream=1] -> float_type, {}, {}: 0.002ms, 1%
@2 = gpu::code_object[code_object=10,symbol_name=add_relu,](x) -> float_type, {2, 3}, {3, 1}: 0.25ms, 26%
@3 = if(x), [then_mod, else_mod] -> [float_type, {2, 3}, {3, 1}, half_type, {6}, {1}]: 0.5ms, 51%
@4 = @return(@3)then_mod:@0 = gpu::code_object[symbol_name=mul_kernel](x) -> float_type, {2, 3}, {3, 1}: 0.2ms, 21%
then_mod:@1 = @return(then_mod:@0)else_mod:@0 = hip::copy(x) -> float_type, {2, 3}, {3, 1}: -nanms, -nan%

Summary:
if: 0.5ms / 1 = 0.5ms, 51%
gpu::code_object::add_relu: 0.25ms / 1 = 0.25ms, 26%
gpu::code_object::mul_kernel: 0.2ms / 1 = 0.2ms, 21%
gpu::set_stream: 0.002ms / 1 = 0.002ms, 1%
@param: 0.001ms / 1 = 0.001ms, 1%

Batch size: 4
Rate: 3985.2 inferences/sec
Total time: 1.00371ms
Total instructions time: 0.953ms
Overhead time: 0.02ms, 0.05071ms
Overhead: 2%, 5%
"""


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def _rows(trace, kind=None):
    ev = trace.events.to_pylist()
    return [e for e in ev if kind is None or e["kind"] == kind]


def test_old_driver_and_dcu_fork_lines(tmp_path):
    path = _write(tmp_path, "old.txt", OLD)
    assert pick_reader(path).name == "migraphx_perf"
    trace = open_trace(path, use_cache=False)
    ops = _rows(trace, "cpu_op")
    assert [e["name"] for e in ops] == ["check_context::migraphx::version_1::gpu::context",
                                         "hip::hip_allocate_memory", "@param", "hip::copy_to_gpu",
                                         "gpu::convolution", "gpu::relu"]
    assert [e["dur_ns"] for e in ops] == [2600, 1700, 1000, 500_000, 40_000_000, 1_500_000]
    assert [e["ts_ns"] for e in ops] == [0, 2600, 4300, 5300, 505_300, 40_505_300]
    # the operands' shapes (x, then the scratch buffer: not the output's shape, so an input), then the output's
    assert json.loads(ops[4]["shapes"]) == [[1, 3, 4, 4], [385], [1, 8, 4, 4]]
    assert json.loads(ops[4]["dtypes"]) == ["float32"] * 3
    assert json.loads(ops[4]["strides"]) == [[48, 16, 4, 1], [1], [128, 16, 4, 1]]
    # hip::copy_to_gpu(input, main:@1): its last operand is not shaped as its output: both are inputs
    assert json.loads(ops[3]["shapes"]) == [[1, 3, 4, 4], [385], [1, 3, 4, 4]]
    dev = _rows(trace, "kernel") + _rows(trace, "memcpy")
    assert sorted((e["kind"], e["name"], e["dur_ns"]) for e in dev) == [
        ("kernel", "gpu::convolution", 40_000_000), ("kernel", "gpu::relu", 1_500_000),
        ("memcpy", "hip::copy_to_gpu", 500_000)]
    corr = {e["correlation"]: e["name"] for e in ops}
    assert all(corr[e["correlation"]] == e["name"] for e in dev)  # each device row linked to its op
    m = trace.metadata["migraphx"]
    assert "batch_size" not in m and "p90_ms" not in m and "min_ms" not in m
    assert m["rate_per_s"] == 23.5 and m["total_time_ms"] == 42.5 and m["total_instructions_time_ms"] == 42.0053
    assert m["overhead_pct"] == 0 and m["overhead_calculated_ms"] == 0.4947
    assert math.isclose(m["sum_instructions_ms"], 0.0026 + 0.0017 + 0.001 + 0.5 + 40 + 1.5)
    assert m["summary"][0] == {"group": "gpu::convolution", "total_ms": 40.0, "count": None, "average_ms": None,
                               "pct": 96.0}
    args = json.loads(trace.args.to_pylist()[1]["args"])
    assert args["attrs"] == "shape=float_type,{385},{1},id=main:scratch" and args["module"] == "main"
    assert [(s["step"], s["dur_ns"]) for s in trace.steps.to_pylist()] == [(0, 42_500_000)]


def test_multi_module_tuple_nan_and_streams(tmp_path):
    path = _write(tmp_path, "multi.txt", MULTI)
    trace = open_trace(path, use_cache=False)
    ops = _rows(trace, "cpu_op")
    assert [e["name"] for e in ops] == ["@param", "gpu::set_stream", "gpu::code_object::add_relu", "if",
                                         "gpu::code_object::mul_kernel", "hip::copy"]
    assert [e["dur_ns"] for e in ops] == [1000, 2000, 250_000, 500_000, 200_000, 0]
    # if(x): the operand x, then the tuple output as one TensorList entry
    assert json.loads(ops[3]["shapes"]) == [[2, 3], [[2, 3], [6]]]
    assert json.loads(ops[3]["dtypes"]) == ["float32", "TensorList"]
    args = [json.loads(a) for a in trace.args.to_pylist() for a in [a["args"]]]
    assert args[3]["module_inputs"] == ["then_mod", "else_mod"] and args[4]["module"] == "then_mod"
    assert args[5]["time_ms"] is None
    kernels = _rows(trace, "kernel")
    # set_stream orders streams only (no device row); the kernels after it run on stream 1
    assert [(e["name"], e["stream"]) for e in kernels] == [("add_relu", 1), ("mul_kernel", 1)]
    assert [(e["name"], e["dur_ns"]) for e in _rows(trace, "memcpy")] == [("hip::copy", 0)]
    m = trace.metadata["migraphx"]
    assert m["batch_size"] == 4 and m["rate_per_s"] == 3985.2 and "p90_ms" not in m and "min_ms" not in m
    assert math.isclose(m["rate_computed_per_s"], 1000 / 1.00371 * 4)
    assert math.isclose(m["sum_instructions_ms"], m["total_instructions_time_ms"])
    warnings = {w["problem"]: w["count"] for w in trace.warnings}
    assert warnings["instructions without a time (nan: not run during the timed runs), given 0 ns"] == 1
    assert any(p.startswith("submodule instructions") and c == 2 for p, c in warnings.items())
    # the summary shows the figures of the report (no percentiles here)
    from opscope.analyses.reports import summary_report

    fields = dict(next(s for s in summary_report(trace).sections if s.key == "migraphx").fields)
    assert fields["batch size"] == "4" and "percentiles" not in fields
    assert fields["rate"].startswith("3985.2 inferences/s")


def test_program_filling_the_head_and_gzip(tmp_path):
    # a big model's compiled program fills the first 64 KiB before any timing; the file gzipped
    import gzip

    program = "".join(f"@{i} = gpu::code_object[symbol_name=k{i}](x) -> float_type, {{2, 3}}, {{3, 1}}\n"
                      for i in range(1500))
    text = "Running [ MIGraphX Version: 2.15.0 ]: migraphx-driver perf m.onnx\nmodule: \"main\"\n" + program + OLD
    assert len(program) > 64 << 10
    path = tmp_path / "big.txt.gz"
    path.write_bytes(gzip.compress(text.encode()))
    assert pick_reader(path).name == "migraphx_perf"
    trace = open_trace(path, use_cache=False)
    assert len(_rows(trace, "cpu_op")) == 6 and trace.metadata["migraphx"]["version"] == "2.15.0"


def test_broken_timing_line_is_recovered_and_said(tmp_path):
    text = MULTI.replace("0.25ms, 26%", "0.2x5ms, 26%")
    trace = open_trace(_write(tmp_path, "broken.txt", text), use_cache=False)
    assert "gpu::code_object::add_relu" not in {e["name"] for e in _rows(trace, "cpu_op")}
    warnings = {w["problem"]: w["count"] for w in trace.warnings}
    assert warnings["instruction lines whose timing does not read (skipped; the totals no longer add up)"] == 1
    # and the report's own sum no longer holds: 0.953 - 0.25 = 0.703
    assert warnings["the instruction lines add up to 0.703 ms, not the Total instructions time of 0.953 ms"] == 1
    good = open_trace(_write(tmp_path, "good.txt", MULTI), use_cache=False)
    assert not any(w["problem"].startswith(("the instruction lines", "Rate")) for w in good.warnings)


BAD = {
    "header_only.txt": ("Running [ MIGraphX Version: 2.15.0 ]: migraphx-driver perf m.onnx\nCompiling ...\n"
                        "module: \"main\"\n@0 = check_context::migraphx::gpu::context -> float_type, {}, {}\n"
                        "@1 = gpu::code_object[symbol_name=k](@0) -> float_type, {2}, {1}\n",
                        ["without a performance report"]),
    "all_broken.txt": ("Running performance report ...\n@0 = gpu::gemm(a,b) -> float_type, {2}, {1}: 0.0.1ms, 5%\n",
                       ["do not read", "line 2"]),
    "random.txt": ("Dear diary, today = sunny.\nNothing to see: 3 apples, 4%\n", ["not a trace format"]),
    # documents that quote perf output (a README, a page, notes) are not perf output
    "README.md": ("# Tools\n\nRun `migraphx-driver perf`:\n\n```\nRunning performance report ...\n"
                  "main:@3 = gpu::gemm(a,b) -> float_type, {2}, {1}: 0.0026ms, 0.0063%\n```\n",
                  ["not a trace format"]),
    "notes.html": ("<!DOCTYPE html>\n<pre>Running performance report ...\n"
                   "@3 = gpu::gemm(a,b) -> float_type, {2}, {1}: 0.0026ms, 3%\n</pre>\n", ["not a trace format"]),
    "perf.rst": ("Perf\n====\n\n.. code-block:: text\n\n   Running performance report ...\n"
                 "@3 = gpu::gemm(a,b) -> float_type, {2}, {1}: 0.0026ms, 3%\n", ["not a trace format"]),
}


def test_almost_migraphx_is_one_line_exit_2(tmp_path):
    paths = {name: _write(tmp_path, name, text) for name, (text, _) in BAD.items()}
    results = run_cli_many([("summary", str(p)) for p in paths.values()], cache=tmp_path / "cache")
    for (name, (_, words)), res in zip(BAD.items(), results):
        assert_one_line_error(res, paths[name], *words)


# --- MIGRAPHX_TRACE_EVAL -----------------------------------------------------------------------------------

LEVEL1 = """\
Run instruction: x = @param:x -> float_type, {2, 6}, {6, 1}
Time: 0.001ms, 0.002ms
Run instruction: @1 = gpu::code_object[code_object=1,symbol_name=add_kernel,](x) -> float_type, {2, 6}, {6, 1}
Time: 0.011ms, 0.015ms
"""
LEVEL2 = """\
Running [ MIGraphX Version: 2.15.0 ]: migraphx-driver run m.onnx
Run instruction: x = @param:x -> float_type, {2, 6}, {6, 1}
Time: 0.001ms, 0.002ms
Run instruction: @1 = gpu::code_object[code_object=1,symbol_name=add_kernel,](x) -> float_type, {2, 6}, {6, 1}
Time: 0.011ms, 0.015ms
Output has normal, zero
Output: 0, 1, 2, 3, 4, ..., 7, 8, 9, 10, 11
Min value: 0, Max value: 11, Mean: 5.5, StdDev: 3.45205
Run instruction: @2 = gpu::code_object[code_object=2,symbol_name=mlir_log,](@1) -> float_type, {2, 6}, {6, 1}
Time: 0.011ms, 0.015ms
Output has normal, nan, inf
Output: nan, -inf, 0, 0.693147, 1.09861, ..., 1.94591, 2.07944, 2.19722, 2.30259, 2.3979
Min value: nan, Max value: 2.3979, Mean: nan, StdDev: nan
Run instruction: @3 = gpu::code_object[code_object=3,symbol_name=mlir_exp,](@2) -> float_type, {2}, {1}
Time: 0.011ms, 0.015ms
Output has normal
Output: 1, 2
Min value: 1, Max value: 2, Mean: 1.5, StdDev: 0.5
"""
LEVEL3 = """\
Run instruction: x = @param:x -> float_type, {2, 3}, {3, 1}
Time: 0.001ms, 0.002ms
Run instruction: @1 = gpu::code_object[code_object=2,symbol_name=mlir_log,](x) -> float_type, {2, 3}, {3, 1}
Time: 0.011ms, 0.015ms
Output: nan, -inf, 1, 2, -nan, 4
"""


def test_trace_eval_level1_has_no_values(tmp_path):
    from opscope.errors import TraceError

    with pytest.raises(TraceError, match="level-1 dump holds only times"):
        load_dump(_write(tmp_path, "l1.txt", LEVEL1))


def test_trace_eval_level2(tmp_path):
    rows = load_dump(_write(tmp_path, "l2.txt", LEVEL2)).to_pylist()
    assert [(r["index"], r["op"], r["module"], r["shape"], r["dtype"], r["numel"]) for r in rows] == [
        (1, "gpu::code_object::add_kernel", "@1", "2x6", "float32", 12),
        (2, "gpu::code_object::mlir_log", "@2", "2x6", "float32", 12),
        (3, "gpu::code_object::mlir_exp", "@3", "2", "float32", 2)]
    a, b, c = rows
    assert (a["min"], a["max"], a["mean"], a["std"], a["nan_count"], a["inf_count"]) == (0, 11, 5.5, 3.45205, 0, 0)
    assert a["first5"] == [0, 1, 2, 3, 4] and a["last5"] == [7, 8, 9, 10, 11] and a["sample"] is None
    # NaN/Inf in the set: MIGraphX's stats are over all values (not finite ones): left out; counts are lower bounds
    assert (b["min"], b["max"], b["mean"], b["std"]) == (None, None, None, None)
    assert (b["nan_count"], b["inf_count"]) == (1, 1) and b["first5"][1] == -math.inf and math.isnan(b["first5"][0])
    assert c["first5"] == [1, 2] and c["last5"] == [1, 2] and c["mean"] == 1.5
    # inputs of an op: the stats of the output that feeds it
    assert [(i["arg"], i["shape"], i["max"]) for i in b["inputs"]] == [(0, "2x6", 11)]


def test_trace_eval_level3_and_old_spelling(tmp_path):
    for text in (LEVEL3, LEVEL3.replace("Output:", "Ouput:")):
        (row,) = load_dump(_write(tmp_path, "l3.txt", text)).to_pylist()
        finite = [1.0, 2.0, 4.0]
        mean = sum(finite) / 3
        assert (row["nan_count"], row["inf_count"], row["numel"]) == (2, 1, 6)
        assert (row["min"], row["max"], row["mean"]) == (1, 4, mean)
        assert math.isclose(row["std"], math.sqrt(sum((v - mean) ** 2 for v in finite) / 3))
        assert len(row["sample"]) == 6 and row["sample"][2:4] == [1, 2] and row["last5"][-1] == 4


def test_numerics_diff_of_two_trace_eval_dumps_names_the_instruction(tmp_path):
    a = _write(tmp_path, "a.txt", LEVEL2)
    changed = LEVEL2.replace("Output: 1, 2", "Output: 1, 2.5").replace("Max value: 2,", "Max value: 2.5,")
    b = _write(tmp_path, "b.txt", changed)
    same, diff = run_cli_many([("numerics-diff", str(a), str(a)), ("numerics-diff", str(a), str(b), "-f", "json")],
                              cache=tmp_path / "cache")
    assert same.returncode == 0 and "no divergence" in same.stdout + same.stderr
    assert diff.returncode == 1, diff.stderr
    rows = json.loads(diff.stdout)
    assert [(r["index"], r["op"], r["module"]) for r in rows] == [(3, "gpu::code_object::mlir_exp", "@3")]
    assert rows[0]["max_abs_err"] == 0.5
    assert "first divergence: op gpu::code_object::mlir_exp in module @3 (index 3" in diff.stderr


def test_migraphx_against_pytorch_aligns_on_shapes(tmp_path):
    mgx = load_dump(_write(tmp_path, "l2.txt", LEVEL2))

    def torch_row(index, op, shape, numel, first5, last5, stats):
        return {"index": index, "op": op, "module": "", "backward": False, "output_index": 0, "shape": shape,
                "dtype": "float32", "numel": numel, **dict(zip(("min", "max", "mean", "std"), stats)),
                "nan_count": 0, "inf_count": 0, "first5": first5, "last5": last5, "sample": None, "inputs": []}

    # torch ran add then relu, MIGraphX add then log (NaN): each run of 2x6 outputs is stood for by its last, so
    # relu meets log (diverged) and sum meets exp (equal)
    torch = pa.Table.from_pylist([
        torch_row(0, "aten::add", "2x6", 12, [-1, 0, 1, 2, 3], [6, 7, 8, 9, 10], (-1, 10, 4.5, 3.45205)),
        torch_row(1, "aten::relu", "2x6", 12, [0, 1, 2, 3, 4], [7, 8, 9, 10, 11], (0, 11, 5.5, 3.45205)),
        torch_row(2, "aten::sum", "2", 2, [1, 2], [1, 2], (1, 2, 1.5, 0.5))], schema=SCHEMA)
    d = diff_dumps(torch, mgx)
    assert d.matched_by == "shape"
    pairs = [(r["op"], r["index_b"], r["diverged"]) for r in d.table.to_pylist()]
    assert pairs == [("aten::relu", 2, True), ("aten::sum", 3, False)]


def test_trace_eval_times_as_a_trace(tmp_path):
    # two runs of the level-2 program: ops last their time once finished (t2), a step per run
    path = _write(tmp_path, "two_runs.txt", LEVEL2 + LEVEL2.split("\n", 1)[1])
    assert pick_reader(path).name == "migraphx_trace_eval"
    trace = open_trace(path, use_cache=False)
    ops = _rows(trace, "cpu_op")
    assert [e["name"] for e in ops[:4]] == ["@param", "gpu::code_object::add_kernel", "gpu::code_object::mlir_log",
                                            "gpu::code_object::mlir_exp"]
    assert [e["dur_ns"] for e in ops] == [2000, 15000, 15000, 15000] * 2
    assert [(s["step"], s["ts_ns"], s["dur_ns"]) for s in trace.steps.to_pylist()] == [(0, 0, 47000),
                                                                                       (1, 47000, 47000)]
    assert [e["name"] for e in _rows(trace, "kernel")] == ["add_kernel", "mlir_log", "mlir_exp"] * 2
    assert trace.metadata["format"] == "migraphx_trace_eval"


def _records(lines):
    recs = records(parse_instruction(line) for line in lines)
    return [None if r is None else (json.loads(r[0]), json.loads(r[1]), json.loads(r[2]), r[3]) for r in recs]


def test_operand_records():
    recs = _records([
        "a = @param:a -> half_type, {2, 4}, {4, 1}",
        "@1 = hip::allocate[shape=half_type, {2, 3}, {3, 1}] -> half_type, {2, 3}, {3, 1}",
        "b = @param:b -> half_type, {4, 3}, {1, 4}",
        # output_arg=1: the buffer is the middle operand
        "@3 = gpu::code_object[code_object=8,symbol_name=mlir_dot,global=1,local=1,output_arg=1,](a,@1,b) -> "
        "half_type, {2, 3}, {3, 1}",
        # no output_arg printed: the last operand
        "@4 = gpu::code_object[code_object=8,symbol_name=relu_kernel,global=1,local=1,](@3,@1) -> half_type, {2, 3}, "
        "{3, 1}",
        # an operand never defined: no record
        "@5 = gpu::code_object[code_object=8,symbol_name=add_kernel,](@4,nowhere,@1) -> half_type, {2, 3}, {3, 1}",
        # a dynamic shape: no record
        "@6 = gpu::code_object[code_object=8,symbol_name=relu_kernel,](@4) -> dynamic, half_type, {{1, 4}}",
        # MIOpen: (x, w, workspace, y): x and w are the inputs
        "x = @param:x -> float_type, {1, 3, 8, 8}, {192, 64, 8, 1}",
        "w = @param:w -> float_type, {4, 3, 3, 3}, {27, 9, 3, 1}",
        "ws = @param:ws -> int8_type, {512}, {1}",
        "y = @param:y -> float_type, {1, 4, 6, 6}, {144, 36, 6, 1}",
        "@11 = gpu::convolution[padding={0, 0, 0, 0},stride={1, 1}](x,w,ws,y) -> float_type, {1, 4, 6, 6}, "
        "{144, 36, 6, 1}",
        # pooling: its window after the output; the buffer dropped
        "p = @param:p -> float_type, {1, 4, 3, 3}, {36, 9, 3, 1}",
        "@13 = gpu::pooling[mode=max,padding={0, 0, 0, 0},stride={2, 2},lengths={2, 2},ceil_mode=0](@11,p) -> "
        "float_type, {1, 4, 3, 3}, {36, 9, 3, 1}",
        # a view: not an allocating op, its one operand is an input
        "@14 = transpose[permutation={1, 0}](a) -> half_type, {4, 2}, {1, 4}",
        # a tuple operand and output as TensorList entries
        "@15 = if(@13), [then_mod, else_mod] -> [float_type, {2}, {1}, half_type, {3}, {1}]",
        "@16 = get_tuple_elem[index=0](@15) -> float_type, {2}, {1}",
        # MIOpen's fused conv_bias_relu: (x, w, workspace, bias, y)
        "bias = @param:bias -> float_type, {1, 4, 6, 6}, {0, 1, 0, 0}",
        "@18 = gpu::conv_bias_relu[conv=convolution[padding={0, 0, 0, 0}]](x,w,ws,bias,y) -> float_type, "
        "{1, 4, 6, 6}, {144, 36, 6, 1}",
    ])
    assert recs[3] == ([[2, 4], [4, 3], [2, 3]], ["float16"] * 3, [[4, 1], [1, 4], [3, 1]], None)
    assert recs[4][0] == [[2, 3], [2, 3]]
    assert recs[5] is None and recs[6] is None
    assert recs[11][0] == [[1, 3, 8, 8], [4, 3, 3, 3], [1, 4, 6, 6]]
    assert recs[13] == ([[1, 4, 6, 6], [1, 4, 3, 3], []], ["float32", "float32", ""],
                        [[144, 36, 6, 1], [36, 9, 3, 1], []], '["", "", "[2, 2]"]')
    assert recs[14] == ([[2, 4], [4, 2]], ["float16"] * 2, [[4, 1], [1, 4]], None)
    assert recs[15][:2] == ([[1, 4, 3, 3], [[2], [3]]], ["float32", "TensorList"])
    assert recs[16][:2] == ([[[2], [3]], [2]], ["TensorList", "float32"])
    assert recs[18][0] == [[1, 3, 8, 8], [4, 3, 3, 3], [1, 4, 6, 6], [1, 4, 6, 6]]
    assert recs[18][2][2] == [0, 1, 0, 0]


# perf --detailed: the Summary's groups carry the shapes (op<shape>); the instruction lines name the op alone
DETAILED = """\
Running performance report ...
@0 = gpu::gemm(x,y) -> float_type, {2, 2}, {2, 1}: 0.25ms, 50%
@1 = gpu::gemm(@0,y) -> float_type, {2, 2}, {2, 1}: 0.125ms, 25%
@2 = gpu::relu(@1) -> float_type, {2, 2}, {2, 1}: 0.125ms, 25%

Summary:
gpu::gemm<float_type, {2, 2}, {2, 1}>: 0.375ms / 2 = 0.1875ms, 75%

Total time: 0.5ms
Total instructions time: 0.5ms
"""


def test_perf_detailed_groups_name_the_ops_and_leave_the_kernels_their_op(tmp_path):
    # the groups are known only once the Summary is read, after every instruction's rows were handed on
    path = tmp_path / "detailed.txt"
    path.write_text(DETAILED)
    ev = open_trace(path, use_cache=False).events
    rows = sorted(zip(ev["kind"].to_pylist(), ev["name"].to_pylist(), ev["ts_ns"].to_pylist()), key=lambda r: r[2])
    ops = [name for kind, name, _ in rows if kind == "cpu_op"]
    kernels = [name for kind, name, _ in rows if kind == "kernel"]
    assert ops == ["gpu::gemm<float_type, {2, 2}, {2, 1}>"] * 2 + ["gpu::relu"]
    assert kernels == ["gpu::gemm", "gpu::gemm", "gpu::relu"]
    warnings = {w["problem"]: w["count"] for w in open_trace(path, use_cache=False).metadata["warnings"]}
    assert warnings["instructions whose Summary group could not be told (named by their op)"] == 1


def test_an_instruction_with_more_operands_than_kept_is_said_and_has_no_shapes(tmp_path, monkeypatch):
    from opscope.ingest.migraphx import grammar

    monkeypatch.setattr(grammar, "MAX_INPUTS", 3)
    ins = parse_instruction("@5 = gpu::concat(a, b, c, d, e) -> float_type, {10}, {1}")
    assert ins is not None and ins.inputs == ["a", "b", "c"] and ins.inputs_left_out == 2
    kept = parse_instruction("@6 = gpu::concat(a,b,c) -> float_type, {6}, {1}")
    assert kept is not None and kept.inputs == ["a", "b", "c"] and kept.inputs_left_out == 0
    path = tmp_path / "wide.txt"
    path.write_text("Running performance report ...\n"
                    "a = @param:a -> float_type, {2}, {1}: 0.001ms, 1%\n"
                    "@1 = gpu::concat(a,a,a,a,a) -> float_type, {10}, {1}: 1ms, 98%\n"
                    "@2 = gpu::relu(a) -> float_type, {2}, {1}: 0.01ms, 1%\n")
    trace = open_trace(path, use_cache=False)
    ops = trace.events.filter(pa.compute.equal(trace.events["kind"], "cpu_op"))
    shapes = dict(zip(ops["name"].to_pylist(), ops["shapes"].to_pylist()))
    assert shapes["gpu::concat"] is None and shapes["gpu::relu"] == "[[2],[2]]"
    warnings = {w["problem"]: w["count"] for w in trace.metadata["warnings"]}
    assert warnings["instructions with more than 3 operands: the rest are left out of their args, and they have no "
                    "shapes"] == 1
