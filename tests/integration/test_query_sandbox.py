"""opscope query runs the user's SQL with the user's rights (DuckDB reads and writes files); --sandbox takes file,
network and extension access away, and the SQL cannot give it back."""

from __future__ import annotations

from support.cli import run_cli_many
from support.tracefiles import small_gpu_trace, write_trace


def test_sandbox_refuses_files_but_answers_queries(tmp_path):
    trace = str(write_trace(tmp_path / "t.json", small_gpu_trace()))
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n42\n")
    out = tmp_path / "written.csv"
    reads = f"select * from read_csv('{secret}')"
    writes = f"copy (select 1 as x) to '{out}'"
    again = "set enable_external_access = true"
    kernels = "select count(*) as n from events where kind = 'kernel'"
    commands = [("query", trace, reads, "--format", "csv"), ("query", trace, reads, "--sandbox"),
                ("query", trace, writes, "--sandbox"), ("query", trace, again, "--sandbox"),
                ("query", trace, kernels, "--sandbox", "--format", "csv")]
    read_open, read_boxed, write_boxed, reenable, count = run_cli_many(commands, cache=tmp_path / "cache")
    assert read_open.returncode == 0 and "42" in read_open.stdout  # the default: DuckDB as the user runs it
    for res in (read_boxed, write_boxed, reenable):
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("opscope: error: SQL error")
    assert not out.exists()
    # small_gpu_trace has three kernels (two conv_kernel, one relu_kernel)
    assert count.returncode == 0 and count.stdout.splitlines() == ["n", "3"]
