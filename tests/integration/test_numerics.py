"""opscope numerics: per-op output statistics, the first NaN/Inf, dumps and their diff."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from collections import OrderedDict
from pathlib import Path

import pyarrow as pa
import pytest
from support.timing import limit

torch = pytest.importorskip("torch", reason="the numerics recorder needs the torch extra")
np = pytest.importorskip("numpy")
nn = torch.nn


from opscope.analyses.numerics import DUMP_NAME, load_dump  # noqa: E402
from opscope.capture.numerics import fresh_dump_dir, record_numerics, save_dump  # noqa: E402
from opscope.diff.numerics import diff_dumps  # noqa: E402


class Sqrt(nn.Module):
    def forward(self, x):
        return torch.sqrt(x)  # NaN for every negative input


def poisoned_model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(OrderedDict(
        fc1=nn.Linear(4, 6), act=nn.ReLU(),
        head=nn.Sequential(OrderedDict(fc2=nn.Linear(6, 3), root=Sqrt())),
        out=nn.Linear(3, 2),
    ))
    with torch.no_grad():
        model.head.fc2.bias.fill_(-100.0)  # fc2's output is all negative, so sqrt makes NaN
    return model


def rows_of(table: pa.Table) -> list[dict]:
    return table.to_pylist()


def test_first_nonfinite_names_the_op_and_module():
    model = poisoned_model()
    x = torch.randn(5, 4)
    with record_numerics() as rec:
        model(x)
    bad = rec.first_nonfinite()
    assert bad is not None
    assert (bad["op"], bad["module"], bad["output_index"]) == ("aten::sqrt", "head.root", 0)
    assert bad["nan_count"] == 5 * 3 and bad["inf_count"] == 0
    rows = rows_of(rec.table())
    before = [r for r in rows if r["index"] < bad["index"]]
    assert before and all(r["nan_count"] == 0 and r["inf_count"] == 0 for r in before)
    assert {r["module"] for r in rows if r["op"] == "aten::addmm"} == {"fc1", "head.fc2", "out"}
    # The stats of sqrt's input equal fc2's output, computed here without the recorder.
    with torch.no_grad():
        fc2_out = model.head.fc2(model.act(model.fc1(x)))
    (given,) = bad["inputs"]
    assert given["shape"] == "5x3" and given["nan_count"] == 0 and given["inf_count"] == 0
    assert given["min"] == pytest.approx(fc2_out.min().item())
    assert given["max"] == pytest.approx(fc2_out.max().item())
    assert given["mean"] == pytest.approx(fc2_out.mean().item(), rel=1e-5)


def test_nan_injected_by_a_forward_pre_hook():
    model = poisoned_model()
    model.head.root = nn.Identity()  # no NaN from sqrt now: only the hook's
    mask = torch.ones(5, 3)
    mask[2, 1] = float("nan")
    model.out.register_forward_pre_hook(lambda mod, args: (args[0] * mask,))
    with record_numerics() as rec:
        model(torch.randn(5, 4))
    bad = rec.first_nonfinite()
    assert (bad["op"], bad["module"], bad["nan_count"]) == ("aten::mul", "out", 1)
    assert all(r["nan_count"] == 0 for r in rows_of(rec.table()) if r["index"] < bad["index"])


def test_stats_match_numpy():
    known = torch.tensor([[1.0, -2.0, float("nan")], [float("inf"), 3.5, 0.25]])
    big = torch.randn(7, 143)
    with record_numerics() as rec:
        known * 1.0
        big + 0.0
        torch.arange(10) * 3
        torch.ones(0, 3) * 2
    rows = rows_of(rec.table())
    assert [r["op"] for r in rows] == ["aten::mul", "aten::add", "aten::arange", "aten::mul", "aten::ones",
                                       "aten::mul"]
    small, large, ints, empty = rows[0], rows[1], rows[3], rows[5]

    finite = np.array([1.0, -2.0, 3.5, 0.25])  # tfdbg convention: stats of the finite values
    assert (small["nan_count"], small["inf_count"], small["numel"], small["shape"]) == (1, 1, 6, "2x3")
    assert small["min"] == -2.0 and small["max"] == 3.5
    assert small["mean"] == pytest.approx(finite.mean()) and small["std"] == pytest.approx(finite.std())
    assert small["first5"][:2] == [1.0, -2.0] and math.isnan(small["first5"][2]) and small["first5"][3] == math.inf
    assert small["last5"][0] == -2.0 and math.isnan(small["last5"][1])
    assert small["last5"][2:] == [math.inf, 3.5, 0.25]

    flat = big.numpy().astype(np.float64).reshape(-1)
    assert large["numel"] == 1001 and large["dtype"] == "float32"
    assert large["min"] == flat.min() and large["max"] == flat.max()
    assert large["mean"] == pytest.approx(flat.mean(), abs=1e-6) and large["std"] == pytest.approx(flat.std(), rel=1e-5)
    assert large["sample"] == [flat[j * 1001 // 64] for j in range(64)]
    assert large["first5"] == list(flat[:5]) and large["last5"] == list(flat[-5:])

    values = np.arange(10) * 3.0
    assert ints["dtype"] == "int64" and ints["mean"] == values.mean() and ints["std"] == pytest.approx(values.std())
    assert (empty["numel"], empty["min"], empty["std"], empty["nan_count"]) == (0, None, None, 0)


def test_inputs_are_taken_before_an_inplace_op_and_backward_has_no_module():
    x = torch.ones(4)
    lin = nn.Linear(4, 1)
    with record_numerics() as rec:
        x.mul_(2)
        lin(x.requires_grad_()).sum().backward()
    rows = rows_of(rec.table())
    mul = rows[0]
    assert mul["op"] == "aten::mul_" and mul["mean"] == 2.0 and mul["inputs"][0]["mean"] == 1.0
    assert any(r["backward"] for r in rows)
    assert all(r["module"] == "" for r in rows if r["backward"])
    assert {r["module"] for r in rows if r["op"] == "aten::addmm"} == {"Linear"}  # a root: its class name


def test_multi_output_ops_max_ops_and_uninitialized_memory():
    x = torch.randn(3, 4)
    with record_numerics(max_ops=3) as rec:
        values, indices = torch.max(x, dim=1)
        torch.empty(2)
        for _ in range(3):
            x + 1
        torch.log(-x.abs() - 1)  # NaN everywhere: kept although past max_ops
    rows = rows_of(rec.table())
    assert [(r["op"], r["output_index"], r["dtype"]) for r in rows[:2]] == [("aten::max", 0, "float32"),
                                                                              ("aten::max", 1, "int64")]
    assert rows[1]["max"] == indices.max().item() and rows[0]["max"] == values.max().item()
    assert rows[1]["inputs"] == [] and rows[0]["inputs"][0]["shape"] == "3x4"
    assert rows[2]["op"] == "aten::empty" and rows[2]["nan_count"] is None  # garbage memory is not judged
    # 3 adds, abs, neg and sub were dropped past max_ops; log's NaN output is kept.
    assert len(rows) == 4 and rows[3]["op"] == "aten::log" and rec.dropped == 6
    assert rec.first_nonfinite()["op"] == "aten::log"


def test_dump_roundtrip_and_fresh_dirs(tmp_path):
    with record_numerics() as rec:
        torch.ones(3) * 2
    path = rec.save(tmp_path / "d")
    assert path == tmp_path / "d" / DUMP_NAME
    assert load_dump(tmp_path / "d").to_pylist() == rec.table().to_pylist()
    assert fresh_dump_dir(tmp_path / "d") == (tmp_path / "d-1", True)
    assert fresh_dump_dir(tmp_path / "new") == (tmp_path / "new", False)


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opscope.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=limit(120))


SCRIPT = textwrap.dedent("""
    import sys, torch
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    y = model(torch.randn(4, 3))
    print("args", sys.argv[1:])
    sys.exit(int(sys.argv[1]))
""")


def test_cli_runs_a_script_and_passes_its_exit_code(tmp_path):
    (tmp_path / "prog.py").write_text(SCRIPT)
    res = run_cli("numerics", "--output", "out", "--format", "json", "--limit", "0", "--", "python", "prog.py", "5",
                  cwd=tmp_path)
    assert res.returncode == 5, res.stderr
    assert "args ['5']" in res.stderr  # the program's stdout goes to stderr when stdout holds JSON
    assert (tmp_path / "out" / DUMP_NAME).is_file()
    rows = json.loads(res.stdout)
    addmm = next(r for r in rows if r["op"] == "aten::addmm")
    torch.manual_seed(0)  # the same computation, here
    model = nn.Linear(3, 2)
    expected = model(torch.randn(4, 3)).detach()
    assert addmm["module"] == "Linear" and addmm["shape"] == "4x2"
    assert addmm["min"] == expected.min().item() and addmm["max"] == expected.max().item()
    assert "no NaN or Inf in any recorded output" in res.stderr


def test_cli_never_overwrites_a_dump_and_runs_modules(tmp_path):
    (tmp_path / "prog.py").write_text(SCRIPT)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / DUMP_NAME).write_bytes(b"earlier dump")
    res = run_cli("numerics", "--output", "out", "--limit", "0", "--", "python", "-m", "prog", "0", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out" / DUMP_NAME).read_bytes() == b"earlier dump"
    assert (tmp_path / "out-1" / DUMP_NAME).is_file()
    assert "args ['0']" in res.stdout and "aten::addmm" in res.stdout


def test_cli_missing_script_is_one_line_exit_2(tmp_path):
    res = run_cli("numerics", "--", "python", "missing.py", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr == "opscope: error: missing.py: no such script\n"
    assert not (tmp_path / "opscope-numerics").exists()


def perturbed(table: pa.Table, row: int, position: int, delta: float) -> pa.Table:
    rows = table.to_pylist()
    sample = list(rows[row]["sample"])
    sample[position] += delta
    rows[row]["sample"] = sample
    return pa.Table.from_pylist(rows, schema=table.schema)


def test_diff_reports_the_perturbed_op_first(tmp_path):
    model = poisoned_model()
    model.head.root = nn.Identity()
    with record_numerics() as rec:
        model(torch.randn(6, 4))
    a = rec.table()
    k = next(i for i, r in enumerate(a.to_pylist()) if r["op"] == "aten::addmm" and r["module"] == "head.fc2")
    original = a.to_pylist()[k]["sample"][3]
    b = perturbed(a, k, 3, 0.5)
    save_dump(a, tmp_path / "a")
    save_dump(b, tmp_path / "b")

    res = run_cli("numerics-diff", "a", "b/numerics.parquet", "--format", "json", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    rows = json.loads(res.stdout)
    assert [(r["index"], r["op"], r["module"]) for r in rows] == [(k, "aten::addmm", "head.fc2")]
    assert rows[0]["max_abs_err"] == pytest.approx(0.5)
    assert rows[0]["max_rel_err"] == pytest.approx(0.5 / abs(original))
    assert "first divergence: op aten::addmm in module head.fc2" in res.stderr

    same = run_cli("numerics-diff", "a", "a", "--format", "json", cwd=tmp_path)
    assert same.returncode == 0 and json.loads(same.stdout) == []

    # One op fewer in B: rows are aligned on the op sequence and the same op is found.
    shorter = pa.concat_tables([b.slice(0, 1), b.slice(2)])
    diff = diff_dumps(a, shorter)
    assert diff.matched_by == "sequence" and diff.unmatched_a == 1 and diff.unmatched_b == 0
    first = diff.first_divergence()
    assert (first["index"], first["index_b"], first["max_abs_err"]) == (k, k, pytest.approx(0.5))


def test_diff_flags_nonfinite_and_tolerance():
    with record_numerics() as rec:
        torch.tensor([1.0, 2.0, 3.0]) * 1.0
    a = rec.table()
    b = perturbed(a, 1, 0, 1e-6)  # within atol 1e-5
    assert diff_dumps(a, b).first_divergence() is None
    assert diff_dumps(a, b, rtol=0, atol=1e-7).first_divergence()["index"] == 1
    rows = a.to_pylist()
    rows[1]["nan_count"] = 1
    first = diff_dumps(a, pa.Table.from_pylist(rows, schema=a.schema)).first_divergence()
    assert first["nan_diff"] == 1 and first["index"] == 1


def test_diff_of_a_missing_dump_is_one_line(tmp_path):
    res = run_cli("numerics-diff", "nowhere", "nowhere", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr == "opscope: error: nowhere: no such file or directory\n"
