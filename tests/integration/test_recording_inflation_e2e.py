"""A recording whose steps the profiler slowed says so wherever its times are shown: every table command run on
its trace says it once on stderr (summary, steps and advise in their own report, the others when loading)."""

from __future__ import annotations

import json

from support.cli import run_cli_many
from support.tracefiles import small_gpu_trace, write_trace

MS = 1_000_000


def recording(folder, times_ms):
    folder.mkdir()
    write_trace(folder / "t.pt.trace.json", small_gpu_trace())
    # steps 1..9: 1 warm-up, 2-4 recorded, 5-9 run without the profiler (opscope record's default schedule)
    run = {"step_times_ns": [round(t * MS) for t in times_ms], "recorded_steps": [2, 3, 4],
           "profiled_steps": [0, 1, 2, 3, 4], "traces": ["t.pt.trace.json"],
           "options": {"wait": 1, "warmup": 1, "active": 3, "repeat": 1}}
    (folder / "run.json").write_text(json.dumps(run))
    return folder / "t.pt.trace.json"


def test_every_command_says_an_inflated_recording_once(tmp_path):
    # medians by hand: recorded 190, 200, 210 -> 200 ms; unrecorded 98..102 -> 100 ms: 2.00x, and every recorded step
    # slower than every unrecorded one (the 95% interval of 3 against 5 steps: +88..+112 ms). Quiet: recorded
    # 101..104 -> 1.03x, differences -1..+6 ms: no difference. Fast: recorded 6 ms, 0.06x: faster, not inflation
    slow = recording(tmp_path / "slow", [90, 200, 210, 190, 100, 98, 102, 99, 101])
    quiet = recording(tmp_path / "quiet", [90, 104, 101, 103, 100, 98, 102, 99, 101])
    fast = recording(tmp_path / "fast", [90, 6, 6, 6, 100, 98, 102, 99, 101])
    commands = [("summary",), ("steps",), ("advise",), ("ops",), ("kernels",), ("gpu",), ("scope",), ("memory",)]
    for trace, expected in ((slow, 1), (quiet, 0), (fast, 0)):
        results = run_cli_many([(*c, str(trace), "--format", "json") for c in commands], cache=tmp_path / "cache")
        for command, res in zip(commands, results):
            assert res.returncode in (0, 2), (command, res.stderr)
            said = [line for line in res.stderr.splitlines()
                    if "recorded steps ran" in line and "inflated by the profiler" in line]
            assert len(said) == expected, (command, res.stderr)
