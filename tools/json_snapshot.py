"""Record every table command's output on every file under a folder, to check a refactor changes nothing.

    python tools/json_snapshot.py ../shared/traces OUTDIR [--formats json,table] [--only SUBFOLDER]
                                  [--commands advise,whatif]

Runs the commands in this process (``opscope.cli.main`` with a patched argv) so a full pass takes minutes,
not the hour that 3,000 interpreter starts would. Each run writes OUTDIR/<case>.out (stdout), .err (stderr)
and .rc (exit code). Compare two folders with ``diff -r``; stdout and exit codes must match.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from pathlib import Path

COMMANDS: list[list[str]] = [
    ["summary"], ["ops"], ["ops", "--gpu"], ["ops", "--by", "name,shapes"], ["ops", "--kinds", "cpu_op,runtime"],
    ["kernels"], ["kernels", "--by-op"], ["kernels", "--details"], ["steps"],
    ["query", "select kind, count(*) as n, sum(dur_ns) as d from events group by 1 order by 1"],
    ["scope"], ["code"], ["code", "--flat"],
    ["memory"], ["memory", "--view", "holders"], ["memory", "--view", "allocations"], ["memory", "--timeline", "8"],
    ["memory", "--view", "counters"],
    ["gpu"], ["gpu", "--idle"], ["gpu", "--launches"], ["roofline"], ["advise"],
    ["critical-path"], ["whatif", "-c", "idle:sync=0"], ["whatif", "-c", "idle:unexplained=0"],
    ["whatif", "-c", "sync=0", "-c", "kernel:.=0.5", "-c", "idle=0.5"],
]
DIFF_BASE = "hta/trace_diff/control_group/rank-0.Jul_15_10_52_41.1074.pt.trace.json.gz"


def run(argv: list[str]) -> tuple[str, str, int]:
    from opscope import cli

    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["opscope", *argv]
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        for console in _consoles(cli):
            console.file = out if console.stderr is False else err
        try:
            cli.main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception as exc:  # a traceback in the tool: record it, do not stop the pass
            err.write(f"TRACEBACK {exc.__class__.__name__}: {exc}\n")
            code = 99
    return out.getvalue(), err.getvalue(), code


def _consoles(cli):
    from rich.console import Console

    seen = []
    for module in [m for name, m in list(sys.modules.items()) if name.startswith("opscope.cli") and m]:
        for value in vars(module).values():
            if isinstance(value, Console) and value not in seen:
                seen.append(value)
    return seen


def main() -> None:
    root, dest = Path(sys.argv[1]), Path(sys.argv[2])
    options = dict(zip(sys.argv[3::2], sys.argv[4::2]))
    formats = options.get("--formats", "json").split(",")
    only = options.get("--only", "")
    picked = [c for c in COMMANDS + [["diff"]] if not options.get("--commands")
              or c[0] in options["--commands"].split(",")]
    dest.mkdir(parents=True, exist_ok=True)
    # the entries of every file (hundreds of MB) in a directory removed at the end
    with tempfile.TemporaryDirectory(prefix="opscope-snap-cache-", ignore_cleanup_errors=True) as cache:
        os.environ["OPSCOPE_CACHE_DIR"] = cache
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix not in (".py", ".tsv", ".md")
                       and p.relative_to(root).as_posix().startswith(only))
        for path in files:
            rel = path.relative_to(root).as_posix()
            cases = [(c, f) for c in picked if c[0] != "diff" for f in formats]
            cases += [(["diff", str(root / DIFF_BASE)], f) for f in formats if ["diff"] in picked]
            for command, fmt in cases:
                argv = [command[0], *([str(path)] if command[0] != "diff" else command[1:] + [str(path)]),
                        *(command[1:] if command[0] != "diff" else []), "--format", fmt]
                if command[0] == "query":  # the SQL is a positional after the trace
                    argv = ["query", str(path), command[1], "--format", fmt]
                stdout, stderr, code = run(argv)
                key = (rel + "__" + "_".join(command[:1] + [a.replace("/", "-")[:40] for a in command[1:]]) + "." + fmt)
                key = key.replace("/", "__").replace(" ", "_")
                (dest / f"{key}.out").write_text(stdout.replace(str(root), "<ROOT>"))
                (dest / f"{key}.err").write_text(stderr.replace(str(root), "<ROOT>"))
                (dest / f"{key}.rc").write_text(str(code))
            print(rel, flush=True)


if __name__ == "__main__":
    main()
