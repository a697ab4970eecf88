"""The optional C parts (everything else is in pyproject.toml): the decoder of Chrome trace chunks and the nesting walk.

``optional=True``: where no C compiler is found the build goes on without them and opscope uses its Python paths
(the same tables, slower; see ``opscope.ingest.chrome.native`` and ``opscope.model.derive``)."""

from setuptools import Extension, setup

FLAGS = ["-O2", "-Wall"]

setup(ext_modules=[
    Extension("opscope.ingest.chrome._scan", ["src/opscope/ingest/chrome/_scan.c"], optional=True,
              extra_compile_args=FLAGS),
    Extension("opscope.model._nest", ["src/opscope/model/_nest.c"], optional=True, extra_compile_args=FLAGS),
])
