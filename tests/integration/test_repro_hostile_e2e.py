"""Hostile and bad input for ``opscope repro``.

Traces are written here, Kineto-style, with hostile op names, ``Input type``, ``Input Dims``, ``Input Strides``,
``Concrete Inputs``, child-op and kernel names and file names. Every script written is parsed with ``ast``: outside
the header (comments only) and the case block, its text is the harness's own; in the case block every string
constant has a safe source (a registered op name, an overload, a dtype, a variant's change, a schema default) or is
a recorded name as a quoted literal, and the only calls are ``T(...)`` and ``float("inf"/"nan")``. Each script then
runs (``--variants none --budget 0.01 --no-check``) beside a canary: trace text that, executed, would create
``PWNED``; the file never appears. Bad input ends in a status per case or one line with exit 2, and nothing already
written changes.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.cli import run_cli_many
from support.timing import limit
from support.tracefiles import x

torch = pytest.importorskip("torch")


from opscope.repro import registry  # noqa: E402  (after the torch check: the registry asks torch)
from opscope.repro.script import MARKER, harness_parts  # noqa: E402
from opscope.repro.values import DTYPES, LAYOUTS, MEMORY_FORMATS  # noqa: E402
from opscope.repro.variants import CHANGES  # noqa: E402

#: C0 controls but newline, DEL and C1 controls: none may reach the terminal from trace text.
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CASE_NAMES = {"OP", "OVERLOAD", "DEVICE", "ARGS", "KWARGS", "TRACE_NS", "RECORDED_OPS", "RECORDED_KERNELS",
              "VARIANTS"}
TORCH_ATTRS = set(DTYPES) | set(MEMORY_FORMATS.values()) | set(LAYOUTS.values())
DEEP = "__DEEP__"  # replaced in the file's text by 500 nested lists (below the reader's limit of 512)
DEEPER = "__DEEPER__"  # 10,000 nested lists: the reader drops the event as hostile


def canary(where: Path) -> str:
    """Python that creates ``where/PWNED`` when executed."""
    return f"__import__('os').system('touch {where}/PWNED')"


def op(name: str, ts: float, dims, types, strides=None, concrete=None, dur: float = 10, **more) -> dict:
    args = {"Input Dims": dims, "Input type": types, **more}
    if strides is not None:
        args["Input Strides"] = strides
    if concrete is not None:
        args["Concrete Inputs"] = concrete
    return x(name, ts, dur, **args)


def write_raw(path: Path, events: list[dict]) -> Path:
    text = json.dumps({"schemaVersion": 1, "traceEvents": events})
    text = text.replace(f'"{DEEP}"', "[" * 500 + "]" * 500).replace(f'"{DEEPER}"', "[" * 10_000 + "]" * 10_000)
    path.write_text(text)
    return path


def add_args(ts: float, concrete: str, name: str = "aten::add", types=None, dims=None, strides=None) -> dict:
    """``aten::add(Tensor, Tensor, alpha)`` with one argument replaced."""
    return op(name, ts, dims if dims is not None else [[2, 3], [2, 3], []],
              types if types is not None else ["float", "float", "Scalar"],
              strides if strides is not None else [[3, 1], [3, 1], []], ["", "", concrete])


def hostile_cpu_events(where: Path) -> list[dict]:
    pwn = canary(where)
    names = [
        f'aten::add"); {pwn}; ("', "aten::add\nimport os", "aten::add\n" + pwn, "evil::x", "mylib::op",
        "aten::add\u2028" + pwn, "aten::mul\x00\x1b[31m\x9b\x85", "A" * 100_000, "aten::" + "a" * 100_000,
        "__import__('os')", "=cmd|' /C calc'!A0", pwn, "aten::add'''\"\"\"\\", "Conv2D\n" + pwn,
    ]
    events: list[dict] = [x("ProfilerStep#1", 0, 1_000_000, cat="user_annotation")]
    ts = 10.0
    for name in names:
        events.append(add_args(ts, "1", name=name))
        ts += 20
    concretes = [pwn, "1e309", "-1e309", "nan", "[1, 2, os]", "True; x", str(2**70), "-inf", "1\nimport os",
                 f"'); {pwn}; ('", "1\u2028" + pwn, "0x10", "1_000", "1" * 100_000, DEEP]
    for c in concretes:
        events.append(add_args(ts, c))
        ts += 20
    for types in (['float"); os', "float", "Scalar"], [pwn, "float", "Scalar"], ["float", "float", pwn],
                  ["float", "TensorList", "Scalar"], ["float", "float"]):
        events.append(add_args(ts, "1", types=types))
        ts += 20
    for dims, strides in (([[-2, 3], [2, 3], []], None), ([[2**70, 3], [2, 3], []], None),
                          ([[2, 3], [2, 3], []], [[-3, 1], [2**70, 1], []]), ([DEEP, [2, 3], []], None),
                          ([DEEPER, [2, 3], []], None), ([[2, 3], [2, 3]], None), ([[2, "3"], [2, 3], []], None),
                          ([[2, 3], [2, 3], []], [[3, 1, 7], "x", []])):
        events.append(add_args(ts, "1", dims=dims, strides=strides))
        ts += 20
    # a valid list argument beside hostile ones
    for dim in ("[1]", "[0, os]", pwn, "[" + ", ".join(["1"] * 5000) + "]", "[1, [2]]"):
        events.append(op("aten::sum", ts, [[2, 3], [], [], []], ["float", "ScalarList", "Scalar", ""],
                         [[3, 1], [], [], []], ["", dim, "False", ""]))
        ts += 20
    # valid ops whose children have hostile names (recorded child ops are written as quoted literals)
    events.append(op("aten::mm", ts, [[2, 3], [3, 4]], ["float", "float"], [[3, 1], [4, 1]], ["", ""], dur=100))
    for i, child in enumerate(["aten::resize_", "aten::x\nimport os", "aten::x\u2028y", "aten::" + "b" * 70_000]):
        events.append(op(child, ts + 1 + 10 * i, [], [], dur=5))
    ts += 200
    events.append(op("aten::mm", ts, [[4, 3], [3, 2]], ["float", "float"], [[3, 1], [2, 1]], ["", ""]))
    return events


def hostile_gpu_events(where: Path) -> list[dict]:
    """aten::mm launching kernels with hostile names (recorded kernels are written as quoted literals)."""
    pwn = canary(where)
    kernels = [f"void k<'\"\"\"'>()\n{pwn}", "sgemm\u2028" + pwn, "k\x00\x1b[2J\x9b", "K" * 100_000,
               "'''); " + pwn + "; ('''", "gemm\\"]
    events: list[dict] = [
        x("ProfilerStep#1", 0, 100_000, cat="user_annotation"),
        op("aten::mm", 100, [[64, 32], [32, 16]], ["float", "float"], [[32, 1], [16, 1]], ["", ""], dur=1000),
        op("evil::x\n" + pwn, 2000, [[2]], ["float"], [[1]], [""], dur=100),
    ]
    for i, k in enumerate(kernels):
        events.append(x("cudaLaunchKernel", 110 + 10 * i, 5, cat="cuda_runtime", correlation=i + 1))
        events.append(x(k, 200 + 100 * i, 50, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=i + 1))
    events.append(x("cudaLaunchKernel", 2010, 5, cat="cuda_runtime", correlation=99))
    events.append(x("k2", 2100, 50, cat="kernel", pid=0, tid=7, device=0, stream=7, correlation=99))
    return events


# --- writing ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict:
    """Both hostile traces written as reproducers (not run); the canary points at ``sandbox``."""
    root = tmp_path_factory.mktemp("hostile")
    sandbox = root / "sandbox"
    sandbox.mkdir()
    # a file name holding code (no "/": the canary in it touches PWNED in the working directory)
    cpu = write_raw(root / "t\n__import__('os').system('touch PWNED')\u2028'.json", hostile_cpu_events(sandbox))
    gpu = write_raw(root / "gpu.json", hostile_gpu_events(sandbox))
    out_cpu, out_gpu = root / "cpu-repro", root / "gpu-repro"
    results = run_cli_many([("repro", str(cpu), "--top", "0", "--no-run", "-o", str(out_cpu)),
                            ("repro", str(gpu), "--top", "0", "--no-run", "-o", str(out_gpu)),
                            ("repro", str(cpu), "--top", "0", "--no-run", "-o", str(root / "as-json"),
                             "--format", "json"),
                            ("repro", str(cpu), "--top", "0", "--no-run", "-o", str(root / "as-csv"),
                             "--format", "csv")],
                           cache=root / "cache")
    for res in results:
        assert res.returncode == 0, res.stderr
        assert "Traceback" not in res.stderr, res.stderr
    return {"root": root, "sandbox": sandbox, "cpu": cpu, "gpu": gpu, "out": [out_cpu, out_gpu],
            "table": results[0], "gpu_table": results[1], "json": results[2], "csv": results[3]}


def scripts(directory: Path) -> list[Path]:
    return sorted(directory.glob("case_*.py"))


def cases(directory: Path) -> list[dict]:
    return json.loads((directory / "cases.json").read_text())["cases"]


def test_every_hostile_case_has_a_readable_status_and_only_registered_ops_get_scripts(hostile):
    cpu_out, gpu_out = hostile["out"]
    entries = cases(cpu_out)
    by_status: dict[str, int] = {}
    for e in entries:
        status = e["status"]
        assert isinstance(status, str) and status and not CONTROL.search(status), e["id"]
        assert len(status) < 400, status[:400]  # one readable line, not a 64 KiB name
        by_status[status] = by_status.get(status, 0) + 1
        if e["script"] is not None:
            assert status == "not run"
            assert registry.OP_NAME.fullmatch(e["op"]) and registry.schemas(e["op"]) is not None, e["op"]
            assert (cpu_out / e["script"]).is_file()
        else:
            assert status != "not run"
    ops = {e["op"] for e in entries if e["script"]}
    assert ops == {"aten::add", "aten::sum", "aten::mm"}, ops
    # the hostile values themselves were not rebuilt: only ints, floats and lists that parse strictly
    rebuilt_alpha = [next(a["value"] for a in e["args"] if a["name"] == "alpha")
                     for e in entries if e["script"] and e["op"] == "aten::add"]
    assert all(type(v) in (int, float) or v in ("inf", "-inf", "nan") for v in rebuilt_alpha), rebuilt_alpha
    named = {e["op"][:20]: e["status"] for e in entries}
    assert "not registered" in named["evil::x"] and "not registered" in named["mylib::op"]
    assert "not a PyTorch op" in named["aten::add\nimport os"]
    # impossible sizes and strides are a damaged record (never rebuilt contiguous in their place); the 10,000-deep
    # record was dropped by the reader, the 500-deep one is a case that says it is damaged
    damaged = [e for e in entries if e["op"] == "aten::add" and e["concrete_inputs"] == ["", "", "1"]
               and (e["input_dims"][0] != [2, 3] or e["input_strides"][0] != [3, 1])
               and e["input_strides"][0] != [3, 1, 7]]  # strides of another rank: rebuilt contiguous, with a note
    assert len(damaged) == 5, [e["input_dims"] for e in damaged]
    assert all(e["status"].endswith("(a damaged record)") and e["script"] is None for e in damaged), damaged
    other_rank = next(e for e in entries if e["input_strides"] and e["input_strides"][0] == [3, 1, 7])
    assert other_rank["script"] and any("not one per dimension" in n for n in other_rank["notes"])
    assert len(entries) >= 40
    gpu = cases(gpu_out)
    mm = next(e for e in gpu if e["op"] == "aten::mm")
    assert mm["script"] and len(mm["recorded_kernels"]) == 6
    assert any(k.startswith("void k<") and "PWNED" in k for k in mm["recorded_kernels"])
    assert next(e for e in gpu if e["op"].startswith("evil::x"))["script"] is None


def _case_block(text: str) -> tuple[str, str]:
    """The script's header and case block; asserts that the rest is the harness's text unchanged."""
    before, after = harness_parts()
    header, found, rest = text.partition(before)
    assert found, "the harness prelude is not in the script unchanged"
    assert rest.startswith(MARKER + "\n")
    block, found, tail = rest[len(MARKER) + 1:].partition(after)
    assert found, "the harness functions are not in the script unchanged"
    assert tail == '\nif __name__ == "__main__":\n    sys.exit(main(globals()))\n'
    return header, block


def _schema_strings(op_name: str) -> tuple[set[str], set[str], set[str]]:
    """Overload names, argument names and string defaults of ``op_name``'s registered schemas."""
    found = registry.schemas(op_name) or []
    overloads = {s.overload for s in found}
    arguments = {a.name for s in found for a in s.arguments}
    defaults = {a.default for s in found for a in s.arguments if isinstance(a.default, str)}
    return overloads, arguments, defaults


def _check_value(node: ast.AST, defaults: set[str]) -> None:
    """A value of ARGS or KWARGS: literals, T(...), float("inf"/"-inf"/"nan"), torch.<dtype/format/layout>."""
    if isinstance(node, ast.Constant):
        assert node.value is None or type(node.value) in (bool, int, float) or node.value in defaults, \
            ast.dump(node)[:200]
    elif isinstance(node, ast.UnaryOp):
        assert isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)
        assert type(node.operand.value) in (int, float)
    elif isinstance(node, ast.List | ast.Tuple):
        for item in node.elts:
            _check_value(item, defaults)
    elif isinstance(node, ast.Attribute):
        assert isinstance(node.value, ast.Name) and node.value.id == "torch" and node.attr in TORCH_ATTRS
    elif isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name), ast.dump(node)[:200]
        if node.func.id == "float":
            assert not node.keywords and len(node.args) == 1
            arg = node.args[0]
            assert isinstance(arg, ast.Constant) and arg.value in ("inf", "-inf", "nan")
        else:
            assert node.func.id == "T", node.func.id
            size, stride, dtype = node.args
            for dims in (size, stride):
                assert isinstance(dims, ast.Tuple)
                assert all(isinstance(n, ast.Constant) and type(n.value) is int and n.value >= 0 for n in dims.elts)
            assert isinstance(dtype, ast.Constant) and dtype.value in DTYPES
            for kw in node.keywords:
                assert kw.arg == "high" and isinstance(kw.value, ast.Constant) and type(kw.value.value) is int
    else:
        raise AssertionError(f"unexpected node in a case's arguments: {ast.dump(node)[:200]}")


def check_script(path: Path, recorded_names: set[str]) -> None:
    text = path.read_text()
    header, block = _case_block(text)
    # (header) every line a comment: no raw newline from the trace; the file's last header line is blank
    lines = header.split("\n")
    assert lines[-2:] == ["", ""] and all(line.startswith("#") for line in lines[:-2]), header[:2000]
    assert header.splitlines() == header.split("\n")[:-1]  # no U+2028, \x0b, \x85... inside a line
    # the module parses, and its statements are the prelude's, the block's and the functions' (nothing spilled)
    module = ast.parse(text)
    before, after = harness_parts()
    parts = [ast.parse(before), ast.parse(block), ast.parse(after)]
    assert len(module.body) == sum(len(p.body) for p in parts) + 1
    first = len(parts[0].body)
    statements = module.body[first:first + len(parts[1].body)]
    assert ast.dump(ast.Module(body=statements, type_ignores=[])) == ast.dump(parts[1])
    seen: dict[str, ast.AST] = {}
    for stmt in statements:
        assert isinstance(stmt, ast.Assign) and len(stmt.targets) == 1, ast.dump(stmt)[:200]
        target = stmt.targets[0]
        assert isinstance(target, ast.Name) and target.id in CASE_NAMES and target.id not in seen
        seen[target.id] = stmt.value
    assert set(seen) == CASE_NAMES
    value = {k: v for k, v in seen.items() if isinstance(v, ast.Constant)}
    op_name = value["OP"].value
    assert isinstance(op_name, str) and registry.OP_NAME.fullmatch(op_name)
    overloads, arguments, defaults = _schema_strings(op_name)
    assert value["OVERLOAD"].value in overloads and IDENT.fullmatch(value["OVERLOAD"].value)
    assert value["DEVICE"].value in ("cpu", "cuda")
    assert type(value["TRACE_NS"].value) is int
    args, kwargs = seen["ARGS"], seen["KWARGS"]
    assert isinstance(args, ast.List) and isinstance(kwargs, ast.Dict)
    for node in args.elts:
        _check_value(node, defaults)
    for key, node in zip(kwargs.keys, kwargs.values):
        assert isinstance(key, ast.Constant) and key.value in arguments and IDENT.fullmatch(key.value)
        assert node is not None
        _check_value(node, defaults)
    for name in ("RECORDED_OPS", "RECORDED_KERNELS"):
        names = seen[name]
        assert isinstance(names, ast.List)
        for item in names.elts:  # any text, as a quoted literal; and the text the trace recorded
            assert isinstance(item, ast.Constant) and isinstance(item.value, str)
            assert item.value in recorded_names, item.value[:200]
    variants = seen["VARIANTS"]
    assert isinstance(variants, ast.Dict)
    for key, node in zip(variants.keys, variants.values):
        assert isinstance(key, ast.Constant) and isinstance(node, ast.Constant)
        if key.value.startswith("threads="):
            assert node.value == f"torch.set_num_threads({int(key.value.removeprefix('threads='))})"
        else:
            assert CHANGES[key.value] == node.value
    # (b) the only calls in the case block
    for node in ast.walk(ast.Module(body=statements, type_ignores=[])):
        if isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name) and node.func.id in ("T", "float"), ast.dump(node)[:200]
        assert not isinstance(node, ast.Lambda | ast.NamedExpr | ast.Subscript | ast.BinOp | ast.JoinedStr)


def _names_in(trace: Path) -> set[str]:
    names = set()
    for e in json.loads(trace.read_text().replace("[" * 10_000 + "]" * 10_000, "0"))["traceEvents"]:
        names.add(e["name"])
        names.add(e["name"][:65536])
    return names


def test_generated_scripts_carry_no_trace_text_unquoted(hostile):
    cpu_out, gpu_out = hostile["out"]
    for directory, trace in ((cpu_out, hostile["cpu"]), (gpu_out, hostile["gpu"])):
        found = scripts(directory)
        assert found
        recorded = _names_in(trace)
        for path in found:
            check_script(path, recorded)
    # the trace's name (newline, U+2028, quote and canary in it) reaches the header as one repr literal
    text = scripts(cpu_out)[0].read_text()
    assert f"# Trace:     {str(hostile['cpu'])!r}\n" in text
    mm = next(p for p in scripts(gpu_out) if "_mm" in p.name).read_text()
    assert "'void k<\\'\"\"\"\\'>()\\n__import__" in mm


def test_the_canary_would_fire_if_it_ran(tmp_path):
    # the check below means something only if the canary, executed, does create the file
    subprocess.run([sys.executable, "-c", canary(tmp_path)], check=True, timeout=limit(30))
    assert (tmp_path / "PWNED").exists()


def test_running_the_scripts_runs_torch_and_nothing_else(hostile):
    cpu_out, gpu_out = hostile["out"]
    sandbox = hostile["sandbox"]
    jobs = [(p, ["--device", "cpu"] if p.parent == gpu_out else []) for p in scripts(cpu_out) + scripts(gpu_out)]
    done = []
    for i in range(0, len(jobs), 2):  # two at a time: two cores
        procs = [subprocess.Popen([sys.executable, str(p), "--variants", "none", "--budget", "0.01", "--no-check",
                                   *extra], cwd=sandbox, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for p, extra in jobs[i:i + 2]]
        done += [(p, proc.communicate(timeout=limit(120)), proc.returncode) for p, proc in zip(jobs[i:i + 2], procs)]
    for (path, _), (out, err), code in done:
        assert "Traceback" not in err, (path.name, err)
        assert code in (0, 3), (path.name, code, err)
        assert "op: aten::" in out
    assert sum(code == 0 for *_, code in done) >= len(done) - 2
    assert not list(sandbox.iterdir()), list(sandbox.iterdir())
    for where in (hostile["root"], cpu_out, gpu_out, Path.cwd()):
        assert not (where / "PWNED").exists()


def test_terminal_json_and_csv_outputs_of_hostile_cases(hostile):
    for res in (hostile["table"], hostile["gpu_table"], hostile["json"], hostile["csv"]):
        assert not CONTROL.search(res.stdout), repr(CONTROL.search(res.stdout))
        assert not CONTROL.search(res.stderr), res.stderr[:500]
    assert "evil::x" in hostile["table"].stdout and "not registered" in hostile["table"].stdout
    document = json.loads(hostile["json"].stdout)  # one document (cases.json's entries), whatever the names hold
    assert isinstance(document, list) and len(document) >= 40
    as_json = json.dumps(document)
    assert "aten::add\\n" + "import os" in as_json  # the names as recorded, escaped by JSON
    rows = list(csv.DictReader(io.StringIO(hostile["csv"].stdout)))
    assert len(rows) >= 40
    for row in rows:
        for cell in row.values():
            assert not (cell or "").startswith(("=", "+", "-", "@")), cell[:80]
    assert any(r["op"].startswith("'=cmd") for r in rows)


# --- bad input ----------------------------------------------------------------------------------------------------


def one_line_error(res: subprocess.CompletedProcess, *words: str) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip("\n").splitlines()
    assert len(lines) == 1 and lines[0].startswith("opscope: error: "), res.stderr
    for word in words:
        assert word.lower() in lines[0].lower(), (word, lines[0])
    return lines[0]


def small_cpu_events(with_shapes: bool = True) -> list[dict]:
    events = [x("ProfilerStep#1", 0, 10_000, cat="user_annotation")]
    calls = [("aten::mm", [[8, 8], [8, 8]], ["float", "float"], [[8, 1], [8, 1]], ["", ""]),
             ("mylib::op", [[8]], ["float"], [[1]], [""]),
             ("aten::relu", [[16]], ["float"], [[1]], [""])]
    for i, (name, dims, types, strides, concrete) in enumerate(calls):
        if with_shapes:
            events.append(op(name, 100 + 1000 * i, dims, types, strides, concrete, dur=500 - 100 * i))
        else:
            events.append(x(name, 100 + 1000 * i, 500 - 100 * i))
    return events


def tree_bytes(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_no_shapes_unknown_op_bad_output_dirs_and_bad_traces(tmp_path):
    no_shapes = write_raw(tmp_path / "noshapes.json", small_cpu_events(with_shapes=False))
    mixed = write_raw(tmp_path / "mixed.json", small_cpu_events())
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_bytes(b"mine\x00\xff")
    (taken / "cases.json").write_text('{"schema": "opscope.repro/1", "cases": []}')
    before = tree_bytes(taken)
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated.json"
    truncated.write_text('{"schemaVersion": 1, "traceEv')
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"hello": [1, 2, 3]}')
    binary = tmp_path / "binary.json"
    binary.write_bytes(bytes(range(256)) * 4)
    commands = [
        ("repro", str(no_shapes), "-o", str(tmp_path / "r-noshapes")),
        ("repro", str(mixed), "-o", str(taken), "--budget", "0.01", "--variants", "none"),
        ("repro", str(mixed), "-o", str(a_file / "sub")),
        ("repro", str(mixed), "-o", "/proc/self/opscope-repro-out"),
        *[("repro", str(t), "-o", str(tmp_path / "never")) for t in (empty, truncated, wrong, binary,
                                                                      tmp_path / "missing.json")],
    ]
    results = run_cli_many(commands, cache=tmp_path / "cache")
    noshapes, ran, under_file, proc, *bad = results
    # no shapes: every case says so; the table, exit 0
    assert noshapes.returncode == 0 and "Traceback" not in noshapes.stderr, noshapes.stderr
    entries = cases(tmp_path / "r-noshapes")
    assert len(entries) == 3
    for e in entries:  # mylib::op: not registered here says more
        assert e["status"].startswith("recorded without input shapes" if e["op"] != "mylib::op" else "mylib::op is "
                                      "not registered"), e
    assert noshapes.stdout.count("recorded without input shapes") >= 3 or "record_shapes" in noshapes.stdout
    # an unknown op says so, the others run; an existing non-empty directory is left as it was, DIR-1 is used
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
    assert tree_bytes(taken) == before
    by_op = {e["op"]: e for e in cases(tmp_path / "taken-1")}
    assert "not registered" in by_op["mylib::op"]["status"]
    assert by_op["aten::mm"]["status"] == "ok" and by_op["aten::relu"]["status"] == "ok"
    assert by_op["aten::mm"]["replay_ns"] > 0
    # unwritable output: one line, exit 2
    one_line_error(under_file, str(a_file))
    one_line_error(proc, "/proc/self/opscope-repro-out")
    assert a_file.read_text() == "x"
    # empty, truncated, not a trace, missing: the readers' one-line errors
    for (args, res) in zip(commands[4:], bad):
        one_line_error(res, args[1])
    assert not (tmp_path / "never").exists()


def _script_calls(directory: Path) -> dict[int, str]:
    return {e["id"]: e["script"] for e in cases(directory) if e["script"]}


@pytest.fixture
def written(tmp_path) -> Path:
    """A repro directory of three CPU cases (written, not run)."""
    trace = write_raw(tmp_path / "t.json", [
        x("ProfilerStep#1", 0, 10_000, cat="user_annotation"),
        op("aten::mm", 100, [[8, 8], [8, 8]], ["float", "float"], [[8, 1], [8, 1]], ["", ""], dur=500),
        op("aten::relu", 1000, [[16]], ["float"], [[1]], [""], dur=400),
        op("aten::neg", 2000, [[16]], ["float"], [[1]], [""], dur=300),
        op("aten::abs", 3000, [[16]], ["float"], [[1]], [""], dur=200),
    ])
    (res,) = run_cli_many([("repro", str(trace), "--no-run", "-o", str(tmp_path / "r"))], cache=tmp_path / "cache")
    assert res.returncode == 0, res.stderr
    return tmp_path / "r"


def test_a_case_that_crashes_or_hangs_gets_a_status_and_the_others_run(written, tmp_path):
    names = _script_calls(written)
    assert len(names) == 4
    (written / names[2]).write_text("import os\nos._exit(9)\n")
    (written / names[3]).write_text("import time\ntime.sleep(1000)\n")
    (written / names[4]).write_text("raise ImportError('no module named torch_nonesuch')\n")
    fields = {e["id"]: set(e) for e in cases(written)}
    # the healthy case imports torch in a child: 15 s leaves room for a loaded machine (it timed out at 5 s once)
    (res,) = run_cli_many([("repro", "--run", str(written), "--timeout", "15", "--budget", "0.01", "--variants",
                            "none", "--format", "json")], cache=tmp_path / "cache")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    json.loads(res.stdout)
    after = {e["id"]: e for e in cases(written)}
    assert {i: set(e) for i, e in after.items()} == fields
    assert after[1]["status"] == "ok" and after[1]["replay_ns"] > 0
    assert after[2]["status"].startswith("crashed (exit 9)"), after[2]["status"]
    assert after[3]["status"].startswith("hung: "), after[3]["status"]
    assert after[4]["status"].startswith("crashed (exit 1)") and "torch_nonesuch" in after[4]["status"]
    assert not list(written.glob(".result-*")) and not list(written.glob(".cases-*"))


def test_run_refuses_damaged_directories_and_never_runs_a_script_outside(written, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    fired = tmp_path / "FIRED"
    payload = f"open({str(fired)!r}, 'w').write('x')\n"
    (outside / "case_01_x.py").write_text(payload)
    (tmp_path / "passwd.py").write_text(payload)
    no_cases = tmp_path / "no-cases"
    no_cases.mkdir()
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "cases.json").write_text('{"schema": "opscope.repro/1", "cases": [')
    not_ours = tmp_path / "not-ours"
    not_ours.mkdir()
    (not_ours / "cases.json").write_text('[1, 2]')
    document = json.loads((written / "cases.json").read_text())
    document["cases"][0]["script"] = "../outside/case_01_x.py"
    document["cases"][1]["script"] = str(outside / "case_01_x.py")
    document["cases"][2]["script"] = "../../../../../../../../etc/passwd"
    document["cases"][3]["script"] = "../passwd.py"
    document["cases"].append({**document["cases"][0], "id": 5, "script": ["case_01_mm.py"],
                              "op": "aten::mm\x1b[31m\x9b"})
    document["cases"].append({**document["cases"][0], "id": 6, "script": "case_01_x.py\n"})
    (written / "cases.json").write_text(json.dumps(document))
    before = (written / "cases.json").read_bytes()
    results = run_cli_many([("repro", "--run", str(d)) for d in (no_cases, corrupt, not_ours, tmp_path / "none")]
                           + [("repro", "--run", str(written), "--budget", "0.01", "--variants", "none")],
                           cache=tmp_path / "cache")
    *bad, escaped = results
    for d, res in zip((no_cases, corrupt, not_ours, tmp_path / "none"), bad):
        one_line_error(res, str(d))
    assert escaped.returncode == 0 and "Traceback" not in escaped.stderr, escaped.stderr
    assert not CONTROL.search(escaped.stdout) and not CONTROL.search(escaped.stderr)
    assert not fired.exists()
    after = json.loads((written / "cases.json").read_text())
    assert after == json.loads(before)  # nothing ran, nothing changed


def test_a_hostile_cases_json_op_name_never_reaches_the_terminal_raw(written, tmp_path):
    document = json.loads((written / "cases.json").read_text())
    first = document["cases"][0]
    first["op"] = "aten::mm\x1b]0;title\x07\x1b[31m\x9b\x85"
    first["status"] = "\x1b[2J"
    document["trace"] = "t\x1b[31m.json"
    document["notes"] = ["\x1b[5mblink"]
    for e in document["cases"][1:]:
        e["script"] = None
    (written / "cases.json").write_text(json.dumps(document))
    (res,) = run_cli_many([("repro", "--run", str(written), "--budget", "0.01", "--variants", "none")],
                          cache=tmp_path / "cache")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert not CONTROL.search(res.stdout), repr(res.stdout[:3000])
    assert not CONTROL.search(res.stderr), repr(res.stderr)
    assert cases(written)[0]["status"] == "ok"


def test_an_interrupted_run_keeps_cases_json_whole(written, tmp_path):
    # cases.json is replaced atomically after each case: a run killed in the middle leaves a valid document
    names = _script_calls(written)
    (written / names[2]).write_text("import time\ntime.sleep(1000)\n")
    env = {**os.environ, "OPSCOPE_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "opscope.cli", "repro", "--run", str(written), "--budget", "0.01",
                             "--variants", "none"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        start = time.monotonic()
        while time.monotonic() - start < 60:
            if cases(written)[0]["status"] != "not run":
                break
            time.sleep(0.2)
        entries = cases(written)
        assert entries[0]["status"] == "ok" and entries[1]["status"] == "not run"
    finally:
        os.killpg(proc.pid, 9)
        proc.communicate(timeout=limit(30))
    entries = cases(written)
    assert entries[0]["status"] == "ok" and all(e["status"] == "not run" for e in entries[1:])
