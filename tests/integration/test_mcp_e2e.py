"""`opscope mcp` started as a child process and driven by the mcp package's own stdio client: the tools it lists,
answers that are the commands' `--format json` output byte for byte (and their notes), errors that are the commands'
one line, and a query that cannot touch files."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from support.cli import run_cli, run_cli_many
from support.shared import shared_trace
from support.timing import limit

pytest.importorskip("mcp", reason="the mcp extra is not installed")
import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, Tool

TOOLS = {"summary", "ops", "kernels", "gpu", "steps", "memory", "advise", "diff", "critical_path", "whatif",
         "roofline", "query"}
ALEXNET = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
SIMPLE_ADD = "hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz"


def serve(tmp_path: Path, calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[Tool], list[CallToolResult], str]:
    """Start `opscope mcp`, list its tools and make ``calls`` in one session; the tools, the results and what the
    server wrote on stderr."""
    errlog = tmp_path / "server.stderr"

    async def session() -> tuple[list[Tool], list[CallToolResult]]:
        server = StdioServerParameters(command=sys.executable, args=["-m", "opscope.cli", "mcp"],
                                       env=dict(os.environ), cwd=str(tmp_path))
        with anyio.fail_after(limit(60)), errlog.open("w") as err:
            async with stdio_client(server, errlog=err) as (read, write), ClientSession(read, write) as client:
                await client.initialize()
                tools = (await client.list_tools()).tools
                return tools, [await client.call_tool(name, arguments) for name, arguments in calls]

    # on a thread of its own: a test run before it in the same worker can leave this thread saying an asyncio loop
    # runs (seen under xdist with some -k selections), and anyio then refuses to start one here
    with ThreadPoolExecutor(1) as pool:
        tools, results = pool.submit(anyio.run, session).result()
    return tools, results, errlog.read_text()


def texts(result: CallToolResult) -> list[str]:
    return [block.text for block in result.content]  # type: ignore[union-attr]


def test_every_tool_is_listed_read_only_with_a_description_and_typed_parameters(tmp_path):
    tools, _, said = serve(tmp_path, [])
    by_name = {t.name: t for t in tools}
    assert set(by_name) == TOOLS
    for tool in tools:
        assert tool.description and tool.annotations is not None and tool.annotations.read_only_hint, tool.name
        assert tool.input_schema["type"] == "object"
    kernels = by_name["kernels"].input_schema
    assert kernels["required"] == ["trace"]
    assert kernels["properties"]["trace"]["type"] == "string"
    assert {"type": "integer", "minimum": 0} in kernels["properties"]["limit"]["anyOf"]
    assert kernels["properties"]["by_op"]["type"] == "boolean"
    assert by_name["gpu"].input_schema["properties"]["view"]["enum"] == ["breakdown", "idle", "launches"]
    assert by_name["diff"].input_schema["required"] == ["base", "new"]
    assert by_name["query"].input_schema["required"] == ["trace", "sql"]
    assert "Traceback" not in said


def test_each_answer_is_the_commands_json_output_and_its_notes(tmp_path, cache_dir):
    trace, other = str(shared_trace(ALEXNET)), str(shared_trace(SIMPLE_ADD))
    cases = [
        ("kernels", {"trace": trace}, ["kernels", trace]),
        ("kernels", {"trace": trace, "by_op": True, "limit": 3}, ["kernels", trace, "--by-op", "--limit", "3"]),
        ("gpu", {"trace": trace, "view": "idle"}, ["gpu", trace, "--idle"]),
        ("whatif", {"trace": trace, "changes": ["kernel:gemm=0.5", "sync=0"]},
         ["whatif", trace, "--change", "kernel:gemm=0.5", "--change", "sync=0"]),
        ("diff", {"base": trace, "new": other, "whole_trace": True, "limit": 5},
         ["diff", trace, other, "--whole-trace", "--limit", "5"]),
    ]
    _, results, said = serve(tmp_path, [(name, arguments) for name, arguments, _ in cases])
    expected = run_cli_many([(*argv, "--format", "json") for _, _, argv in cases], cache=cache_dir)
    for (name, arguments, _), result, cli in zip(cases, results, expected):
        assert cli.returncode == 0, cli.stderr
        assert not result.is_error, (name, texts(result))
        assert texts(result) == [cli.stdout, *([cli.stderr] if cli.stderr else [])], (name, arguments)
    assert any(len(texts(r)) == 2 for r in results)  # gpu's idle view says what its causes mean
    assert "Traceback" not in said


def test_errors_are_the_commands_one_line(tmp_path, cache_dir):
    missing = tmp_path / "missing.json"
    not_a_trace = tmp_path / "notes.txt"
    not_a_trace.write_text("hello, not a trace\n")
    trace = str(shared_trace(ALEXNET))
    _, results, said = serve(tmp_path, [
        ("kernels", {"trace": str(missing)}),
        ("summary", {"trace": str(not_a_trace)}),
        ("query", {"trace": trace, "sql": "select nope from events"}),
        ("steps", {"trace": trace}),  # still serving after the errors
    ])
    for result, (command, path) in zip(results[:2], (("kernels", missing), ("summary", not_a_trace))):
        assert result.is_error
        [line] = texts(result)
        assert line == run_cli(command, str(path), "--format", "json", cache=cache_dir).stderr.strip()
        assert line.startswith(f"opscope: error: {path}: ") and "\n" not in line
    [sql_error] = texts(results[2])
    assert results[2].is_error and sql_error.startswith("opscope: error: SQL error: ") and "\n" not in sql_error
    assert not results[3].is_error
    assert "Traceback" not in said


def test_query_is_sandboxed(tmp_path):
    trace = str(shared_trace(ALEXNET))
    secret, copied = tmp_path / "secret.csv", tmp_path / "copied.csv"
    secret.write_text("a\n1\n")
    _, results, _ = serve(tmp_path, [
        ("query", {"trace": trace, "sql": f"copy (select * from events) to '{copied}'"}),
        ("query", {"trace": trace, "sql": f"select * from read_csv('{secret}')"}),
        ("query", {"trace": trace, "sql": "set enable_external_access = true"}),
        ("query", {"trace": trace, "sql": "select count(*) as n from events"}),
    ])
    for result in results[:3]:
        assert result.is_error
        assert texts(result)[0].startswith("opscope: error: SQL error: ")
    assert not copied.exists()
    assert not results[3].is_error and '"n":' in texts(results[3])[0]
