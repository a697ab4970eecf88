"""What ``run.json`` records about a run: versions, devices, threads, environment, code version.

Everything here is what one needs to explain why two runs of the same program differ.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

#: Environment variables that change performance (thread pools, allocators, kernels, collectives).
PERF_ENV = re.compile(r"^(OMP_|MKL_|KMP_|GOMP_|OPENBLAS_|CUDA_|CUBLAS|CUDNN|NVIDIA_|TORCH|PYTORCH_|NCCL_|RCCL_|"
                      r"HIP_|HSA_|ROCM_|ROCR_|MIOPEN_|TF_|XLA_|ONEDNN_|DNNL_|LD_PRELOAD$|MALLOC_)")
#: Never copy values that look like credentials into a file people share.
_SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY", re.IGNORECASE)


def perf_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: v for k, v in sorted(env.items()) if PERF_ENV.match(k) and not _SECRET.search(k)}


def cpu_info() -> dict[str, Any]:
    model = platform.processor() or None
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    # The host's load when the program starts (run_info runs before it): the threads of other processes that
    # compete with the program's own for the usable cores (advise's threads and input-pipeline rules).
    load: list[float] | None
    try:
        load = [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    return {"model": model, "logical_cores": os.cpu_count(), "usable_cores": usable, "load_average": load,
            "machine": platform.machine(), "system": platform.system(), "release": platform.release()}


def torch_info(torch) -> dict[str, Any]:
    """Versions, GPUs and thread settings as torch sees them."""
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": getattr(torch.version, "cuda", None),
        "hip": getattr(torch.version, "hip", None),
        "cudnn": None,
        "threads": {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()},
        "gpus": [],
    }
    # Each probe may fail on odd builds (no cuDNN, a broken driver): run.json then lacks that fact, no more.
    with contextlib.suppress(Exception):
        info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    with contextlib.suppress(Exception):
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                info["gpus"].append({"index": i, "name": p.name, "total_memory": p.total_memory,
                                     "capability": f"{p.major}.{p.minor}",
                                     "multi_processor_count": p.multi_processor_count})
    with contextlib.suppress(Exception):
        info["parallel_info"] = torch.__config__.parallel_info()
    return info


def git_info(directory: Path) -> dict[str, Any] | None:
    """Commit and dirty flag of the repository holding ``directory``, or None outside git."""
    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status), "root": git("rev-parse", "--show-toplevel")}


def run_info(command: list[str], program_dir: Path, torch=None) -> dict[str, Any]:
    from opscope.version import __version__

    info: dict[str, Any] = {
        "command": command,
        "cwd": os.getcwd(),
        "versions": {"python": platform.python_version(), "opscope": __version__,
                     "executable": sys.executable},
        "cpu": cpu_info(),
        "environment": perf_environment(),
        "git": git_info(program_dir),
    }
    if torch is not None:
        add_torch_info(info, torch)
    return info


def add_torch_info(info: dict[str, Any], torch) -> None:
    """Add torch's versions, GPUs and thread settings (:func:`torch_info`, as they are now) to a run_info dict."""
    t = torch_info(torch)
    info["versions"].update({k: t.pop(k) for k in ("torch", "cuda", "hip", "cudnn")})
    info.update(t)
