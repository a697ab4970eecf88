"""JSON and CSV give every row unless -n is given; the terminal shows the command's first rows (its default)."""

from __future__ import annotations

import csv
import io
import json

from support.cli import run_cli_many
from support.shared import shared_trace

H100 = "tracelens/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
MI300 = "tracelens/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz"


def test_data_formats_give_every_row_unless_limited(tmp_path):
    path = str(shared_trace(H100))
    other = str(shared_trace(MI300))
    # the commands with a default limit, each on a trace with more rows than it: all rows asked with -n 0 first
    commands = [("ops", path), ("kernels", path), ("scope", path), ("code", path),
                ("query", path, "select name from events"),
                ("diff", path, other, "--table", "ops"), ("diff", path, other, "--table", "kernel-choice")]
    runs = run_cli_many([(*c, "--format", f, *n) for c in commands for f in ("json", "csv")
                         for n in ((), ("-n", "0"), ("-n", "3"))], cache=tmp_path / "cache")
    it = iter(runs)
    for command in commands:
        for fmt in ("json", "csv"):
            default, everything, three = next(it), next(it), next(it)
            for res in (default, everything, three):
                assert res.returncode == 0, (command, res.stderr)

            def count(res, fmt=fmt) -> int:
                if fmt == "json":
                    return len(json.loads(res.stdout))
                return len(list(csv.DictReader(io.StringIO(res.stdout))))

            n = count(everything)
            assert n > 3, command  # the trace has more rows than the limit asked
            assert count(default) == n, (command, fmt)
            assert count(three) == 3, (command, fmt)
