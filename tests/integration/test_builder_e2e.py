"""A cached open, in a fresh interpreter, imports no parser."""

from __future__ import annotations

import json
import subprocess
import sys

from support.tracefiles import small_gpu_trace, write_trace

from opscope.ingest import open_trace


def test_cached_open_loads_no_parser(tmp_path):
    """A cached open reads the cache's Arrow files: neither the JSON parser nor msgspec is imported."""
    path = write_trace(tmp_path / "t.json", small_gpu_trace())
    open_trace(path)
    code = ("import sys; from opscope.ingest import open_trace; t = open_trace(sys.argv[1]); "
            "import json; print(json.dumps(['from_cache' in t.metadata, sorted(m for m in sys.modules "
            "if m == 'msgspec' or m.startswith('opscope.ingest.chrome.') or m == 'opscope.model.builder')]))")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [True, []]
