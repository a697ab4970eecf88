"""A fresh machine's set-up: CI runs the README's test command, every dependency has a tested range, --version."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from support.timing import limit

from opscope.version import __version__

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from check_deps import lower_bounds  # noqa: E402


def readme_commands() -> list[str]:
    """The one-line shell commands of the README's ```bash blocks, in order."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.startswith("python3 -m venv")]


def test_ci_runs_the_readme_test_command():
    demo, tests = readme_commands()[:2]
    assert demo.endswith("opscope demo") and "pytest" in tests
    last = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip()][-1]
    assert last == tests, "keep .ci/run's command and the README's second command the same"


def test_every_dependency_has_a_range_with_an_upper_bound():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for reqs in project["optional-dependencies"].values():
        declared += [r for r in reqs if not r.startswith("opscope[")]
    unbounded = []
    for text in declared:
        specs = list(Requirement(text).specifier)
        if not any(s.operator in ("<", "==", "~=") for s in specs):
            unbounded.append(text)
    assert unbounded == [], "a dependency without an upper bound can break a fresh install the day it is released"


def test_lower_bounds_pin_each_dependency_once():
    reqs = ["msgspec>=0.18,<0.24", "numpy<3", "torch>=2.1,<2.14; extra == 'torch'", "HolisticTraceAnalysis==0.5.0",
            "msgspec>=0.19"]
    assert lower_bounds(reqs) == ["HolisticTraceAnalysis==0.5.0", "msgspec==0.18", "torch==2.1"]


def test_version_option():
    res = subprocess.run([sys.executable, "-m", "opscope.cli", "--version"], capture_output=True, text=True,
                         timeout=limit(60))
    assert (res.returncode, res.stdout, res.stderr) == (0, f"opscope {__version__}\n", "")
