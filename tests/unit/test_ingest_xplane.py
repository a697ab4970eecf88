"""The XSpace reader on XSpace messages built here with the schema's message class; expected values by hand."""

from __future__ import annotations

import gzip
import json
import random
import zlib
from pathlib import Path

import pytest
from support.cli import assert_one_line_error, run_cli

from opscope.analyses.filters import EventFilter
from opscope.analyses.kernels import kernel_table
from opscope.analyses.links import link_table
from opscope.analyses.ops import op_table
from opscope.errors import TraceError
from opscope.ingest import open_trace
from opscope.ingest.registry import pick_reader, read_head
from opscope.ingest.xplane import READER, looks_like_xspace
from opscope.ingest.xplane.hlo import classes as hlo_classes
from opscope.ingest.xplane.reader import _tf_shapes, derived_line
from opscope.ingest.xplane.schema import classes

START = 1_700_000_000_000_000_000  # Task Environment's profile_start_time


class Plane:
    """Builds one XPlane: event and stat metadata are numbered as they are first named."""

    def __init__(self, space, name: str, plane_id: int = 0) -> None:
        self.p = space.planes.add(id=plane_id, name=name)
        self.events: dict[tuple[str, str], int] = {}
        self.stats: dict[str, int] = {}

    def stat_id(self, name: str) -> int:
        if name not in self.stats:
            self.stats[name] = len(self.stats) + 1
            self.p.stat_metadata[self.stats[name]].id = self.stats[name]
            self.p.stat_metadata[self.stats[name]].name = name
        return self.stats[name]

    def set_stat(self, target, name: str, value) -> None:
        stat = target.add(metadata_id=self.stat_id(name))
        if isinstance(value, tuple) and value[0] == "ref":
            stat.ref_value = self.stat_id(value[1])
        elif isinstance(value, str):
            stat.str_value = value
        elif isinstance(value, bytes):
            stat.bytes_value = value
        elif isinstance(value, float):
            stat.double_value = value
        elif value < 0:
            stat.int64_value = value
        else:
            stat.uint64_value = value

    def line(self, line_id: int, name: str, timestamp_ns: int = 0):
        return self.p.lines.add(id=line_id, name=name, timestamp_ns=timestamp_ns)

    def event(self, line, name: str, offset_ps: int, duration_ps: int, display: str = "", **stats) -> None:
        """An event; a stat whose name is not a Python name (``name``, taken by the event's) goes as ``stat_NAME``."""
        stats = {k.removeprefix("stat_"): v for k, v in stats.items()}
        key = (name, display)
        if key not in self.events:
            self.events[key] = len(self.events) + 1
            md = self.p.event_metadata[self.events[key]]
            md.id, md.name, md.display_name = self.events[key], name, display
        ev = line.events.add(metadata_id=self.events[key], offset_ps=offset_ps, duration_ps=duration_ps)
        for k, v in stats.items():
            self.set_stat(ev.stats, k, v)


def _space(environment: bool = True):
    space = classes()["XSpace"]()
    host = Plane(space, "/host:CPU")
    python = host.line(11, "python", timestamp_ns=1000)
    # train step 0 (root) from 1,000 ns + 1 us to + 101 us
    host.event(python, "train", 1_000_000, 100_000_000, step_num=0, _r=1)
    host.event(python, "$model.py:12 forward", 2_000_000, 50_000_000)
    pool = host.line(-22, "tf_Compute/-22", timestamp_ns=1000)
    host.event(pool, "model/dense/MatMul:MatMul", 10_000_000, 30_000_000, display="MatMul",
               shape="(float[4,8];float[8,2])")
    host.event(pool, "ThreadpoolListener::Region", 12_000_000, 5_000_000)  # TF runtime inside an op: op time
    host.event(pool, "model/relu:Relu", 45_000_000, 5_000_000, display="Relu")
    host.event(pool, "hipLaunchKernel", 20_000_000, 2_000_000, correlation_id=7, context_id="$$1")
    host.event(pool, "cudaLaunchKernel", 25_000_000, 1_000_000, correlation_id=7, context_id="$$2")
    host.event(pool, "MemoryAllocation", 30_000_000, 0, allocator_name="GPU_1_bfc", allocation_bytes=512,
               bytes_allocated=1536, bytes_reserved=0, addr=4096)
    host.event(pool, "MemoryDeallocation", 40_000_000, 0, allocator_name="GPU_1_bfc", allocation_bytes=512,
               bytes_allocated=1024, bytes_reserved=0, addr=4096)
    gpu = Plane(space, "/device:GPU:1", plane_id=1)
    for name, value in (("memory_size", 16 << 30), ("compute_cap_major", 8), ("compute_cap_minor", 6)):
        gpu.set_stat(gpu.p.stats, name, value)
    stream = gpu.line(7, "Stream #7(Kernel)", timestamp_ns=2000)
    gpu.event(stream, "gemm_kernel", 30_000_000, 4_000_000, correlation_id=7, context_id="$$1",
              kernel_details=("ref", "regs:32 grid:10,2,1 block:256,1,1"))
    gpu.event(stream, "relu_kernel", 35_000_000, 1_500_000, correlation_id=7, context_id="$$2")
    copies = gpu.line(8, "Stream #8(MemcpyH2D)", timestamp_ns=2000)
    gpu.event(copies, "MemcpyH2D", 40_000_000, 2_000_000)
    derived = gpu.line(-559038734, "TensorFlow Ops", timestamp_ns=2000)  # repeats the kernels
    gpu.event(derived, "model/dense/MatMul", 30_000_000, 4_000_000, display="MatMul")
    odd = gpu.line(0xDEADBEEF + 5, "Some Derived View", timestamp_ns=2000)  # derived by id only
    gpu.event(odd, "x", 30_000_000, 4_000_000)
    steps = gpu.line(-559038737, "Steps", timestamp_ns=2000)
    gpu.event(steps, "0", 29_000_000, 10_000_000)
    if environment:
        env = Plane(space, "Task Environment")
        env.set_stat(env.p.stats, "profile_start_time", START)
    return space


def _write(tmp_path: Path, space, name: str = "run.xplane.pb") -> Path:
    path = tmp_path / name
    path.write_bytes(space.SerializeToString())
    return path


def test_host_and_device_events_map_to_the_model(tmp_path):
    trace = open_trace(_write(tmp_path, _space()), use_cache=False)
    rows = trace.select(["kind", "name", "ts_ns", "dur_ns", "device", "stream", "correlation", "shapes",
                         "dtypes", "self_ns", "step"]).to_pylist()
    by = {r["name"]: r for r in rows}
    # host: line timestamp 1,000 ns + offset; the epoch added
    assert by["train"]["kind"] == "user_annotation" and by["train"]["ts_ns"] == START + 1000 + 1000
    assert by["model.py:12 forward"]["kind"] == "python"
    assert by["MatMul"]["kind"] == "cpu_op" and by["MatMul"]["dur_ns"] == 30_000
    assert by["MatMul"]["ts_ns"] == START + 1000 + 10_000
    assert json.loads(by["MatMul"]["shapes"]) == [[4, 8], [8, 2]]
    assert json.loads(by["MatMul"]["dtypes"]) == ["float", "float"]
    # XProf's self time: the TF runtime region inside MatMul is MatMul's own time
    assert by["MatMul"]["self_ns"] == 30_000
    assert by["ThreadpoolListener::Region"]["kind"] == "runtime"
    assert by["hipLaunchKernel"]["kind"] == "runtime" and by["cudaLaunchKernel"]["kind"] == "runtime"
    # device: kernels on device 1, stream 7; the copy on stream 8; derived lines skipped (no "x", one MatMul)
    assert (by["gemm_kernel"]["kind"], by["gemm_kernel"]["device"], by["gemm_kernel"]["stream"]) == ("kernel", 1, 7)
    assert by["gemm_kernel"]["ts_ns"] == START + 2000 + 30_000 and by["gemm_kernel"]["dur_ns"] == 4_000
    assert (by["MemcpyH2D"]["kind"], by["MemcpyH2D"]["stream"]) == ("memcpy", 8)
    assert "x" not in by and sum(r["name"] == "MatMul" for r in rows) == 1
    assert sum(r["kind"] in ("kernel", "memcpy") for r in rows) == 3
    # correlation 7 in two contexts: two different links
    assert by["gemm_kernel"]["correlation"] == by["hipLaunchKernel"]["correlation"]
    assert by["relu_kernel"]["correlation"] == by["cudaLaunchKernel"]["correlation"]
    assert by["gemm_kernel"]["correlation"] != by["relu_kernel"]["correlation"]
    names = trace.events["name"].to_pylist()
    links = {names[d]: names[ln] for d, ln in zip(link_table(trace)["device_row"].to_pylist(),
                                                 link_table(trace)["launch_row"].to_pylist()) if ln is not None}
    assert links == {"gemm_kernel": "hipLaunchKernel", "relu_kernel": "cudaLaunchKernel"}
    # the host step marker wins over the device Steps line: step 0 is "train"
    assert trace.steps.to_pylist()[0]["ts_ns"] == START + 2000 and trace.steps.to_pylist()[0]["dur_ns"] == 100_000
    assert by["gemm_kernel"]["step"] == 0
    assert trace.metadata["tool"] == "tensorflow" and trace.metadata["format"] == "xplane_pb"
    assert trace.metadata["device_properties"] == [
        {"id": 1, "name": "/device:GPU:1", "type": "GPU", "totalGlobalMem": 16 << 30, "computeMajor": 8,
         "computeMinor": 6}]
    warnings = {w["problem"]: w["count"] for w in trace.metadata["warnings"]}
    assert warnings == {"device events on lines XProf derived from the streams (skipped, not counted twice): "
                        "not mapped": 2}
    mem = trace.memory.to_pylist()
    assert [(m["bytes"], m["total_allocated"], m["device_type"], m["device_id"], m["addr"]) for m in mem] == [
        (512, 1536, 1, 1, 4096), (-512, 1024, 1, 1, 4096)]
    ops = {r["name"]: r for r in op_table(trace).to_pylist()}
    assert set(ops) == {"MatMul", "Relu"}


def test_args_keep_node_scope_and_kernel_details(tmp_path):
    trace = open_trace(_write(tmp_path, _space()), use_cache=False)
    names = trace.events["name"].to_pylist()
    args = {names[i]: json.loads(a) for i, a in zip(trace.args["event_id"].to_pylist(),
                                                     trace.args["args"].to_pylist()) if a}
    assert args["MatMul"]["node"] == "model/dense/MatMul" and args["MatMul"]["scope"] == "model/dense"
    assert args["gemm_kernel"]["grid"] == [10, 2, 1] and args["gemm_kernel"]["block"] == [256, 1, 1]
    assert args["gemm_kernel"]["kernel_details"] == "regs:32 grid:10,2,1 block:256,1,1"


def test_device_steps_line_when_the_host_marks_none(tmp_path):
    space = _space()
    python = space.planes[0].lines[0]
    for stat in python.events[0].stats:
        stat.metadata_id = 999  # unnamed: the train event no longer carries step_num
    trace = open_trace(_write(tmp_path, space), use_cache=False)
    assert [(s["step"], s["ts_ns"], s["dur_ns"]) for s in trace.steps.to_pylist()] == [(0, START + 2000 + 29_000,
                                                                                         10_000)]


def test_without_task_environment_times_stay_as_written(tmp_path):
    trace = open_trace(_write(tmp_path, _space(environment=False)), use_cache=False)
    assert min(trace.events["ts_ns"].to_pylist()) == 1000 + 1000
    assert "profile_start_time_ns" not in trace.metadata


def test_lines_already_on_the_epoch_are_not_shifted(tmp_path):
    space = _space()
    for plane in space.planes:
        for line in plane.lines:
            line.timestamp_ns += START
    trace = open_trace(_write(tmp_path, space), use_cache=False)
    assert min(trace.events["ts_ns"].to_pylist()) == START + 1000 + 1000


def test_sub_nanosecond_times_are_rounded_down_and_said(tmp_path):
    space = classes()["XSpace"]()
    host = Plane(space, "/host:CPU")
    line = host.line(1, "main")
    host.event(line, "step", 1_500, 2_700)
    trace = open_trace(_write(tmp_path, space), use_cache=False)
    assert trace.select(["ts_ns", "dur_ns"]).to_pylist() == [{"ts_ns": 1, "dur_ns": 2}]
    assert any("fraction of a nanosecond" in w["problem"] for w in trace.metadata["warnings"])


def test_xla_ops_run_on_the_host_are_ops(tmp_path):
    """JAX on CPU (recorded with jax 0.10.2): XLA runs each HLO instruction on a host thread, with hlo_op stats."""
    space = classes()["XSpace"]()
    meta = Plane(space, "/host:metadata")
    meta.set_stat(meta.p.stats, "jax_version", "0.10.2")
    host = Plane(space, "/host:CPU")
    line = host.line(5, "tf_XLAPjRtCpuClient/5")
    host.event(line, "dot.3", 0, 7_000, hlo_op=("ref", "dot.3"), hlo_module=("ref", "jit_step"))
    host.event(line, "dot.4", 10_000, 3_000, hlo_op=("ref", "dot.4"), hlo_module=("ref", "jit_step"))
    host.event(line, "ynn_fusion", 20_000, 5_000, hlo_op=("ref", "ynn_fusion"), hlo_module=("ref", "jit_step"))
    host.event(line, "TaskDispatcher::dispatch", 30_000, 1_000)
    trace = open_trace(_write(tmp_path, space), use_cache=False)
    assert trace.metadata["tool"] == "jax" and trace.metadata["jax_version"] == "0.10.2"
    assert {r["name"]: (r["calls"], r["self_ns"]) for r in op_table(trace).to_pylist()} == {
        "dot": (2, 10), "ynn_fusion": (1, 5)}
    assert trace.select(["kind"]).to_pylist()[-1] == {"kind": "user_annotation"}


def test_jax_kernels_on_a_gpu_have_their_hlo_op(tmp_path):
    """JAX on a GPU (the layout of a JAX MI300 xplane): no host event encloses a launch, the launch names its HLO op
    in its stats, and the kernel links to the launch by correlation: the kernel's op is that HLO op."""
    space = classes()["XSpace"]()
    host = Plane(space, "/host:CPU")
    line = host.line(583, "py_xla_execute")
    host.event(line, "hipModuleLaunchKernel", 1_000_000, 2_000_000, correlation_id=5, hlo_op=("ref", "fusion.3"),
               hlo_module=("ref", "jit_step"), stat_name=("ref", "jit(step)/mul"))
    host.event(line, "hipModuleLaunchKernel", 4_000_000, 1_000_000, correlation_id=6, hlo_op=("ref", "cudnn-conv.1"),
               hlo_module=("ref", "jit_step"))
    host.event(line, "hipMemcpyDtoDAsync", 6_000_000, 1_000_000, correlation_id=7)  # names no op
    gpu = Plane(space, "/device:GPU:0", plane_id=1)
    stream = gpu.line(16, "Stream #16(Kernel)")
    gpu.event(stream, "fusion_3.kd", 10_000_000, 7_000_000, correlation_id=5)
    gpu.event(stream, "conv_kernel.kd", 20_000_000, 5_000_000, correlation_id=6)
    gpu.event(stream, "__amd_rocclr_copyBuffer.kd", 30_000_000, 3_000_000, correlation_id=7)
    trace = open_trace(_write(tmp_path, space), use_cache=False)
    rows = {(r["op"], r["name"], r["kind"]): r["total_ns"] for r in kernel_table(trace, by_op=True).to_pylist()}
    # the ops are the HLO instructions without their number, as on a CPU; the copy is a copy and names no op
    assert rows == {("fusion", "fusion_3.kd", "kernel"): 7_000, ("cudnn-conv", "conv_kernel.kd", "kernel"): 5_000,
                    ("(no launching op)", "__amd_rocclr_copyBuffer.kd", "memcpy"): 3_000}
    ops = {r["name"]: r["calls"] for r in op_table(trace, filt=EventFilter(kinds=("cpu_op",))).to_pylist()}
    assert ops == {"fusion": 1, "cudnn-conv": 1}
    assert any(w["problem"].startswith("XLA ops made from their launches' hlo_op stat") and w["count"] == 2
               for w in trace.warnings)


# -- XLA programs (/host:metadata HLO protos) ------------------------------------------------------------------

def _hlo_module() -> bytes:
    """An HloProto, program jit_step: a fusion (kOutput) whose fused computation holds a dot, and a cuDNN forward
    convolution custom-call, in the entry computation."""
    hlo = hlo_classes()
    proto = hlo["HloProto"]()
    module = proto.hlo_module
    module.name, module.entry_computation_name, module.id = "jit_step", "main", 7

    def add(computation, ins_id, name, opcode, dtype, dims, operands=(), **fields):
        ins = computation.instructions.add(id=ins_id, name=name, opcode=opcode, operand_ids=list(operands))
        if dtype == 13:  # a tuple: dims are its members (type, dims)
            ins.shape.element_type = 13
            for t, d in dims:
                ins.shape.tuple_shapes.add(element_type=t, dimensions=d)
        else:
            ins.shape.element_type, ins.shape.dimensions[:] = dtype, dims
        for key, value in fields.items():
            if key == "window":
                for size in value:
                    ins.window.dimensions.add(size=size, stride=1, window_dilation=1, base_dilation=1)
            elif key == "conv":
                ins.convolution_dimension_numbers.CopyFrom(hlo["ConvolutionDimensionNumbers"](**value))
            elif key == "dot":
                ins.dot_dimension_numbers.CopyFrom(hlo["DotDimensionNumbers"](**value))
            elif key == "called":
                ins.called_computation_ids[:] = value
            else:
                setattr(ins, key, value)
        return ins

    f32, u8 = 11, 6
    fused = module.computations.add(name="fused_dot", id=2, is_fusion_computation=True)
    add(fused, 20, "p0", "parameter", f32, [8, 16])
    add(fused, 21, "p1", "parameter", f32, [16, 32])
    add(fused, 22, "dot.1", "dot", f32, [8, 32], (20, 21),
        dot={"lhs_contracting_dimensions": [1], "rhs_contracting_dimensions": [0]})
    main = module.computations.add(name="main", id=1)
    add(main, 10, "a", "parameter", f32, [8, 16])
    add(main, 11, "b", "parameter", f32, [16, 32])
    add(main, 12, "fusion.3", "fusion", f32, [8, 32], (10, 11), fusion_kind="kOutput", called=[2])
    add(main, 14, "c", "parameter", f32, [2, 8, 10, 10])
    add(main, 15, "d", "parameter", f32, [16, 8, 3, 3])
    add(main, 16, "cudnn-conv.1", "custom-call", 13, [(f32, [2, 16, 8, 8]), (u8, [64])], (14, 15),
        window=(3, 3), custom_call_target="__cudnn$convForward",
        conv={"input_batch_dimension": 0, "input_feature_dimension": 1, "input_spatial_dimensions": [2, 3],
              "kernel_output_feature_dimension": 0, "kernel_input_feature_dimension": 1,
              "kernel_spatial_dimensions": [2, 3], "output_batch_dimension": 0, "output_feature_dimension": 1,
              "output_spatial_dimensions": [2, 3]})
    return proto.SerializeToString()


def _xla_gpu_space(protos: dict[int, bytes]):
    """JAX on a GPU as the MI300 xplane lays it out: the programs in /host:metadata; the launches on the runtime
    tracer's line, XLA's annotations (one per execution of an instruction) on the executing thread's own line."""
    space = classes()["XSpace"]()
    meta = Plane(space, "/host:metadata")
    for program, data in protos.items():
        md = meta.p.event_metadata[program]
        md.id, md.name = program, f"jit_step({program})"
        meta.set_stat(md.stats, "Hlo Proto", data)
    host = Plane(space, "/host:CPU")
    launches = host.line(583, "Host Threads/583")
    thunks = host.line(-77, "py_xla_execute/-77")
    step = {"hlo_module": ("ref", "jit_step"), "program_id": 7}
    us = 1_000_000  # ps
    host.event(launches, "hipModuleLaunchKernel", 1 * us, us, correlation_id=5, hlo_op=("ref", "fusion.3"), **step)
    for corr, at in ((6, 4), (7, 6), (8, 20), (9, 30), (10, 32)):  # the conv's launches
        host.event(launches, "hipExtModuleLaunchKernel", at * us, us, correlation_id=corr,
                   hlo_op=("ref", "cudnn-conv.1"), **step)
    host.event(launches, "hipModuleLaunchKernel", 40 * us, us, correlation_id=11, hlo_op=("ref", "fusion.3"),
               hlo_module=("ref", "jit_other"), program_id=99)  # a program the file does not hold
    host.event(thunks, "cudnn-conv.1", 3 * us, 5 * us)  # one execution: the launches at 4 and 6 us
    host.event(thunks, "cudnn-conv.1", 19 * us, 3 * us)  # another: the launch at 20 us
    gpu = Plane(space, "/device:GPU:0", plane_id=1)
    stream = gpu.line(16, "Stream #16(Kernel)")
    for corr in range(5, 12):
        gpu.event(stream, f"kernel_{corr}.kd", (100 + 10 * corr) * us, 2 * us, correlation_id=corr)
    return space


def test_xla_ops_get_their_instruction_record_from_the_program(tmp_path):
    trace = open_trace(_write(tmp_path, _xla_gpu_space({7: _hlo_module()})), use_cache=False)
    ops = [r for r in trace.select(["kind", "name", "ts_ns", "dur_ns", "shapes", "dtypes", "concrete_inputs",
                                    "output_shapes"]).to_pylist() if r["kind"] == "cpu_op"]
    fusion = next(r for r in ops if r["name"] == "fusion" and r["shapes"])
    assert (fusion["shapes"], fusion["dtypes"], fusion["output_shapes"]) == ("[[8,16],[16,32]]", '["f32", "f32"]',
                                                                             "[[8,32]]")
    assert json.loads(fusion["concrete_inputs"]) == [
        "f32[8,32] fusion(f32[8,16], f32[16,32]), kind=kOutput\n"
        "  f32[8,32] dot(f32[8,16], f32[16,32]), lhs_contracting_dims={1}, rhs_contracting_dims={0}"]
    conv = [r for r in ops if r["name"] == "cudnn-conv"]
    assert conv[0]["output_shapes"] == "[[2,16,8,8],[64]]"  # the tuple's members: the output, the scratch buffer
    assert json.loads(conv[0]["concrete_inputs"]) == [
        "(f32[2,16,8,8], u8[64]) custom-call(f32[2,8,10,10], f32[16,8,3,3]), window={size=3x3}, "
        'dim_labels=bf01_oi01->bf01, custom_call_target="__cudnn$convForward"']
    # the program jit_other is not in the file: its op has no record
    assert [r["shapes"] for r in ops if r["name"] == "fusion"].count(None) == 1
    assert not any("HLO protos" in w["problem"] for w in trace.warnings)


def test_the_launches_of_one_execution_share_one_op(tmp_path):
    trace = open_trace(_write(tmp_path, _xla_gpu_space({7: _hlo_module()})), use_cache=False)
    start = trace.metadata.get("profile_start_time_ns", 0)
    conv = [(r["ts_ns"] - start, r["dur_ns"]) for r in trace.select(["kind", "name", "ts_ns", "dur_ns"]).to_pylist()
            if r["kind"] == "cpu_op" and r["name"] == "cudnn-conv"]
    # 4 and 6 us: one annotation spans both (one op, 4 to 7 us); 20 us: its own; 30 and 32 us: no annotation
    assert conv == [(4_000, 3_000), (20_000, 1_000), (30_000, 1_000), (32_000, 1_000)]
    rows = kernel_table(trace, by_op=True).to_pylist()
    assert {r["op"] for r in rows} == {"fusion", "cudnn-conv"}  # every kernel has its op
    assert any(w["problem"].startswith("XLA ops made from their launches' hlo_op stat") and w["count"] == 6
               for w in trace.warnings)
    # the roofline counts the convolution's work once per execution: 4 calls for 5 kernels
    from opscope.analyses.roofline import roofline_table

    table, notes = roofline_table(trace, None)
    calls = {r["name"]: r["calls"] for r in table.to_pylist()}
    assert calls == {"cudnn-conv": 4, "fusion": 1}
    assert notes[0].startswith("ops with a work model hold 85.7% of the device time")  # 6 of the 7 kernels


def test_an_hlo_proto_that_does_not_decode_is_said(tmp_path):
    trace = open_trace(_write(tmp_path, _xla_gpu_space({7: b"\xff\xff\xff not a proto"})), use_cache=False)
    assert not any(r["shapes"] for r in trace.select(["kind", "shapes"]).to_pylist() if r["kind"] == "cpu_op")
    assert any(w["problem"].startswith("HLO protos that do not decode") and w["count"] == 1 for w in trace.warnings)


def test_hostile_hlo_protos_give_no_record_and_no_blowup():
    """A fusion calling its own computation, a thousand of them (a cycle searched naively is 1000^4 visits), a tuple
    nested past the bound, an operand that is not in the computation: each op gets no record or a bounded one."""
    from opscope.ingest.xplane.hlo import HloModules

    hlo = hlo_classes()
    proto = hlo["HloProto"]()
    proto.hlo_module.name = "evil"
    loop = proto.hlo_module.computations.add(name="loop", id=1)
    for i in range(1000):
        ins = loop.instructions.add(id=i, name=f"fusion.{i}", opcode="fusion", called_computation_ids=[1])
        ins.shape.element_type, ins.shape.dimensions[:] = 11, [4]
    deep = loop.instructions.add(id=5000, name="deep", opcode="tuple")
    shape = deep.shape
    for _ in range(10):
        shape.element_type = 13
        shape = shape.tuple_shapes.add()
    shape.element_type = 11
    orphan = loop.instructions.add(id=5001, name="orphan", opcode="add", operand_ids=[9999, 9998])
    orphan.shape.element_type = 11
    modules = HloModules()
    assert modules.add(3, proto.SerializeToString())
    shapes, dtypes, concrete, outputs = modules.record("fusion.7", "evil")
    assert (shapes, dtypes, json.loads(concrete), outputs) == ("[]", "[]", ["f32[4] fusion()"], "[[4]]")
    assert modules.record("deep", program_id=3) == (None, None, None, None)
    assert modules.record("orphan", program_id=3) == (None, None, None, None)
    assert modules.record("fusion.7", "evil", program_id=4) == modules.record("fusion.7", "evil")  # by name
    assert not modules.add(4, b"\x0a\xff\xff\xff\xff\x0f") and not modules.add(5, b"")


def test_tf_shapes_keep_placeholders_and_say_when_absent(tmp_path):
    assert _tf_shapes("(;float[16])") == ('[[],[16]]', '["", "float"]')
    assert _tf_shapes("()") == ("[]", "[]")
    assert _tf_shapes("(float[2,x])") == (None, None)
    # one op with its shapes (the MatMul): the profile recorded them, an op without is one without inputs
    assert not any("input shapes" in w["problem"] for w in open_trace(_write(tmp_path, _space()),
                                                                      use_cache=False).warnings)
    space = classes()["XSpace"]()
    host = Plane(space, "/host:CPU")
    pool = host.line(1, "tf_Compute/1")
    host.event(pool, "model/dense/MatMul:MatMul", 1_000_000, 1_000_000, display="MatMul")
    host.event(pool, "model/relu:Relu", 3_000_000, 1_000_000, display="Relu")
    trace = open_trace(_write(tmp_path, space, "bare.xplane.pb"), use_cache=False)
    assert any(w["problem"].startswith("TensorFlow ops, none recorded with its input shapes") and w["count"] == 2
               for w in trace.warnings)


def test_gzip_xplane_reads_the_same(tmp_path):
    data = _space().SerializeToString()
    path = tmp_path / "run.xplane.pb.gz"
    path.write_bytes(gzip.compress(data))
    assert pick_reader(path).name == "xplane_pb"
    plain = open_trace(_write(tmp_path, _space()), use_cache=False)
    zipped = open_trace(path, use_cache=False)
    assert zipped.events.select(["name", "ts_ns", "dur_ns"]).equals(plain.events.select(["name", "ts_ns", "dur_ns"]))


def test_a_cut_gzip_keeps_the_planes_before_the_cut(tmp_path):
    space = _space()
    # deterministic: map entries (the planes' metadata) in key order, so the host plane's bytes open the file
    data = space.SerializeToString(deterministic=True)
    host_only = classes()["XSpace"](planes=[space.planes[0]]).SerializeToString(deterministic=True)
    assert data.startswith(host_only)
    packed = gzip.compress(data)
    # the shortest cut of the gzip file that inflates to the whole host plane and less than the whole file
    keep = next(k for k in range(10, len(packed)) if len(zlib.decompressobj(31).decompress(packed[:k])) >=
                len(host_only))
    assert len(zlib.decompressobj(31).decompress(packed[:keep])) < len(data)
    path = tmp_path / "cut.xplane.pb.gz"
    path.write_bytes(packed[:keep])
    trace = open_trace(path, use_cache=False)
    assert "MatMul" in trace.events["name"].to_pylist() and "gemm_kernel" not in trace.events["name"].to_pylist()
    assert trace.metadata.get("truncated") is True
    assert any(w["problem"].startswith("file is truncated") for w in trace.metadata["warnings"])


# -- sniffing -----------------------------------------------------------------------------------------------

def test_sniff_takes_xspaces_by_content(tmp_path):
    assert looks_like_xspace(_space().SerializeToString())
    space = classes()["XSpace"]()
    space.planes.add(id=5, name="/device:GPU:5")  # a plane with an id is written "08 05 12 ..."
    data = space.SerializeToString()
    assert data[2:4] == b"\x08\x05" and looks_like_xspace(data)
    env_first = classes()["XSpace"]()
    env_first.planes.add(name="Task Environment")
    assert looks_like_xspace(env_first.SerializeToString())
    path = tmp_path / "no_suffix.bin"
    path.write_bytes(data)
    assert READER.sniff(path, read_head(path))


def test_sniff_refuses_other_bytes():
    rng = random.Random(17)
    for _ in range(2000):
        head = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        assert not looks_like_xspace(head), head
    other_plane = classes()["XSpace"]()
    other_plane.planes.add(name="something else")
    assert not looks_like_xspace(other_plane.SerializeToString())
    line = classes()["XLine"](id=3, name="/host:CPU")  # a protobuf of another message
    assert not looks_like_xspace(line.SerializeToString())
    assert not looks_like_xspace(b'{"traceEvents": []}')
    assert not looks_like_xspace(b"\x08\x07\x12\x04onnx")  # an ONNX model's head (ir_version, producer)
    assert not looks_like_xspace(b"\x0a\x00")
    assert not looks_like_xspace(b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x12")


def test_derived_line_ids():
    assert derived_line(-559038737, "") and derived_line(-559038734, "") and derived_line(0xDEADBEEF + 3, "")
    assert derived_line(12, "XLA Modules") and not derived_line(12, "Stream #12(Kernel)")
    assert not derived_line(0, "") and not derived_line(-1, "")


# -- bad input ----------------------------------------------------------------------------------------------

def test_truncated_everywhere_is_a_one_line_error_or_the_whole_planes(tmp_path):
    space = _space()
    data = space.SerializeToString()
    host_end = len(classes()["XSpace"](planes=[space.planes[0]]).SerializeToString())  # where the host plane ends
    recovered = 0
    for cut in range(3, len(data) - 1, max(1, len(data) // 40)):
        path = tmp_path / f"cut{cut}.xplane.pb"
        path.write_bytes(data[:cut])
        try:
            trace = open_trace(path, use_cache=False)
        except TraceError as exc:
            assert str(path) in str(exc) and "\n" not in str(exc)
            continue
        # only a cut after the whole host plane recovers anything, and it says so
        assert cut >= host_end
        assert any("damaged" in w["problem"] for w in trace.metadata["warnings"])
        assert trace.metadata["truncated"] is True
        recovered += 1
    assert recovered  # some cuts fell after the host plane


def test_bad_files_exit_2_with_one_line(tmp_path, cache):
    data = _space().SerializeToString()
    cases = {
        "corrupt": data[:20] + b"\xff" * (len(data) - 20),
        "cut": data[: len(data) // 3],
        "empty_plane": classes()["XSpace"](planes=[classes()["XPlane"](name="/host:CPU")]).SerializeToString(),
        "hostnames_only": classes()["XSpace"](hostnames=["vm"]).SerializeToString(),
        "random": bytes(random.Random(3).randrange(256) for _ in range(4096)),
    }
    for name, content in cases.items():
        path = tmp_path / f"{name}.xplane.pb"
        path.write_bytes(content)
        res = run_cli("summary", str(path), cache=cache)
        assert_one_line_error(res, path)


def test_a_corrupt_line_is_skipped_and_said(tmp_path, cache):
    space = _space()
    data = space.SerializeToString()
    line = space.planes[1].lines[1].SerializeToString()  # the copy stream of /device:GPU:1
    at = data.index(line)
    path = tmp_path / "corrupt.xplane.pb"
    path.write_bytes(data[:at + 2] + b"\xff" * (len(line) - 2) + data[at + len(line):])
    trace = open_trace(path, use_cache=False)
    names = trace.events["name"].to_pylist()
    assert "MemcpyH2D" not in names and "gemm_kernel" in names and "MatMul" in names
    warnings = {w["problem"]: w["count"] for w in trace.metadata["warnings"]}
    assert warnings["file is truncated or corrupt: planes or lines whose bytes do not decode (skipped)"] == 1
    res = run_cli("summary", str(path), cache=cache)
    assert res.returncode == 0 and "truncated or corrupt" in res.stderr


def test_an_empty_plane_says_no_events(tmp_path):
    path = tmp_path / "empty.xplane.pb"
    path.write_bytes(classes()["XSpace"](planes=[classes()["XPlane"](name="/host:CPU")]).SerializeToString())
    with pytest.raises(TraceError, match="no events"):
        open_trace(path, use_cache=False)
