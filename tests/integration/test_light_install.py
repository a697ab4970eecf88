"""The light install (no polars): ``opscope.load`` says in one line which extra to install, and works with
frames="arrow"; checked in a child interpreter where ``import polars`` fails, as it does without the extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from support.timing import limit
from support.tracefiles import small_gpu_trace, write_trace

CHILD = textwrap.dedent("""
    import sys
    sys.modules["polars"] = None  # what `import polars` meets without the extra: ImportError
    import opscope
    from opscope.errors import UsageError
    try:
        opscope.load(sys.argv[1])
    except UsageError as e:
        print("ERROR", e)
    run = opscope.load(sys.argv[1], frames="arrow")
    print("ROWS", run.events.num_rows, type(run.events).__name__)
""")


def test_load_without_polars_names_the_extra(tmp_path):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    done = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=limit(120))
    assert done.returncode == 0, done.stderr
    error, rows = done.stdout.strip().splitlines()
    assert error.startswith("ERROR ") and "pip install 'opscope[polars]'" in error and "frames='arrow'" in error
    # every complete ("X") event of the trace is one row of events; its metadata ("M") row is not
    expected = sum(1 for e in small_gpu_trace() if e.get("ph") == "X")
    assert rows == f"ROWS {expected} Table"


REPORT_CHILD = textwrap.dedent("""
    import sys
    sys.modules["altair"] = None  # the view extra not installed: `import altair` fails
    sys.argv = ["opscope", "report", sys.argv[1], "-o", sys.argv[2]]
    from opscope.cli import main
    main()
""")


def test_report_without_the_view_extra_names_it_before_any_work(tmp_path):
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    out = tmp_path / "r.html"
    done = subprocess.run([sys.executable, "-c", REPORT_CHILD, str(path), str(out)], capture_output=True, text=True,
                          timeout=limit(120))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "opscope: error: the HTML report needs the view extra (altair missing): pip install 'opscope[view]'"]
    assert not out.exists()


MCP_CHILD = textwrap.dedent("""
    import sys
    sys.modules["mcp"] = None  # the mcp extra not installed: `import mcp` fails
    sys.argv = ["opscope", "mcp"]
    from opscope.cli import main
    main()
""")


def test_mcp_without_its_extra_names_it_in_one_line():
    done = subprocess.run([sys.executable, "-c", MCP_CHILD], capture_output=True, text=True, timeout=limit(120),
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "opscope: error: opscope mcp needs the mcp package: pip install 'opscope[mcp]'"]
    assert done.stdout == ""
