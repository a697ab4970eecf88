"""Start-up: ``opscope --help`` and every ``opscope CMD --help`` import typer and opscope's command modules, and
none of pyarrow, numpy, duckdb, pydantic, rich, the model, the analyses or the renderers; a command served from
the cache does not import pydantic (typer's value conversion, see opscope.runtime.typer_values). Checked in fresh
processes through sys.modules; no timing here (bench/startup.py measures it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import typer.main
from support.timing import limit
from support.tracefiles import small_gpu_trace, write_trace

from opscope.cli import app

SRC = str(Path(__file__).resolve().parents[2] / "src")
COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
#: what --help must not load: the data stack, the model and everything above it
HEAVY = ("pyarrow", "numpy", "duckdb", "pydantic", "rich", "msgspec", "jinja2", "torch", "opscope.model",
         "opscope.ingest", "opscope.analyses", "opscope.render", "opscope.advise", "opscope.diff", "opscope.query")

#: runs the CLI's main once per argv in this process, then prints the names of the modules loaded (the command's own
#: process ends at the end of main without the interpreter's teardown: here its exit is raised, to go on)
RUN_MAIN = """\
import json, sys
from opscope import runtime
from opscope.cli import main
def exit_raised(code):
    raise SystemExit(code)
runtime.exit_command = exit_raised
results = []
for argv in json.loads(sys.argv[1]):
    sys.argv = ["opscope", *argv]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    results.append(code)
sys.stdout.flush()
print("\\n" + json.dumps({"codes": results, "modules": sorted(k for k, v in sys.modules.items() if v is not None)}))
"""


def run_main(*argvs: list[str], env: dict[str, str] | None = None,
             command: bool = True) -> tuple[str, list[int], set[str]]:
    """``command``: as the opscope command's own process (its console script, named ``opscope``), which tunes itself
    at its entry (opscope.runtime.tune_command); else as a program that calls main() among other work."""
    with tempfile.TemporaryDirectory() as where:
        script = Path(where) / "opscope"
        script.write_text(RUN_MAIN)
        run = [str(script)] if command else ["-c", RUN_MAIN]
        proc = subprocess.run([sys.executable, *run, json.dumps(argvs)], capture_output=True, text=True,
                              timeout=limit(120), env={**os.environ, **(env or {}), "PYTHONPATH": SRC})
    assert proc.returncode == 0, proc.stderr
    text, _, last = proc.stdout.rstrip().rpartition("\n")
    report = json.loads(last)
    return text, report["codes"], set(report["modules"])


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_top_level_help_imports_nothing_heavy():
    text, codes, modules = run_main(["--help"])
    assert codes == [0]
    assert text.startswith("Usage: opscope [OPTIONS] COMMAND [ARGS]...")
    assert all(f"  {c} " in text for c in COMMANDS)
    assert heavy(modules) == []
    assert "opscope.cli.tables" in modules  # the commands are registered, only their bodies wait


def test_every_command_help_works_and_imports_nothing_heavy():
    text, codes, modules = run_main(*([c, "--help"] for c in COMMANDS))
    assert len(COMMANDS) >= 20
    assert codes == [0] * len(COMMANDS)
    for c in COMMANDS:
        assert f"Usage: opscope {c} [OPTIONS]" in text, c
    assert heavy(modules) == []


def test_a_usage_error_still_says_the_formats(tmp_path):
    """The --format check runs without importing at registration; its message names the registered renderers."""
    proc = subprocess.run([sys.executable, "-m", "opscope.cli", "kernels", str(tmp_path / "t.json"), "-f", "xml"],
                          capture_output=True, text=True, timeout=limit(120), env={**os.environ, "PYTHONPATH": SRC})
    assert proc.returncode == 2
    assert "Invalid value for '--format' / '-f': 'xml' is not one of table, json, csv" in proc.stderr


def test_names_spelled_in_the_cli_match_their_sources():
    from opscope.cli.export import ExportFormat
    from opscope.cli.graph import DEFAULT_MAX_NODES
    from opscope.cli.options import FORMATS
    from opscope.compose import graph
    from opscope.render import ReportRenderer
    from opscope.render.export import ExportRenderer

    assert ReportRenderer.names() == FORMATS
    assert ExportRenderer.names() == tuple(f.value for f in ExportFormat)
    assert DEFAULT_MAX_NODES == graph.DEFAULT_MAX_NODES


def test_the_renderers_registry_imports_no_format_of_its_own():
    """A command imports opscope.render to pick its renderer: the registry holds every renderer class, and each
    renderer imports its format's modules (rich's tables, msgspec, jinja2, perfetto, graphviz) only to render."""
    code = ("import sys, opscope.render; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pyarrow', 'numpy', 'rich', 'msgspec', 'jinja2', 'altair', 'vl_convert', 'perfetto', 'graphviz')"
            " or m.startswith(('opscope.model', 'opscope.ingest', 'opscope.analyses', 'opscope.compose'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=limit(120),
                          env={**os.environ, "PYTHONPATH": SRC})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("fmt", ["table", "json"])
@pytest.mark.parametrize("command", ["kernels", "advise"])  # advise: a list of paths (typer_values.fast_list)
def test_cached_command_converts_options_without_pydantic(tmp_path, fmt, command):
    trace = write_trace(tmp_path / "t.json", small_gpu_trace())
    # first run fills the cache; the second is served from it
    argv = [command, str(trace), "--format", fmt, "--limit", "5",
            *(["--sort", "-calls"] if command == "kernels" else ["--rules", "gpu-idle"])]
    text, codes, modules = run_main(argv, argv)
    assert codes == [0, 0]
    assert ("conv_kernel" in text and "relu_kernel" in text) if command == "kernels" else "gpu-idle" in text
    assert not any(m == "pydantic" or m.startswith("pydantic.") for m in modules)
    assert "importlib.metadata" not in modules


def test_command_annotations_are_objects_not_strings():
    """typer reads every command's signature on every run; string annotations (``from __future__ import
    annotations`` in a command module) make it eval each one, which cost ~0.1 s per run for the 23 commands."""
    for info in app.registered_commands:
        hints = info.callback.__annotations__  # type: ignore[union-attr]
        strings = [name for name, value in hints.items() if isinstance(value, str)]
        assert strings == [], (info.callback.__name__, strings)  # type: ignore[union-attr]


def test_a_command_runs_in_an_application_of_its_own():
    """main() builds only the command named (see app_for); anything else goes to the whole application."""
    from opscope.cli.app import app_for

    whole: Any = typer.main.get_command(app)
    for name in COMMANDS:
        one = app_for([name, "--help"])
        assert one is not app
        group: Any = typer.main.get_command(one)
        assert sorted(group.commands) == sorted([name, "-"])
        assert group.commands[name].callback.__wrapped__ is whole.commands[name].callback.__wrapped__
        assert group.commands[name].help == whole.commands[name].help
    for argv in ([], ["--help"], ["summry", "t.json"], ["-"]):
        assert app_for(argv) is app


def test_table_commands_run_without_numpy_and_say_the_same(tmp_path):
    """pyarrow imports numpy only because it is installed: the opscope command leaves it out for the table commands
    (app.NUMPY_FREE) and their output is the same byte for byte as with it; a program that calls main() among
    other work (here: python -c) keeps it."""
    from opscope.cli.app import NUMPY_FREE

    trace = write_trace(tmp_path / "t.json", small_gpu_trace())
    other = write_trace(tmp_path / "u.json", small_gpu_trace()[:-1])
    env = {**os.environ, "PYTHONPATH": SRC}
    for command in sorted(NUMPY_FREE):
        for fmt in ("json", "table"):
            argv = [command, str(trace), *([str(other)] if command == "diff" else []), "--format", fmt]
            alone = subprocess.run([sys.executable, "-X", "importtime", "-m", "opscope.cli", *argv],
                                   capture_output=True, text=True, timeout=limit(120), env=env)
            imported = {line.rsplit("|", 1)[-1].strip() for line in alone.stderr.splitlines()
                        if line.startswith("import time:")}
            assert alone.returncode == 0, alone.stderr
            assert "pyarrow" in imported and not any(m.split(".")[0] == "numpy" for m in imported), argv
            within, codes, modules = run_main(argv, command=False)
            assert codes == [0] and "numpy" in modules
            assert alone.stdout == within, argv
