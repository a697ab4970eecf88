"""The hostile corpus through the commands that write files: ``report``, ``export`` (Chrome and Perfetto) and
``graph``. Each run must end in a written file or one clean error line naming the file, with no traceback
(``support.hostile_corpus.problems``), and a file that was written is whole: an HTML document, JSON that parses, a
DOT graph.

A sample of the corpus keeps this under a minute on two cores: every hostile-text and odd-structure file, and the
first few of each other class (the table commands' test runs the whole corpus).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support import hostile_corpus
from support.hostile_run import run_corpus

pytestmark = pytest.mark.slow

VIEW_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("report", "{file}", "-o", "{file}.report.html", "--force"),
    ("export", "{file}", "--to", "chrome", "-o", "{file}.chrome.json", "--force"),
    ("export", "{file}", "--to", "perfetto", "-o", "{file}.pftrace", "--force"),
    ("graph", "{file}", "-o", "{file}.dot", "--force"),
)
#: files per class (None: all of them)
SAMPLE = {"hostile-text": None, "structure": None, "wrong-format": 4, "truncation": 4, "corrupt-gzip": 2,
          "huge-number": 4, "size": 2}


@pytest.fixture(scope="module")
def view_results(tmp_path_factory):
    pytest.importorskip("jinja2")
    pytest.importorskip("perfetto")
    from opscope.render.html.document import vega_bundle

    root = tmp_path_factory.mktemp("hostile-views")
    corpus = hostile_corpus.build(root, "ci")
    files = [f for kind, fs in corpus.items() for f in fs[: SAMPLE.get(kind, 2)]]
    bundle = vega_bundle()  # built once here; each file's own cache gets a copy, as a second run would find it
    cache = root / "cache"
    for i, _ in enumerate(files):
        (cache / str(i)).mkdir(parents=True)
        for made in Path(_cache_dir()).glob("vega-bundle-*.js"):
            shutil.copy(made, cache / str(i) / made.name)
    assert bundle
    return files, run_corpus(files, hostile_corpus.good_trace(root), VIEW_COMMANDS, ("table",), cache,
                             command_cpu_s=60, file_timeout=300)


def _cache_dir() -> str:
    from opscope.store.keys import cache_root

    return str(cache_root())


def test_every_view_command_on_hostile_files_writes_a_whole_file_or_one_clean_error(view_results):
    files, results = view_results
    found = {str(r.file.name): r.problems() for r in results if r.problems()}
    assert not found, found
    runs = [run for r in results for run in r.runs]
    assert len(runs) == len(files) * len(VIEW_COMMANDS)
    assert any(run["rc"] == 0 for run in runs) and any(run["rc"] == 2 for run in runs)
    for file in files:
        html = Path(f"{file}.report.html")
        if html.exists():
            text = html.read_text(encoding="utf-8")
            assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>"), html
        chrome = Path(f"{file}.chrome.json")
        if chrome.exists():
            assert isinstance(json.loads(chrome.read_bytes())["traceEvents"], list), chrome
        dot = Path(f"{file}.dot")
        if dot.exists():
            assert dot.read_text(encoding="utf-8").lstrip().startswith("digraph"), dot
