"""The typer application every command module registers on, and the process entry point."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer
import typer.main

from opscope import runtime
from opscope.cli.common import stderr
from opscope.errors import TraceError, UsageError


def _typer() -> typer.Typer:
    return typer.Typer(
        name="opscope",
        help="Profile and analyze deep-learning workloads: where does the time go?\n\n"
             "TRACE is a PyTorch profiler / Kineto trace or any Chrome trace-event JSON (.json or .json.gz). "
             "The first open of a trace caches its tables (in ~/.cache/opscope or $OPSCOPE_CACHE_DIR) so "
             "later commands on the same file start instantly.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )


app = _typer()


def _print_version(value: bool) -> None:
    if value:
        from opscope.version import __version__

        print(f"opscope {__version__}")  # noqa: T201  the one line --version promises
        raise typer.Exit


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", help="Print opscope's version and exit.", is_eager=True,
                                          callback=_print_version)] = False,
) -> None:
    """Options that come before the command."""


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


#: Commands that read traces (or their cache entries) and show tables. pyarrow imports numpy only because it is
#: installed; opscope calls nothing that needs it on these paths (tools/json_snapshot.py run with numpy hidden:
#: every table command on every shared trace, the same bytes, exit codes and stderr), and leaving it out saves a
#: fifth of a cached command's CPU time (bench/startup.py --with-numpy) and 6 MiB of memory. advise only without
#: --measure (which times reproducers with torch); not query (SQL may ask DuckDB for anything) or the commands that
#: run programs.
NUMPY_FREE = frozenset({"summary", "ops", "kernels", "steps", "gpu", "memory", "scope", "code", "diff", "advise"})
#: Options that take a NUMPY_FREE command where numpy may be wanted (advise --measure times reproducers).
_NUMPY_OPTIONS = frozenset({"--measure"})


def is_command_process() -> bool:
    """Whether this process is the ``opscope`` command itself (its console script, ``python -m opscope.cli``), not
    a program that calls :func:`main` among other work: only the command may tune its process (opscope.runtime)."""
    entry = sys.modules.get("__main__")
    spec = getattr(entry, "__spec__", None)
    if spec is not None and spec.name == "opscope.cli.__main__":
        return True
    return os.path.basename(getattr(entry, "__file__", None) or "") == "opscope"


def needs_numpy(argv: list[str]) -> bool:
    """Whether the command ``argv`` runs may use numpy (every command but the :data:`NUMPY_FREE` ones)."""
    return not argv or argv[0] not in NUMPY_FREE or bool(_NUMPY_OPTIONS.intersection(argv))


def _verify_in_place_tables() -> None:
    """Raise TraceError when a cache file this command read in place changed under it (written or truncated from
    outside): its output was computed from something else than what was checked."""
    mapped = sys.modules.get("opscope.model.mapped")  # (not imported: nothing was read in place)
    if mapped is not None:
        mapped.verify_all()


def run_here(argv: list[str]) -> int:
    """Run the command line ``argv`` (the words after ``opscope``) in this process as :func:`main` runs it in its
    own, and return its exit code: for a process that runs commands on request (opscope mcp), which points their
    output elsewhere first (common.consoles_on). What main() would say as its one error line is raised instead:
    TraceError, or UsageError (an option value the command line rejects, with its message)."""
    from opscope.cli.options import forget_given

    forget_given()
    command = typer.main.get_command(app_for(argv))
    try:
        code = command.main(args=argv, prog_name="opscope", standalone_mode=False)
    except typer.TyperException as exc:  # the command line's own errors (click's, in typer)
        _verify_in_place_tables()
        raise UsageError(exc.format_message()) from None
    except Exception:
        _verify_in_place_tables()  # as in main(): a cache file changed under the command is the error to say
        raise
    _verify_in_place_tables()
    return code if isinstance(code, int) else 0  # a command returns None; typer.Exit(n) comes back as n


def _say_not_cached() -> None:
    """One line per cache directory where a trace this command read could not be cached (read-only, full, not a
    directory): the command worked without it, and the next one reads the trace again."""
    ingest = sys.modules.get("opscope.ingest")  # (not imported: no trace was read)
    if ingest is None:
        return
    for directory, why, trace_changed in ingest.not_cached():
        fix = ("run the command again once the trace is whole" if trace_changed else
               "set OPSCOPE_CACHE_DIR to a writable directory, or pass --no-cache")
        stderr().print(f"opscope: warning: nothing was cached in {directory} ({why}); the next command reads the "
                       f"trace again ({fix})", markup=False, highlight=False)


def main() -> None:
    """Run the command line; errors about inputs are one line on stderr and exit code 2. In the command's own process
    (not a program that calls this among other work), its tuning first and its fast exit last (opscope.runtime)."""
    if not is_command_process():
        _run()
        return
    runtime.tune_command(numpy=needs_numpy(sys.argv[1:]))  # all of the process's tuning, before pyarrow loads
    try:
        _run()
    except SystemExit as done:
        runtime.exit_command(done.code)
    runtime.exit_command(0)


def _run() -> None:
    """The command line's command; an error about its inputs is one line on stderr and exit code 2."""
    try:
        try:
            app_for(sys.argv[1:])()
        except SystemExit as done:
            if done.code in (0, None):
                _verify_in_place_tables()  # the last analyses' tables, after their output: said, not trusted
            _say_not_cached()
            raise
        except Exception:
            _verify_in_place_tables()  # a cache file changed under the command explains its failure: that error
            raise
    except (TraceError, UsageError) as exc:
        from opscope.text import one_line

        _say_not_cached()
        stderr().print(f"opscope: error: {one_line(str(exc))}", markup=False, highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        stderr().print("opscope: interrupted", markup=False)
        sys.exit(130)
