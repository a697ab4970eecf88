"""The child side of ``opscope record`` / ``tune-threads``: run the user's program under a Recording.

Started as ``python -m opscope.capture.runner`` with its settings in the ``OPSCOPE_RUNNER`` environment
variable (JSON). It applies thread settings, runs the script or module as ``__main__`` with the user's
arguments, and always writes ``run.json`` (also when the program crashes or is interrupted). The
program's stdout, stderr and exit code are its own.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ENV = "OPSCOPE_RUNNER"
#: Exit code of the runner itself when it could not start the program (the CLI's usage-error code).
SETUP_ERROR = 2


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # what Python does with sys.exit("message")
    return 1


def _fail(message: str) -> None:
    print(f"opscope: error: {message}", file=sys.stderr)
    sys.exit(SETUP_ERROR)


def main() -> None:
    cfg = json.loads(os.environ.pop(ENV))
    target = cfg["target"]
    output = Path(cfg["output"])
    try:
        import torch
    except ImportError:
        _fail(f"the program's Python ({sys.executable}) has no PyTorch: pip install torch==2.13.0")
    from opscope.capture.runinfo import run_info
    from opscope.capture.session import Recording, RecordOptions

    options = RecordOptions(**cfg["options"])
    # Thread pools are sized once: set them before the program touches torch.
    if options.intra_op_threads:
        torch.set_num_threads(options.intra_op_threads)
    if options.inter_op_threads:
        torch.set_num_interop_threads(options.inter_op_threads)

    if target["kind"] == "module":
        import importlib.util

        sys.path.insert(0, os.getcwd())
        try:
            found = importlib.util.find_spec(target["value"])
        except (ImportError, ValueError) as exc:
            found, why = None, str(exc)
        else:
            why = f"no module named {target['value']!r}"
        if found is None:
            _fail(f"cannot run -m {target['value']}: {why}")
        program_dir = Path(os.getcwd())
    else:
        script = Path(target["value"])
        if not script.is_file():
            _fail(f"{script}: no such script")
        program_dir = script.resolve().parent

    info = run_info(cfg["command"], program_dir, torch)
    info.update({"status": "running", "mode": cfg["mode"], "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    output.mkdir(parents=True, exist_ok=True)
    write_json_atomic(output / "run.json", info)

    recording = Recording(output, options, profile=cfg["mode"] == "record")
    code, status, crash = 0, "ok", None
    recording.start()
    try:
        if target["kind"] == "module":
            sys.argv = [target["value"], *target["args"]]
            runpy.run_module(target["value"], run_name="__main__", alter_sys=True)
        else:
            sys.argv = [target["value"], *target["args"]]
            sys.path.insert(0, str(program_dir))
            runpy.run_path(target["value"], run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt:
        code, status, crash = 130, "interrupted", "KeyboardInterrupt"
    except ImportError as exc:  # a module the program needs is missing: say so in one line
        code, status, crash = SETUP_ERROR, "import-error", f"{type(exc).__name__}: {exc}"
        print(f"opscope: error: the program failed to import a module ({exc}); run it without opscope to "
              "see the traceback", file=sys.stderr)
    except BaseException as exc:  # noqa: BLE001 - the program's crash is reported, then passed on
        traceback.print_exc()
        code, status, crash = 1, "crashed", f"{type(exc).__name__}: {exc}"
    finally:
        recording.stop()
        info.update(recording.result())
        info.update({"status": status, "exit_code": code, "crash": crash,
                     "ended": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        write_json_atomic(output / "run.json", info)
    sys.stdout.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()
