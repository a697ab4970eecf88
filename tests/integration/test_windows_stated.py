"""Every window-dependent table says which window it used, in one line, on the terminal and (beside a JSON
document) on stderr: gpu, steps, advise and diff, with steps and without."""

from __future__ import annotations

import json

from support.cli import run_cli_many
from support.tracefiles import small_gpu_trace, write_trace


def window_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.removeprefix("opscope: ").startswith("window:")]


def test_each_window_dependent_command_states_its_window(tmp_path, pair):
    stepped = write_trace(tmp_path / "stepped.json", small_gpu_trace())
    # the same events without the ProfilerStep annotations
    flat = write_trace(tmp_path / "flat.json", [e for e in small_gpu_trace()
                                                 if not str(e.get("name", "")).startswith("ProfilerStep#")])
    flat2 = write_trace(tmp_path / "flat2.json", [e for e in small_gpu_trace()
                                                   if not str(e.get("name", "")).startswith("ProfilerStep#")])
    commands = [(c, str(t)) for t in (stepped, flat) for c in ("gpu", "advise")] + [("steps", str(stepped))]
    commands += [("diff", str(pair[0]), str(pair[1])), ("diff", str(flat), str(flat2))]
    table = run_cli_many(commands, cache=tmp_path / "cache")
    as_json = run_cli_many([(*c, "--format", "json") for c in commands], cache=tmp_path / "cache")
    for args, shown, doc in zip(commands, table, as_json):
        assert shown.returncode == 0 and doc.returncode == 0, (args, shown.stderr, doc.stderr)
        json.loads(doc.stdout)  # still one valid document
        [wrapped] = window_lines(shown.stdout)  # the terminal may wrap the line
        [said] = window_lines(doc.stderr)
        line = said.removeprefix("opscope: ")
        assert line.startswith(wrapped), (args, wrapped, line)
        if args[0] == "steps":
            assert line == "window: each row's own step, its ProfilerStep#N's start to end"
        elif args[0] == "diff":
            assert ("the compared steps" in line) == (args[1] == str(pair[0])), line
        elif args[1] == str(stepped):  # small_gpu_trace's steps: [0, 1000) and [1000, 3000) µs
            assert line.startswith("window: 2 steps, ProfilerStep#1 to #2, first step's start to last step's end "
                                   "(3.000 ms)"), line
        else:  # without steps: first event (conv2d at 100 µs) to last end (relu_kernel, 3050 µs)
            assert line.startswith("window: the whole trace, first to last event of any kind (2.950 ms): it has no "
                                   "steps (no ProfilerStep#N annotations, nor"), line
