"""On real traces, every simulated saving of ``opscope advise`` is given back by ``opscope whatif`` with the
finding's change (within 1%), and every other finding says why it is estimated."""

from __future__ import annotations

import json

import pytest
from support.cli import run_cli_many
from support.shared import shared_trace

TRACES = ["kineto/samples/resnet50_num_workers_0/worker0.pt.trace.json.gz",
          "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz"]


@pytest.mark.parametrize("name", TRACES)
def test_whatif_gives_back_each_simulated_saving(tmp_path, name):
    path = shared_trace(name)
    [advised] = run_cli_many([("advise", str(path), "-f", "json")], cache=tmp_path)
    assert advised.returncode == 0, advised.stderr
    findings = json.loads(advised.stdout)
    simulated = [f for f in findings if f["saving_method"] == "simulated"]
    assert simulated, "no simulated finding on a trace with syncs or a DataLoader"
    for f in findings:
        if f["saving_method"] == "estimated" and f["saving_ns"] is not None:
            assert "not simulated: " in f["estimate"] and f["change"] is None
    runs = run_cli_many([("whatif", str(path), "-f", "json", *[a for part in f["change"].split()
                                                               for a in ("--change", part)]) for f in simulated],
                        cache=tmp_path)
    for finding, res in zip(simulated, runs):
        assert res.returncode == 0, res.stderr
        rows = json.loads(res.stdout)
        saved = sum(r["replayed_ns"] - r["predicted_ns"] for r in rows) / len(rows)
        assert saved == pytest.approx(finding["saving_ns"], rel=0.01, abs=1), (finding["rule"], finding["change"])
