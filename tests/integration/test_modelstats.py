"""opscope model: per-module params, output shapes and FLOPs checked against hand-worked figures."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import OrderedDict

import pytest
from support.timing import limit

torch = pytest.importorskip("torch", reason="model statistics need the torch extra")
nn = torch.nn


from opscope.capture.demo_model import mobilenet_v2_mini  # noqa: E402
from opscope.capture.modelstats import model_stats, sort_stats  # noqa: E402
from opscope.cli import main  # noqa: E402

# torch.utils.flop_counter's convention, which these hand formulas follow: a multiply-add is 2 FLOPs,
# and the bias addition is NOT counted (neither for convolution nor for addmm, i.e. nn.Linear).


def conv_flops(n: int, cin: int, cout: int, groups: int, kh: int, kw: int, hout: int, wout: int) -> int:
    return 2 * cout * hout * wout * (cin // groups) * kh * kw * n


def linear_flops(n: int, fin: int, fout: int) -> int:
    return 2 * n * fin * fout


def out_size(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(OrderedDict(
            conv=nn.Conv2d(3, 8, 3, stride=1, padding=1, bias=True),
            act=nn.ReLU(),
            dw=nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, bias=False),  # depthwise
        ))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


def by_name(table) -> dict[str, dict]:
    return {r["module"]: r for r in table.to_pylist()}


def test_tiny_model_flops_params_shapes():
    model = Tiny()
    rows = by_name(model_stats(model, torch.randn(2, 3, 10, 12)))
    h2, w2 = out_size(10, 3, 2, 1), out_size(12, 3, 2, 1)  # 5, 6
    conv = conv_flops(2, 3, 8, 1, 3, 3, 10, 12)
    dw = conv_flops(2, 8, 8, 8, 3, 3, h2, w2)
    fc = linear_flops(2, 8, 5)
    assert rows["features.conv"]["flops"] == conv == 2 * 8 * 10 * 12 * 3 * 9 * 2
    assert rows["features.dw"]["flops"] == dw == 2 * 8 * 5 * 6 * 1 * 9 * 2
    assert rows["fc"]["flops"] == fc == 160
    assert rows["features"]["flops"] == conv + dw  # subtree total
    assert rows["(model)"]["flops"] == conv + dw + fc
    assert rows["features.act"]["flops"] == rows["pool"]["flops"] == 0
    assert rows["features.conv"]["flops_pct"] == round(100 * conv / (conv + dw + fc), 2)

    assert rows["features.conv"]["output_shape"] == "2x8x10x12"
    assert rows["features.dw"]["output_shape"] == f"2x8x{h2}x{w2}"
    assert rows["pool"]["output_shape"] == "2x8x1x1"
    assert rows["(model)"]["output_shape"] == rows["fc"]["output_shape"] == "2x5"

    assert rows["(model)"]["params"] == (3 * 8 * 9 + 8) + 8 * 9 + (8 * 5 + 5) == 341
    for name, mod in model.named_modules():
        row = rows[name or "(model)"]
        assert row["params"] == sum(p.numel() for p in mod.parameters())
        assert row["param_bytes"] == 4 * row["params"]
        assert row["depth"] == (name.count(".") + 1 if name else 0)
        assert row["type"] == type(mod).__name__
    assert list(rows) == ["(model)"] + [n for n, _ in model.named_modules()][1:]  # tree order


def test_max_depth_keeps_subtree_totals_and_sort():
    model = Tiny()
    table = model_stats(model, torch.randn(1, 3, 8, 8), max_depth=1)
    rows = by_name(table)
    assert list(rows) == ["(model)", "features", "pool", "fc"]
    assert rows["features"]["params"] == sum(p.numel() for p in model.features.parameters())
    assert rows["features"]["flops"] == conv_flops(1, 3, 8, 1, 3, 3, 8, 8) + conv_flops(1, 8, 8, 8, 3, 3, 4, 4)
    flops = sort_stats(table, "flops")["flops"].to_pylist()
    assert flops == sorted(flops, reverse=True)
    assert sort_stats(table, "name")["module"].to_pylist() == sorted(rows)


def test_demo_model_first_conv_depthwise_and_classifier():
    model = mobilenet_v2_mini()
    n, h = 2, 32
    rows = by_name(model_stats(model, torch.randn(n, 3, h, h)))
    stem = model.stem[0]
    ho = out_size(h, stem.kernel_size[0], stem.stride[0], stem.padding[0])
    assert ho == 16
    assert rows["stem.0"]["flops"] == conv_flops(n, 3, 16, 1, 3, 3, ho, ho)
    assert rows["stem.0"]["output_shape"] == f"{n}x16x{ho}x{ho}"
    dw = model.blocks[0].block[1][0]
    assert dw.groups == dw.in_channels == 16
    assert rows["blocks.0.block.1.0"]["flops"] == conv_flops(n, 16, 16, 16, 3, 3, ho, ho)
    assert rows["classifier"]["flops"] == linear_flops(n, 128, 10)
    assert rows["classifier"]["params"] == 128 * 10 + 10
    assert rows["(model)"]["params"] == sum(p.numel() for p in model.parameters())
    assert rows["(model)"]["output_shape"] == f"{n}x10"
    assert rows["(model)"]["flops_pct"] == 100.0


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """main() in this process (torch is already imported): exit code, stdout, stderr."""
    old = sys.argv
    sys.argv = ["opscope", *args]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    finally:
        sys.argv = old
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_json_keys_for_a_file_target(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # loading the file puts its folder on sys.path
    (tmp_path / "net.py").write_text(textwrap.dedent("""
        import torch
        def make():
            return torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 3))
    """))
    code, out, err = cli(capsys, "model", f"{tmp_path / 'net.py'}:make", "--input-shape", "5,6", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert set(rows[0]) == {"module", "depth", "type", "output_shape", "params", "param_bytes", "params_pct",
                            "flops", "flops_pct", "calls"}
    assert [(r["module"], r["flops"], r["output_shape"]) for r in rows] == [
        ("(model)", linear_flops(5, 6, 4) + linear_flops(5, 4, 3), "5x3"), ("0", linear_flops(5, 6, 4), "5x4"),
        ("1", 0, "5x4"), ("2", linear_flops(5, 4, 3), "5x3")]


def test_cli_demo_runs_as_a_command():
    res = subprocess.run([sys.executable, "-m", "opscope.cli", "model", "demo", "--input-shape", "2,3,32,32",
                          "--max-depth", "1", "--format", "csv"], capture_output=True, text=True, timeout=limit(120))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("module,depth,type,output_shape,params")
    assert [line.split(",")[0] for line in lines[1:]] == ["(model)", "stem", "blocks", "head", "pool", "classifier"]


@pytest.mark.parametrize(("target", "shape", "message"), [
    ("{tmp}/missing.py:make", "2,4", "missing.py: no such file"),
    ("{tmp}/net.py", "2,4", "give path/to/file.py:factory"),
    ("{tmp}/net.py:nope", "2,4", "has no 'nope'"),
    ("{tmp}/net.py:not_a_module", "2,4", "returned an object of type int, not a torch.nn.Module"),
    ("{tmp}/net.py:CONSTANT", "2,4", "not a callable factory"),
    ("no_such_package_xyz.models:make", "2,4", "cannot import module 'no_such_package_xyz.models'"),
    ("{tmp}/net.py:make", "2,x", "'x' is not an integer"),
    ("{tmp}/net.py:make", "2,0", "sizes must be positive (got 0)"),
    ("{tmp}/net.py:make", "2,-3", "sizes must be positive (got -3)"),
    ("{tmp}/net.py:make", "2,5", "the forward pass failed with input shape 2x5: RuntimeError"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, monkeypatch, target, shape, message):
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "net.py").write_text("import torch\nCONSTANT = 3\n"
                                     "def make():\n    return torch.nn.Linear(4, 2)\n"
                                     "def not_a_module():\n    return 7\n")
    code, _, err = cli(capsys, "model", target.format(tmp=tmp_path), "--input-shape", shape)
    assert code == 2
    assert err.startswith("opscope: error: ") and err.count("\n") == 1, err
    assert message in err


def test_cli_without_torch_says_so(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    code, _, err = cli(capsys, "model", "demo", "--input-shape", "1,3,8,8")
    assert code == 2 and err.count("\n") == 1
    assert "opscope model needs PyTorch" in err and "pip install" in err
