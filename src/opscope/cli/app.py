"""The typer application every command module registers on, and the process entry point."""

from __future__ import annotations

import sys

import typer

from opscope.cli import fastparams
from opscope.cli.common import stderr
from opscope.errors import TraceError, UsageError

fastparams.install()  # option values converted without importing pydantic (see fastparams)

def _typer() -> typer.Typer:
    return typer.Typer(
        name="opscope",
        help="Profile and analyze deep-learning workloads: where does the time go?\n\n"
             "TRACE is a PyTorch profiler / Kineto trace or any Chrome trace-event JSON (.json or .json.gz). "
             "The first open of a trace caches it as Parquet (in ~/.cache/opscope or $OPSCOPE_CACHE_DIR) so "
             "later commands on the same file start instantly.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )


app = _typer()


def _unused() -> None:
    """Never run: the second command that keeps a one-command app a group (typer runs a lone command as the app)."""


def app_for(argv: list[str]) -> typer.Typer:
    """The application that runs ``argv``: when it starts with a command's name, an application of that command
    alone, else :data:`app`. typer builds every registered command (reading each signature and every option)
    before it runs one; for the one named nothing else is needed, and its help, errors and output are the same."""
    if not argv or argv[0].startswith("-"):
        return app
    named = [c for c in app.registered_commands
             if (c.name or (c.callback.__name__.lower().replace("_", "-") if c.callback else None)) == argv[0]]
    if len(named) != 1:
        return app
    one = _typer()
    one.registered_commands = [named[0]]
    one.command(name="-", hidden=True)(_unused)
    return one


def main() -> None:
    """Run the command line; errors about inputs are one line on stderr and exit code 2."""
    try:
        app_for(sys.argv[1:])()
    except (TraceError, UsageError) as exc:
        stderr().print(f"opscope: error: {exc}", markup=False, highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        stderr().print("opscope: interrupted", markup=False)
        sys.exit(130)
