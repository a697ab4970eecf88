"""Install opscope with the newest (or the oldest) versions its ranges allow into a fresh venv and run the unit tests.

    python tools/check_deps.py            # the newest allowed release of every dependency, as a new user gets today
    python tools/check_deps.py --oldest   # every dependency at the lower bound of its range

Run it by hand now and then (and before widening a range): the next incompatible release is then found here, not by a
user. Besides the tests it runs the README's checks (ruff, mypy, lint-imports). The venv is made from nothing (no
system site-packages, no pip cache), torch is the README's pinned build, and the resolved versions are printed
(tools/versions.py) first, so a failure says which release did it. ``--oldest`` pins each direct dependency to its
lower bound with a constraints file; what those depend on resolves to the newest release that fits. Exit code: 0
when everything passed, the tests' code (or 1 for a failed check) otherwise, 2 when the install itself fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
TORCH = "torch==2.13.0"  # the README's pin: what every other dependency is tested beside


def lower_bounds(requirements: list[str]) -> list[str]:
    """``name==X`` for every requirement with a ``>=X`` bound (the oldest release its range allows)."""
    pins: dict[str, str] = {}
    for text in requirements:
        req = Requirement(text)
        for spec in req.specifier:
            if spec.operator in (">=", "=="):
                pins.setdefault(req.name.lower(), f"{req.name}=={spec.version}")
    return sorted(pins.values())


def declared_requirements(python: Path) -> list[str]:
    """What the opscope installed in ``python``'s environment declares (core and every extra)."""
    code = "import importlib.metadata as m; print('\\n'.join(m.requires('opscope')))"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if line and not line.startswith("opscope")]


def run(command: list[str], **kwargs) -> int:
    print("+ " + " ".join(command), flush=True)
    return subprocess.run(command, **kwargs).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--oldest", action="store_true", help="each dependency at the lower bound of its range")
    parser.add_argument("--venv", type=Path, help="where to make the venv (default: a temporary folder, removed)")
    parser.add_argument("--tests", default="tests/unit", help="what pytest runs (default: tests/unit)")
    opts = parser.parse_args()
    where = opts.venv or Path(tempfile.mkdtemp(prefix="opscope-deps-"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_CONSTRAINT", "PIP_REQUIREMENT")}
    env["PIP_NO_CACHE_DIR"] = "1"  # the index decides, not what an earlier install left in the cache
    env.pop("VIRTUAL_ENV", None)
    start = time.monotonic()
    try:
        shutil.rmtree(where, ignore_errors=True)
        if run([sys.executable, "-m", "venv", str(where)]) != 0:
            return 2
        python = where / "bin" / "python"
        pip = [str(python), "-m", "pip", "install", "-q"]
        if run([*pip, TORCH], env=env) != 0:
            return 2
        pinned: list[str] = []
        if opts.oldest:  # opscope alone first, for the ranges it declares
            if run([*pip, "--no-deps", "-e", str(ROOT)], env=env) != 0:
                return 2
            pins = [p for p in lower_bounds(declared_requirements(python)) if not p.lower().startswith("torch==")]
            constraints = where / "oldest.txt"
            constraints.write_text("\n".join(pins) + "\n")
            print("pinned to their lower bounds: " + ", ".join(pins), flush=True)
            pinned = ["-c", str(constraints)]
        if run([*pip, *pinned, "-e", f"{ROOT}[torch,dev]"], env=env) != 0:
            if opts.oldest:  # pip -q hides why: ask again, dry, for the lines that name the conflict
                dry = subprocess.run([*pip[:-1], "--dry-run", *pinned, "-e", f"{ROOT}[torch,dev]"], env=env,
                                     capture_output=True, text=True)
                why = dry.stdout + dry.stderr
                print(why[why.find("The conflict is caused by"):].strip() or "(pip said no more)")
                print("check_deps: the lower bounds cannot be installed together; raise the one named", flush=True)
            return 2
        run([str(python), str(ROOT / "tools" / "versions.py")], env=env)
        bin_dir = where / "bin"
        checks = [[str(bin_dir / "ruff"), "check"], [str(bin_dir / "mypy")], [str(bin_dir / "lint-imports")]]
        failed_checks = [c[0].rsplit("/", 1)[-1] for c in checks if run(c, cwd=ROOT, env=env) != 0]
        code = run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "auto", "--maxprocesses", "4",
                    opts.tests], cwd=ROOT, env=env)
    finally:
        if opts.venv is None:
            shutil.rmtree(where, ignore_errors=True)
    kind = "oldest" if opts.oldest else "newest"
    checks_said = f"; {', '.join(failed_checks)} FAILED" if failed_checks else "; ruff, mypy, lint-imports passed"
    print(f"check_deps: {kind} allowed versions: tests {'passed' if code == 0 else 'FAILED'}{checks_said} "
          f"({time.monotonic() - start:.0f} s)", flush=True)
    return code or (1 if failed_checks else 0)


if __name__ == "__main__":
    sys.exit(main())
