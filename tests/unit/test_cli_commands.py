"""Commands stay thin: parse the options, call the layer that computes, hand the result to a renderer. No function
registered as a command is longer than 40 lines, counted from its ``def`` to its last line with its docstring left
out (the docstring is the command's --help text: prose, not logic). Commands are found by parsing
src/opscope/cli/*.py, so a new one is checked as soon as it is written."""

from __future__ import annotations

import ast
from pathlib import Path

import typer.main

from opscope.cli import app

CLI = Path(__file__).resolve().parents[2] / "src" / "opscope" / "cli"
MAX_LINES = 40


def _is_command_decorator(node: ast.expr) -> bool:
    """``@app.command`` or ``@app.command(...)`` (any Typer object's ``command``)."""
    target = node.func if isinstance(node, ast.Call) else node
    return isinstance(target, ast.Attribute) and target.attr == "command"


def command_functions(source: str) -> list[ast.FunctionDef]:
    """The functions registered as commands in ``source``: decorated with ``X.command(...)``, or passed to a
    ``X.command(...)`` call (``app.command("name")(function)``)."""
    tree = ast.parse(source)
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    found = {n.name for n in functions.values() if any(_is_command_decorator(d) for d in n.decorator_list)}
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        if isinstance(call.func, ast.Call) and _is_command_decorator(call.func):
            found |= {a.id for a in call.args if isinstance(a, ast.Name) and a.id in functions}
    return [functions[name] for name in sorted(found)]


def lines(function: ast.FunctionDef) -> int:
    """The function's lines from ``def`` to its end, less its docstring's."""
    assert function.end_lineno is not None
    total = function.end_lineno - function.lineno + 1
    first = function.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        assert first.end_lineno is not None
        total -= first.end_lineno - first.lineno + 1
    return total


def test_the_counter_finds_commands_both_ways_and_leaves_the_docstring_out():
    source = '''
@app.command()
def one(a: int = 1) -> None:
    """Help text,
    two lines of it."""
    print(a)


@other.command("two", hidden=True)
def two():
    pass


def three():
    x = 1
    return x


app.command("three")(three)


def helper():
    pass
'''
    found = command_functions(source)
    assert [f.name for f in found] == ["one", "three", "two"]
    assert {f.name: lines(f) for f in found} == {"one": 2, "two": 2, "three": 3}


def test_every_registered_command_is_found():
    registered = {info.callback.__name__ for info in app.registered_commands}  # type: ignore[union-attr]
    found = {f.name for path in CLI.glob("*.py") for f in command_functions(path.read_text(encoding="utf-8"))}
    assert found >= registered
    assert len(registered) == len(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def test_no_command_function_is_longer_than_40_lines():
    long = {f"{path.name}:{f.name}": lines(f) for path in sorted(CLI.glob("*.py"))
            for f in command_functions(path.read_text(encoding="utf-8")) if lines(f) > MAX_LINES}
    assert long == {}
