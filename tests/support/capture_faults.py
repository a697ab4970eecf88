"""A tiny training program that fails the way real jobs do under ``opscope record``, and
helpers to run it.

``prog.py FAULT AT``: trains a 2-layer model for 8 optimizer steps and exits with code 3 (its own, to tell
from opscope's); at step ``AT`` it does ``FAULT``:

- ``none``: nothing;
- ``exit``: ``os._exit(4)`` (no Python shutdown, no ``finally``);
- ``segv``: kills itself with SIGSEGV;
- ``fsize``: caps the files it writes at 4 KiB (RLIMIT_FSIZE, SIGXFSZ ignored): each write beyond fails with
  EFBIG, as on a full disk; torch's trace export then fails (torch only logs it);
- ``enospc``: every ``gzip.open`` raises OSError(ENOSPC), as compressing a trace on a full disk does;
- ``full``: the disk is full for everything opscope's side writes from then on: ``gzip.open`` as with ``enospc``,
  and run.json (its writer in the program's process raises OSError(ENOSPC)).

With the default schedule (wait 1, warmup 1, active 3) the first window is saved at the boundary after step
5, inside that ``optimizer.step()``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from support.timing import limit

PROGRAM = textwrap.dedent("""
    import errno, os, signal, sys
    import torch

    fault, at = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 9):
        if step == at:
            if fault == "exit":
                os._exit(4)
            if fault == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            if fault == "fsize":
                import resource
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
            if fault in ("enospc", "full"):
                import gzip
                def full(*args, **kwargs):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                gzip.open = full
                if fault == "full":
                    import opscope.capture.runner
                    opscope.capture.runner.write_json_atomic = full
        optimizer.zero_grad()
        model(torch.randn(8, 16)).sum().backward()
        optimizer.step()
    print("program done after", step, "steps")
    sys.exit(3)
""")

#: The same training under ``opscope.profile`` (no ``opscope record`` parent), ending with os._exit(4) after step
#: 7: its run.json is left saying "running", with no trace listed.
API_PROGRAM = textwrap.dedent("""
    import os, sys
    import torch
    import opscope

    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with opscope.profile(sys.argv[1]):
        for step in range(1, 9):
            if step == 7:
                os._exit(4)
            optimizer.zero_grad()
            model(torch.randn(8, 16)).sum().backward()
            optimizer.step()
""")

#: The program's own exit code when it runs to its end.
PROGRAM_EXIT = 3


def write_program(directory: Path) -> Path:
    script = directory / "prog.py"
    script.write_text(PROGRAM)
    return script


def record_command(output: Path | str, *program_args: str, script: Path) -> list[str]:
    """``opscope record -o OUTPUT -- python prog.py ARGS`` with this interpreter (it has torch)."""
    return [sys.executable, "-m", "opscope.cli", "record", "-o", str(output), "--", sys.executable, str(script),
            *program_args]


def run(command: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """``command`` in ``cwd``; ``timeout`` is an idle machine's limit (scaled: support.timing)."""
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=limit(timeout),
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def run_many(commands: list[list[str]], cwd: Path, timeout: float = 120) -> list[subprocess.CompletedProcess]:
    """Run commands side by side (each start costs about a second of imports, mostly waiting)."""
    procs = [subprocess.Popen(c, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"}) for c in commands]
    results = []
    for command, proc in zip(commands, procs):
        out, err = proc.communicate(timeout=limit(timeout))
        results.append(subprocess.CompletedProcess(command, proc.returncode, out, err))
    return results


def run_json(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "run.json").read_text())


def listing(directory: Path) -> list[str]:
    """Every name in ``directory``, hidden ones too (leftover temporary files would show here)."""
    return sorted(p.name for p in directory.iterdir())


def opscope_lines(stderr: str) -> list[str]:
    """opscope's own lines on stderr (torch's C++ side writes its own there too)."""
    return [line for line in stderr.splitlines() if line.startswith("opscope:")]
