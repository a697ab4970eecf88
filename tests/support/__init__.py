"""Helpers shared by the tests, one module per topic (imported as ``support``: tests/conftest.py sits in a folder
without ``__init__.py``, so pytest's default import mode puts ``tests/`` on the import path).

``make_trace`` and ``row`` build a Trace in memory; ``tracefiles`` writes small Kineto files; ``tracemutate`` edits
real ones; ``shared`` finds the real traces under ../shared/traces; ``cli`` runs the ``opscope`` command;
``hta_compat`` and ``hta_live`` are HTA's definitions and HTA itself. The other modules hold what a unit test file
and its ``_e2e`` counterpart both use (``support.gpu`` for tests/unit/test_gpu.py and
tests/integration/test_gpu_e2e.py, and so on).
"""

from support.builder import make_trace, row

__all__ = ["make_trace", "row"]
