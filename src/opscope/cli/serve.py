"""`opscope mcp`: opscope's analyses served to AI assistants and other clients of the Model Context Protocol."""

import re

from opscope.cli.app import app
from opscope.errors import UsageError

#: the mcp releases the server is written for, as pyproject.toml's mcp extra says (mcp>=2.3,<3)
MCP_LOWEST, MCP_NEXT_MAJOR = (2, 3), 3
INSTALL = "pip install 'opscope[mcp]'"


def mcp_missing() -> str | None:
    """Why ``opscope mcp`` cannot serve here (the optional mcp package absent, or of another version), or None."""
    try:
        import mcp  # noqa: F401  (only whether it imports)
    except ImportError as exc:
        if exc.name == "mcp":
            return f"opscope mcp needs the mcp package: {INSTALL}"
        return f"opscope mcp cannot import the mcp package ({exc}): {INSTALL}"
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("mcp")
    except PackageNotFoundError:
        return None  # importable without metadata (a source checkout): let it run
    numbers = re.match(r"(\d+)\.(\d+)", found)
    if numbers is None or not MCP_LOWEST <= (int(numbers[1]), int(numbers[2])) < (MCP_NEXT_MAJOR, 0):
        wanted = f"mcp>={MCP_LOWEST[0]}.{MCP_LOWEST[1]},<{MCP_NEXT_MAJOR}"
        return f"opscope mcp needs {wanted} (found {found}): {INSTALL}"
    return None


@app.command("mcp")
def mcp_command() -> None:
    """Serve opscope's analyses over the Model Context Protocol, on stdin and stdout (no network port).

    For an AI assistant or any MCP client: register the command `opscope` with the argument `mcp` (e.g.
    {"command": "opscope", "args": ["mcp"]}). Tools: summary, ops, kernels, gpu, steps, memory, advise, diff,
    critical_path, whatif, roofline and query, each taking trace paths as arguments and answering with what the
    command of its name prints with --format json (its notes as a second text); an error is the tool's error, with
    the command's one line. query always runs sandboxed (--sandbox). Needs the mcp extra: pip install 'opscope[mcp]'.
    """
    missing = mcp_missing()
    if missing is not None:
        raise UsageError(missing)
    from opscope.cli.mcp_server import serve

    serve()
