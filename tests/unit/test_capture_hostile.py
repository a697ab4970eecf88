"""Issue 14, part 5: capture writes its files safely in a directory others may have touched."""

from __future__ import annotations

import json

from opscope.capture.runner import write_json_atomic


def test_run_json_never_follows_a_planted_symlink(tmp_path):
    out = tmp_path / "rec"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (out / ".run.json.tmp").symlink_to(victim)  # the old fixed temporary name
    write_json_atomic(out / "run.json", {"status": "ok"})
    assert victim.read_text() == "precious"
    assert not (out / "run.json").is_symlink()
    assert json.loads((out / "run.json").read_text()) == {"status": "ok"}
    # only run.json and the planted link remain: no temporary file left behind
    assert sorted(p.name for p in out.iterdir()) == [".run.json.tmp", "run.json"]
