"""The optional C parts (everything else is in pyproject.toml): the reader of Chrome trace chunks, derive.py's loops,
the analyses' (innermost enclosing span, scatter), the dependency graph's build and replay (analyses/_graph.c) and
the guard of mapped cache files (model/_guard.c).

``optional=True``: where no C compiler is found the build goes on without them and opscope uses its Python paths
(the same tables, slower; see ``opscope.ingest.chrome.native`` and ``opscope.model.derive``)."""

import sys

from setuptools import Extension, setup

FLAGS = ["-O3", "-Wall"]
THREADS = [] if sys.platform == "win32" else ["-pthread"]
VIEWS = ["src/opscope/_buffers.h", "src/opscope/_spans.h"]  # the buffer views and span searches the C parts share

setup(ext_modules=[
    # -pthread: a long chunk is read as two halves on two threads (glibc before 2.34 keeps pthreads apart)
    Extension("opscope.ingest.chrome._scan", ["src/opscope/ingest/chrome/_scan.c"], optional=True,
              extra_compile_args=FLAGS + THREADS, extra_link_args=THREADS),
    Extension("opscope.model._derive", ["src/opscope/model/_derive.c"], optional=True, extra_compile_args=FLAGS,
              depends=VIEWS),
    Extension("opscope.analyses._loops", ["src/opscope/analyses/_loops.c"], optional=True,
              extra_compile_args=FLAGS, depends=VIEWS),
    Extension("opscope.analyses._graph", ["src/opscope/analyses/_graph.c"], optional=True,
              extra_compile_args=FLAGS, depends=VIEWS),
    # cache files mapped so that a truncation from outside reads as zeros and an error, not SIGBUS (POSIX)
    *([] if sys.platform == "win32" else [
        Extension("opscope.model._guard", ["src/opscope/model/_guard.c"], optional=True,
                  extra_compile_args=FLAGS + THREADS, extra_link_args=THREADS)]),
])
