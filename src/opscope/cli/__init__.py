"""The ``opscope`` command line: thin commands that load traces, call an analysis and hand its Report to a renderer.

One module per command group registers its commands on :data:`app`; the imports below are the whole CLI, in the
order ``opscope --help`` lists the commands.
"""

from __future__ import annotations

# isort: off
from opscope.cli.app import app, main
from opscope.cli import tables  # noqa: F401  summary, ops, kernels, steps, query
from opscope.cli import capture  # noqa: F401  demo, record, tune-threads, model, numerics, numerics-diff
from opscope.cli import views  # noqa: F401  scope, code
from opscope.cli import memory  # noqa: F401
from opscope.cli import gpu  # noqa: F401
from opscope.cli import causal  # noqa: F401  critical-path, whatif
from opscope.cli import roofline  # noqa: F401  roofline
from opscope.cli import advice  # noqa: F401  advise, diff
from opscope.cli import repro  # noqa: F401
from opscope.cli import report  # noqa: F401
from opscope.cli import graph  # noqa: F401
from opscope.cli import export  # noqa: F401
from opscope.cli import perf  # noqa: F401
from opscope.cli import peaks  # noqa: F401
from opscope.cli import job  # noqa: F401
from opscope.cli import serve  # noqa: F401  mcp
# isort: on

__all__ = ["app", "main"]
