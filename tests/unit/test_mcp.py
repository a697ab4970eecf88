"""The MCP server's pieces that need no client: tool arguments turned into the command's options, choices that are
the command's own, and the check that the mcp package is there in a version the server is written for."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from opscope.analyses.op_device import OP_LEVELS
from opscope.cli import mcp_server, serve
from opscope.cli.memory import MemoryView
from opscope.cli.roofline import ByOpt
from opscope.diff.report import TABLES


def test_arguments_become_the_commands_options():
    options = {"by_op": True, "full_names": False, "sort": None, "limit": 0, "short_gap_us": 2.5,
               "change": ["kernel:gemm=0.5", "sync=0"], "match": "-x"}
    assert mcp_server.command_line("kernels", ["-t.json"], options) == [
        "kernels", "--by-op", "--limit=0", "--short-gap-us=2.5", "--change=kernel:gemm=0.5", "--change=sync=0",
        "--match=-x", "--format=json", "--", "-t.json"]


def _choices(tool, parameter: str) -> tuple[str, ...]:
    """The values of a tool's ``Annotated[Literal[...] | None, Field(...)]`` parameter."""
    annotation = inspect.signature(tool, eval_str=True).parameters[parameter].annotation
    literal = typing.get_args(typing.get_args(annotation)[0])[0]
    return typing.get_args(literal)


def test_choices_are_the_commands_own():
    assert _choices(mcp_server.diff, "table") == TABLES
    assert _choices(mcp_server.diff, "op_level") == OP_LEVELS
    assert _choices(mcp_server.memory, "view") == tuple(v.value for v in MemoryView)
    assert _choices(mcp_server.roofline, "by") == typing.get_args(typing.get_args(ByOpt)[0])


def test_every_tool_is_registered():
    names = {t.__name__ for t in mcp_server.TOOLS}
    assert len(names) == len(mcp_server.TOOLS) == 12


@pytest.mark.parametrize(("found", "said"), [
    ("2.3.0", None),
    ("2.9.1", None),
    ("1.26.0", "opscope mcp needs mcp>=2.3,<3 (found 1.26.0): pip install 'opscope[mcp]'"),
    ("3.0.0", "opscope mcp needs mcp>=2.3,<3 (found 3.0.0): pip install 'opscope[mcp]'"),
])
def test_the_mcp_version_is_checked(monkeypatch, found, said):
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: found)
    assert serve.mcp_missing() == said


def test_the_version_checked_is_the_extras():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    lowest = ".".join(map(str, serve.MCP_LOWEST))
    assert extras["mcp"] == [f"mcp>={lowest},<{serve.MCP_NEXT_MAJOR}"]
