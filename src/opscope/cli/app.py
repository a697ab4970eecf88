"""The typer application every command module registers on, and the process entry point."""

from __future__ import annotations

import sys

import typer

from opscope.cli.common import err
from opscope.errors import TraceError, UsageError

app = typer.Typer(
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


def main() -> None:
    """Run the command line; errors about inputs are one line on stderr and exit code 2."""
    try:
        app()
    except (TraceError, UsageError) as exc:
        err.print(f"opscope: error: {exc}", markup=False, highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("opscope: interrupted", markup=False)
        sys.exit(130)
